"""Holding ``train.utd_ratio`` in async mode: the robots wait for the learner when it falls behind.

Why: a simulator steps far faster than the learner updates. Ungated, the async pipeline ran
`configs/sim_insert.yaml` at 4,920 updates for 20,266 env steps, a UTD of 0.24 against the configured 1,
and learned accordingly worse than the config promised. In sync mode the controller alternates collecting
and updating, so the ratio holds by construction; async mode needs a brake on the robots.

How, with Ray and nothing of our own: the controller, which runs the updates, grants each env worker an
allowance of train steps after every chunk of updates (a Ray actor call, ``EnvWorker.allow``). The allowance
(`step_allowance`) is what the updates done so far pay for, plus ``train.utd_slack`` updates' worth ahead, so
the robots keep stepping while the next chunk trains. An env worker that has used its allowance waits
(`UtdGate.wait`), on the condition it already has:

- a simulated env before its next step (nothing is moving, so waiting mid-episode costs nothing);
- a real arm, or a simulated one a person is driving, only between episodes: an arm is never stopped
  mid-episode for the learner, and a person is never frozen mid-motion.

The time spent waiting is counted, and the controller logs the achieved UTD (``train/utd``).
"""

from __future__ import annotations

import math
import threading

from rlhw.robot.clock import SYSTEM_CLOCK, Clock

WAKE_S = 0.5  # a waiting worker re-checks `stopping` this often, whatever the notifications


def updates_owed(env_steps: int, updates: int, utd_ratio: float, learning_starts: int) -> int:
    """The updates that ``env_steps`` collected steps pay for beyond the ``updates`` done: ``utd_ratio`` per step
    after ``learning_starts``, none before. The one formula of both runners (`rlhw.rl.local`, the controller);
    `step_allowance` is its inverse."""
    return max(0, int(utd_ratio * (env_steps - learning_starts)) - updates)


def step_allowance(
    updates: int, utd_ratio: float, learning_starts: int, slack_updates: int, base_steps: int, num_env: int
) -> int:
    """Train steps one of ``num_env`` env workers may have collected in this run, given the ``updates`` done:
    ``learning_starts + (updates + slack_updates) / utd_ratio`` steps over all robots, less the ``base_steps``
    of the runs this one resumes, shared evenly (rounded up)."""
    total = learning_starts + (updates + slack_updates) / utd_ratio
    return max(0, math.ceil((total - base_steps) / num_env))


class UtdGate:
    """One env worker's allowance of train steps, guarded by the worker's own condition ``cond``.

    ``allowance`` None: no gate (sync mode, or no grant yet). It only grows: a late grant computed from an
    older update count never takes steps back. ``waited_s`` and ``waits``: the time and the number of times it
    held the worker back."""

    def __init__(self, cond: threading.Condition, clock: Clock = SYSTEM_CLOCK):
        self.cond, self.clock = cond, clock
        self.allowance: int | None = None
        self.waited_s = 0.0
        self.waits = 0

    def allow(self, steps: int) -> None:
        """Raise the allowance to ``steps`` (any thread) and wake a waiting loop."""
        with self.cond:
            self.allowance = max(int(steps), self.allowance or 0)
            self.cond.notify_all()

    def blocks(self, collected: int) -> bool:
        return self.allowance is not None and collected >= self.allowance

    def wait(self, collected: int, stopping) -> bool:
        """With ``cond`` held: block while ``collected`` train steps use up the allowance, until a grant or until
        ``stopping()`` says to give up. Returns whether it waited."""
        if not self.blocks(collected):
            return False
        t0 = self.clock.now()
        self.waits += 1
        while self.blocks(collected) and not stopping():
            self.cond.wait(WAKE_S)
        self.waited_s += self.clock.now() - t0
        return True
