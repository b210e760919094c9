"""Episode bookkeeping for the n env instances of the episode loop (`rlhw.rl.episode_loop`).

The loop steps its instances together (an env worker with ``env.num_envs`` > 1: one env step, one
channel message per step; one instance for a real arm and the local runner), but each instance lives its
own episodes. This class keeps, per instance, what kind of episode
it is in and that episode's return, success and length, and decides the kind of each new episode.
It holds no locks and does no I/O, so the rules can be tested without Ray or a simulator.

The rules (the controller's demand is passed in: train ``budget`` left, ``unlimited`` in async mode,
``eval_pending`` eval episodes wanted and not yet finished):

- the kind of an episode is decided when it starts (the start of a collection phase, or an instance's
  same-step autoreset) and never changes: a robot is never paused mid-episode;
- ``eval`` while eval episodes are still wanted: ``eval_pending`` minus the eval episodes already running;
- else ``train`` while the budget lasts: ``budget`` minus the steps the running train episodes may
  still take (``max_episode_steps - length`` each) must be positive. Without that reservation n
  instances would each start an episode on the same budget and collect up to n times too much;
  with one instance the rule is exactly "budget > 0 at episode start";
- else ``idle``: the env worker gives the instance a zero action and discards its steps until its
  episode ends (one instance of a batch cannot be reset alone); when every instance is idle, the
  worker is idle.
"""

from __future__ import annotations

import numpy as np

from rlhw.rl.episodes import EpisodeKind

#: An instance is in a train or an eval episode (recorded as that `EpisodeKind`), or idle (nothing recorded).
TRAIN, EVAL, IDLE = EpisodeKind.TRAIN, EpisodeKind.EVAL, "idle"


class Instances:
    def __init__(self, num_envs: int, max_episode_steps: int):
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.n = int(num_envs)
        self.max_episode_steps = int(max_episode_steps)
        self.kind = [IDLE] * self.n
        self.ret = np.zeros(self.n, np.float64)
        self.success = np.zeros(self.n, bool)
        self.length = np.zeros(self.n, np.int64)
        self.interventions = np.zeros(self.n, np.int64)  # steps an operator executed

    # ---- queries
    def rows(self, kind: str | None = None) -> list[int]:
        """Instances in an episode of ``kind`` (train or eval; None: either), in index order."""
        if kind is None:
            return [i for i, k in enumerate(self.kind) if k != IDLE]
        return [i for i, k in enumerate(self.kind) if k == kind]

    def all_idle(self) -> bool:
        return all(k == IDLE for k in self.kind)

    def eval_running(self) -> int:
        return sum(k == EVAL for k in self.kind)

    def train_reserved(self) -> int:
        """Steps the running train episodes may still take (each ends by ``max_episode_steps``)."""
        return int(
            sum(max(self.max_episode_steps - int(self.length[i]), 0) for i, k in enumerate(self.kind) if k == TRAIN)
        )

    # ---- episode starts and ends
    def choose(self, budget: int, unlimited: bool, eval_pending: int) -> str:
        """The kind a new episode starting now gets (see the module docstring)."""
        if eval_pending - self.eval_running() > 0:
            return EVAL
        if unlimited or budget - self.train_reserved() > 0:
            return TRAIN
        return IDLE

    def start(self, i: int, kind: str) -> None:
        if kind not in (TRAIN, EVAL, IDLE):
            raise ValueError(f"unknown episode kind {kind!r}")
        self.kind[i] = kind
        self.ret[i], self.success[i], self.length[i], self.interventions[i] = 0.0, False, 0, 0

    def step(self, rewards, successes, intervened=False) -> None:
        """Count one step of every instance (idle ones too: their length says when their episode ends)."""
        self.ret += np.asarray(rewards, np.float64)
        self.success |= np.asarray(successes, bool)
        self.length += 1
        self.interventions += np.broadcast_to(np.asarray(intervened, bool), (self.n,))

    def finish(self, i: int) -> tuple[str, tuple[float, bool, int, int]]:
        """End instance i's episode: its kind and ``(return, success, length, intervened steps)``; the instance
        is idle after."""
        kind = self.kind[i]
        result = (float(self.ret[i]), bool(self.success[i]), int(self.length[i]), int(self.interventions[i]))
        self.start(i, IDLE)
        return kind, result

    def clear(self) -> None:
        """Forget every running episode (a new collection phase resets all instances)."""
        for i in range(self.n):
            self.start(i, IDLE)
