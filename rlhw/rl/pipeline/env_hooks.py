"""The env worker's hooks into the one episode loop (`rlhw.rl.episode_loop.LoopHooks`), all in the loop thread:
the policy over the step lane (each observation goes out with the previous step's train transitions, the
actions and their versions come back), the work budget, the UTD gate inside an episode, the loop timer and
the poll's outbox."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rlhw.rl.episode_loop import LoopHooks
from rlhw.rl.loop_health import LoopTimer
from rlhw.rl.pipeline.lane import EnvLaneEnd
from rlhw.rl.pipeline.messages import EnvStep
from rlhw.rl.pipeline.work_budget import Outbox, WorkBudget
from rlhw.rl.replay import TransitionBatch
from rlhw.robot.step import Step
from rlhw.runtime.isolation import GcGuard


class EnvLoopHooks:
    """The loop hooks of env worker ``rank`` (``num_envs`` instances). ``step`` is the env's step as the loop
    takes it (refusals end the episode: `RefusedSteps`); ``training()``: a train episode is running;
    ``wait_inside()``: the UTD gate may hold the loop inside an episode. ``lane`` is set by the worker
    (`EnvWorker.attach_lane`)."""

    def __init__(
        self,
        rank: int,
        num_envs: int,
        work: WorkBudget,
        outbox: Outbox,
        timer: LoopTimer,
        gc_guard: GcGuard,
        step: Callable[[np.ndarray], Step | None],
        training: Callable[[], bool],
        wait_inside: Callable[[], bool],
    ):
        self.rank, self.num_envs, self.work, self.outbox = rank, num_envs, work, outbox
        self.timer, self.gc_guard = timer, gc_guard
        self.step_env, self.training, self.wait_inside = step, training, wait_inside
        self.lane: EnvLaneEnd | None = None
        self.pending: TransitionBatch | None = None  # train transitions that go with the next observation
        self.first_obs = True

    def hooks(self) -> LoopHooks:
        return LoopHooks(
            act=self.act,
            choose=self.work.choose,
            report=self.outbox.report,
            sink=self.sink,
            step=self.step,
            note=self.outbox.note,
            stepped=self.stepped,
            stopping=lambda: self.work.stopping,
        )

    def start_run(self) -> None:
        self.first_obs = True

    def end_run(self) -> None:
        """The last transitions of a run of the loop, when no instance wants an action any more."""
        if self.pending is not None:
            self.put(None, (), np.zeros(0, bool), self.pending)
        self.pending = None

    def act(self, obs: dict, rows: list[int], evaluating: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The policy, on the rollout worker or next to the arm: the observations go out with the previous step's
        train transitions, the actions and their versions come back."""
        self.put(obs, rows, evaluating, self.pending)
        self.pending = None
        if self.first_obs:
            self.timer.episode_started()
            self.first_obs = False
        elif self.num_envs > 1:  # whose episodes may never all end at once, giving the wait for work no chance
            self.gc_guard.if_due()  # the idle part of the step: the policy is computing the action
        answer = self.lane.actions()
        self.timer.actions_received()
        return np.asarray(answer.actions, np.float32), np.asarray(answer.versions, np.int64)

    def sink(self, transitions: TransitionBatch) -> None:
        """A step's train transitions: counted against the budget, sent with the next observation."""
        self.work.count_train_steps(len(transitions["reward"]))
        self.pending = transitions

    def step(self, actions: np.ndarray) -> Step | None:
        """The env's step, or None when it refused or timed out (the episode loop then ends the running
        episode(s) there, truncated). A simulator waits for the learner before its next train step."""
        if self.wait_inside() and self.training():
            self.work.hold_for_learner()
        return self.step_env(actions)

    def stepped(self, step: Step) -> None:
        """After each env step: the loop timer, and where a simulator judged the step, the judge's report."""
        self.timer.stepped(step.timing)
        if step.judge_success is not None:
            self.outbox.judged(step, self.training())

    def put(self, obs: dict | None, rows, evaluating, transitions: TransitionBatch | None) -> None:
        self.lane.send(
            EnvStep(
                env=self.rank,
                obs=obs,
                rows=tuple(rows),
                evaluating=np.asarray(evaluating, bool),
                transitions=transitions,
            )
        )
