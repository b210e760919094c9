"""The one episode loop: n env instances stepped together, for the local runner and the pipeline's env worker.

Both ask the same of an env: reset, ask a policy for the instances in an episode, step, record what the arm
executed, hand the train transitions on, report finished episodes. One loop does it, so a rule about episodes
(what is recorded, which policy version a step carries, what a refused step ends) holds everywhere.

- ``n == 1`` (a real arm; the local runner): no autoreset. When the episode ends the loop returns, and the
  caller waits for more work before the next `EpisodeLoop.run` resets, so nothing moves an arm unless asked.
- ``n > 1`` (batched simulators): the env resets an ended instance in the same step; the loop reports that
  episode, takes its last observation from the step's final observations, and starts the instance's next
  episode, whose kind (train, eval or idle: `rlhw.rl.instances`) the caller chooses. It returns when every
  instance is idle.

`BatchView` gives the loop one type of reset and step whatever the env is (`RemoteEnv.typed`, `RobotEnv`,
`BatchedEnv`, a test env: any `EnvContract`): `Reset` and `Step` (rlhw/robot/step.py), the types the env server
writes to the wire.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from rlhw.rl.episodes import EpisodeRecorder
from rlhw.rl.fault_signal import AS_REPORTED, FaultSignal
from rlhw.rl.instances import EVAL, IDLE, TRAIN, Instances
from rlhw.rl.replay import TransitionBatch, transition_batch
from rlhw.rl.spaces import neutral_actions
from rlhw.robot.step import EnvContract, Step

EpisodeResult = tuple[float, bool, int, int]
"""A finished episode: (return, success, length, steps an operator executed)."""

Act = Callable[[dict, list, np.ndarray], tuple[np.ndarray, np.ndarray]]
"""The policy: ``act(obs_rows, rows, evaluating)`` -> (actions (k, ...) float32, versions (k,) int64) for the k
instances ``rows`` that are in an episode; ``evaluating[j]`` says row j's episode is an eval one."""


def _rows(obs: Mapping, rows) -> dict:
    return {k: v[rows] for k, v in obs.items()}


class BatchView:
    """An env of the contract (`EnvContract`) as n instances: observations, actions and flags with a leading
    dimension n, whatever ``num_envs`` is. ``spec`` is the env's (per-instance shapes, ``num_envs``); with
    ``num_envs == 1`` the env is a single env (a RemoteEnv of one instance, a RobotEnv), which takes one
    unbatched action."""

    def __init__(self, env: EnvContract):
        self.env, self.spec = env, env.spec
        self.num_envs = int(self.spec.num_envs)

    def reset(self, seed: int | None) -> Mapping[str, np.ndarray]:
        return self.env.reset(seed=seed).obs

    def step(self, actions: np.ndarray) -> Step:
        return self.env.step(actions[0] if self.num_envs == 1 else actions)


def _ignore(*_) -> None:
    return None


class RefusedSteps:
    """A step hook: ``step(actions)``, or None where the env refused the step (the env server's error, or in
    process what the server would refuse: a safety violation, a robot fault), so that the loop ends the running
    episode(s) there, truncated, and what was recorded stays on disk. A dead server (``server_dead()``) raises:
    its owner restarts it or gives up. ``in_a_row`` counts refusals since the last accepted step; ``last`` is
    the last refusal's error, which the owner raises once too many came in a row. The env worker's and
    `rlhw eval`'s rule, one implementation."""

    def __init__(
        self,
        step: Callable[[np.ndarray], Step],
        server_dead: Callable[[], bool],
        note: Callable[[str], None],
        consequence: str = "episode truncated",
    ):
        self.step, self.server_dead, self.note, self.consequence = step, server_dead, note, consequence
        self.in_a_row = 0
        self.last: Exception | None = None

    def __call__(self, actions: np.ndarray) -> Step | None:
        from rlhw.env.client import EnvServiceError
        from rlhw.errors import RobotFault, SafetyViolation

        try:
            stepped = self.step(actions)
        except (EnvServiceError, SafetyViolation, RobotFault) as e:
            if self.server_dead():
                raise
            self.note(f"step refused, {self.consequence}: {e}")
            self.in_a_row += 1
            self.last = e
            return None
        self.in_a_row = 0
        return stepped


@dataclass
class LoopHooks:
    """What the loop's caller decides; the loop does everything else. Each hook is called in the loop's thread."""

    act: Act
    choose: Callable[[Instances], str]  # the kind of an episode starting now (the book says what is running)
    report: Callable[[str, EpisodeResult], None]  # a train or eval episode ended (or was cut short)
    sink: Callable[[TransitionBatch], None] | None = None  # each step's train transitions
    step: Callable[[np.ndarray], Step | None] | None = None  # None: the view's; a None result: refused
    note: Callable[[str], None] = _ignore  # a fault an instance reported
    stepped: Callable[[Step], None] = _ignore  # after each env step, with the step (the loop timer)
    stopping: Callable[[], bool] = lambda: False


class EpisodeLoop:
    """The loop over one env's n instances: their bookkeeping (`Instances`) and their recorders persist across
    `run` calls; ``meta`` goes into every recorded episode (with ``instance`` where n > 1). ``fault_signal``
    (``train.fault_signal``) says how a train step that a safety fault ended is handed to the sink; recorders
    keep the step as the env reported it, with the fault's kind."""

    def __init__(
        self,
        view: BatchView,
        max_episode_steps: int,
        recorders: list[EpisodeRecorder] | None = None,
        meta: dict | None = None,
        fault_signal: FaultSignal = AS_REPORTED,
    ):
        self.view, self.n = view, view.num_envs
        self.fault_signal = fault_signal
        self.book = Instances(self.n, max_episode_steps)
        self.recorders, self.meta = recorders, dict(meta or {})
        self.autoreset = self.n > 1
        self._idle_action = neutral_actions(view.spec.action, self.n)  # for idle instances of a batch

    def run(self, hooks: LoopHooks, seed: int | None) -> None:
        """Reset every instance and step them until every one is idle, the caller stops, or a step is refused
        (the running episodes end there, truncated; what was recorded stays on disk)."""
        book, step = self.book, hooks.step or self.view.step
        obs = self._start(hooks, seed)
        rows = book.rows()
        while rows:
            actions, versions = self._act(hooks, obs, rows)
            stepped = step(actions)
            if stepped is None:
                self._end_running(hooks)
                return
            hooks.stepped(stepped)
            book.step(stepped.reward, stepped.outcome, stepped.intervened)
            last = stepped.last
            self._record(rows, stepped, last, versions)
            self._note_faults(hooks, stepped)
            if hooks.sink is not None and (train := book.rows(TRAIN)):
                hooks.sink(self._transitions(obs, stepped, last, train))
            if hooks.stopping():
                self._end_running(hooks)
                return
            self._finish_ended(hooks, stepped)
            obs, rows = stepped.obs, book.rows()

    def _transitions(self, obs: dict, s: Step, last: Mapping, train: list[int]) -> TransitionBatch:
        """The train instances' transitions, fault steps stored as ``fault_signal`` says."""
        reward, terminated = self.fault_signal.stored(s.reward[train], s.terminated[train], [s.fault[i] for i in train])
        return transition_batch(
            _rows(obs, train), _rows(last, train), s.executed[train], reward, terminated, s.intervened[train]
        )

    def _start(self, hooks: LoopHooks, seed: int | None) -> dict:
        """Reset every instance (a batch gives instance i seed + i) and choose each one's episode kind."""
        obs = self.view.reset(seed)
        self.book.clear()
        for i in range(self.n):
            self._begin(i, obs, hooks.choose(self.book))
        return obs

    def _begin(self, i: int, obs: dict, kind: str) -> None:
        self.book.start(i, kind)
        if self.recorders is not None and kind != IDLE:
            meta = {**self.meta, "instance": i} if self.n > 1 else self.meta
            self.recorders[i].begin({k: v[i] for k, v in obs.items()}, kind=kind, meta=meta)

    def _act(self, hooks: LoopHooks, obs: dict, rows: list[int]) -> tuple[np.ndarray, np.ndarray]:
        """Every instance's action (idle ones get the neutral action) and the policy version behind it."""
        evaluating = np.array([self.book.kind[i] == EVAL for i in rows])
        answer, answer_versions = hooks.act(_rows(obs, rows), rows, evaluating)
        actions = self._idle_action.copy()
        actions[rows] = answer
        versions = np.full(self.n, -1, np.int64)
        versions[rows] = answer_versions
        return actions, versions

    def _record(self, rows: list[int], s: Step, last: Mapping, versions: np.ndarray) -> None:
        """The step of each instance in an episode: the executed action, and -1 as the version where an operator
        acted instead of the policy."""
        if self.recorders is None:
            return
        for i in rows:
            self.recorders[i].step(
                s.executed[i],
                s.reward[i],
                s.terminated[i],
                s.truncated[i],
                {k: v[i] for k, v in last.items()},
                s.success[i],
                intervened=s.intervened[i],
                policy_version=-1 if s.intervened[i] else versions[i],
                fault=s.fault[i],
                judge_success=None if s.judge_success is None else bool(s.judge_success[i]),
                operator_verdict=s.notes[i].operator_verdict if s.notes else None,
            )

    def _note_faults(self, hooks: LoopHooks, s: Step) -> None:
        for i in range(self.n):
            if fault := s.fault_text(i):
                hooks.note(f"instance {i}: {fault}" if self.n > 1 else fault)

    def _finish_ended(self, hooks: LoopHooks, s: Step) -> None:
        """Report each ended episode; with autoreset, start the instance's next one (the env already reset it)."""
        for i in np.flatnonzero(s.ended).tolist():
            self._finish(hooks, i)
            if self.autoreset:
                self._begin(i, s.obs, hooks.choose(self.book))

    def _finish(self, hooks: LoopHooks, i: int) -> None:
        kind, result = self.book.finish(i)
        if kind != IDLE:
            if self.recorders is not None:
                self.recorders[i].end()
            hooks.report(kind, result)

    def _end_running(self, hooks: LoopHooks) -> None:
        """End every running episode where it is (a refused step, or stop): report it, finish its file."""
        for i in self.book.rows():
            self._finish(hooks, i)
