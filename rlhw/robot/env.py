"""`RobotEnv`: one task on one arm (plus cameras), behind the safety layer. The env server hosts these.

Contract used by the env service (rlhw.env) and the RL pipeline:
- ``spec`` -> rlhw.robot.spec.EnvSpec (per-instance shapes, num_envs == 1 for a single RobotEnv)
- ``reset(seed=None) -> Reset`` (rlhw/robot/step.py: one instance, a leading instance axis of 1): the first
  observation (name -> np.ndarray matching ``spec.observations``), its capture times (wall-clock seconds), phase
  timings and success; its ``notes`` (a `ResetNotes`) say ``frame_index`` and the ``faults`` handled on the way.
- ``step(action) -> Step`` (rlhw/robot/step.py: one instance, a leading instance axis of 1), ``action`` a
  float32 array matching ``spec.action``. A step says its capture times, phase timings, success, fault (None, or
  the `FaultKind` that truncated the episode, with its message), the executed action (what went to the safety
  layer: the client's action, or an operator's) and ``intervened``; with a simulated arm ``judge_success``, the
  evaluation judge's ground truth (`Task.judge`), which no observation, reward or done flag reads
  (``env.sim_state: hidden``, rlhw/robot/rehearsal.py). Its ``notes`` (a `StepNotes`, rlhw/robot/step.py) say
  ``clipped``, ``episode_step``, ``frame_index``, ``teleop_events``, ``operator_label`` (see
  rlhw/robot/takeover.py), ``reward_classifier`` (when a classifier judged), ``operator_verdict`` (the operator's
  word on a success the classifier called: `TeleopDevice.verdict`) and ``fault_cause`` (when the env locked).
- ``stop()`` halts the arm now; ``status()`` returns a JSON-able dict (read-only, never moves);
  ``close()`` stops and releases hardware.

This module orchestrates; the seams are modules of their own: what the env observes and its spec
(rlhw/robot/observation.py), how an episode starts (reset_procedure.py), what a fault does (fault_handling.py),
and what the operator may see and do (operator_view.py, takeover.py).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from rlhw.config.env import EnvConfig
from rlhw.errors import ErrorReason, FaultKind, RobotFault, SafetyViolation
from rlhw.robot.arm import Arm, ArmState
from rlhw.robot.camera import Camera
from rlhw.robot.clock import SYSTEM_CLOCK, Clock
from rlhw.robot.fault_handling import FaultHandler
from rlhw.robot.observation import IMAGE_PREFIX, Observer, env_spec, image_key
from rlhw.robot.operator_view import EnvOperatorView
from rlhw.robot.rehearsal import MeasuredArm, check_rehearsal
from rlhw.robot.reset_procedure import ResetProcedure
from rlhw.robot.safety import SafetyLayer
from rlhw.robot.step import ClassifierScore, Reset, ResetNotes, Step, StepNotes
from rlhw.robot.takeover import Choice, Takeover
from rlhw.robot.task import Task
from rlhw.robot.teleop import Operator

log = logging.getLogger(__name__)

__all__ = ["IMAGE_PREFIX", "RobotEnv", "image_key"]


class RobotEnv:
    """One task on one arm, behind the safety layer. See the module docstring for the contract.

    Time. With a real-time arm (``arm.realtime``), ``step`` sends the command, sleeps on ``clock``
    (rlhw/robot/clock.py; the system's monotonic clock unless a test injects one) until the
    control period (1 / ``env.control_hz``) that began at the previous step ends, then observes; a
    step that starts late resynchronises instead of bursting, and the step's ``timing["late"]`` says by
    how much. With a simulated arm it calls ``arm.advance(period)`` instead of sleeping, and then, when a
    person drives it (a teleop device whose ``operator`` is `Operator.HUMAN`), also sleeps to the end of
    the period, as it does with ``env.pace: real_time``: ``paced`` says which (docs/teleop.md, "Pacing").

    Faults. A `RobotFault` from the driver, a camera or a state check ends the episode: the arm is
    stopped and recovered (see rlhw.robot.safety), ``step`` returns ``truncated`` with
    ``fault`` = its `FaultKind` and its ``fault_message``, and the observation is the last good
    one (its capture times say how old it is). When the safety layer locks, that step reports
    ``fault = FaultKind.LOCKED`` (the ``fault_cause`` extra keeps the kind that led to it) and every later
    ``reset``/``step`` raises `SafetyViolation` with the reason. Choice: raising rather than returning
    truncated forever, so no training loop spins silently against a locked arm. What a fault step teaches
    the critic is the learner's choice (``train.fault_signal``, rlhw/rl/fault_signal.py), not the env's.

    Nothing moves unless asked: construction and ``connect`` send no motion; ``reset`` moves home
    (slowly) and ``step`` moves by one bounded step. ``step`` before ``reset``, after the episode
    ended, or after ``stop()`` raises `SafetyViolation` (call ``reset``).
    """

    def __init__(
        self,
        task: Task,
        arm: Arm,
        cameras: Mapping[str, Camera] | None,
        config: EnvConfig,
        *,
        seed: int | None = None,
        robot: str = "",
        clock: Clock = SYSTEM_CLOCK,
    ):
        self.config = config
        self.task = task
        self.arm = arm
        self.cameras: dict[str, Camera] = dict(cameras or {})
        self.period = 1.0 / config.control_hz
        self.safety = SafetyLayer(arm, config.safety, self.period)
        self.seed = config.seed if seed is None else seed
        self._rng = np.random.default_rng(self.seed)
        check_rehearsal(task, config)
        # A rehearsal's task sees only what a real cell measures; the judge keeps the simulator (self.arm).
        task.bind(MeasuredArm(arm) if config.sim_state == "hidden" else arm)
        self.judge = None  # the learned success classifier (env.reward.classifier), loaded once, here
        if config.reward.classifier is not None:
            from rlhw.vision.classifier import SuccessJudge  # torch only when a classifier is configured

            self.judge = SuccessJudge.from_config(config.reward, tuple(self.cameras))
        # The seams: observation (rlhw/robot/observation.py), the reset procedure (reset_procedure.py) and fault
        # handling (fault_handling.py); this class orchestrates them.
        self.observer = Observer(task, arm, self.cameras, self.safety, config, clock)
        self.resetter = ResetProcedure(task, arm, self.safety, self.observer, config, clock, bool(arm.realtime))
        self.faults = FaultHandler(self.safety, self.cameras, config)
        self.clock = clock  # paces real-time steps and times every phase (rlhw/robot/clock.py)
        self.realtime = bool(arm.realtime)
        self.connected = False
        self.closed = False
        self.episode_active = False
        self.episode_step = 0
        self.episodes = 0
        self._ended_because = "call reset() first"
        self._deadline = 0.0
        self.spec = env_spec(task, arm, self.cameras, config, robot)
        # What the operator at this cell may see and do (rlhw/robot/operator_view.py), and the operator's device
        # (env.teleop; None = no operator), built from that view alone. See rlhw/robot/takeover.py.
        self.operator_view = EnvOperatorView(task, arm, config, self.seed, self.spec.action.shape, self._moment)
        self.takeover: Takeover | None = Takeover.from_config(config.teleop, self.operator_view)

    @property
    def clock(self) -> Clock:
        """The clock the env paces and times on; a test may swap it (every part then uses the new one)."""
        return self._clock

    @clock.setter
    def clock(self, clock: Clock) -> None:
        self._clock = self.observer.clock = self.resetter.clock = clock

    @property
    def realtime(self) -> bool:
        """The arm keeps its own time (a real arm, franky-sim): the env sleeps, where a simulator is advanced."""
        return self._realtime

    @realtime.setter
    def realtime(self, realtime: bool) -> None:
        self._realtime = self.resetter.realtime = bool(realtime)

    @property
    def last_fault(self) -> dict[str, Any] | None:
        """The latest fault handled, for ``status()``."""
        return self.faults.last

    @property
    def paced(self) -> bool:
        """Steps keep ``env.control_hz`` on the clock: a real arm's time, a simulator told to keep it
        (``env.pace: real_time``, a rehearsal of a cell's timing), or a person at a simulated arm's device (the
        device's declared `Operator`), who could not react to a simulator running flat out."""
        return (
            self.realtime
            or self.config.pace == "real_time"
            or (self.takeover is not None and self.takeover.operator is Operator.HUMAN)
        )

    # -- lifecycle -----------------------------------------------------------------------------
    def connect(self) -> None:
        """Open the arm link and the cameras. Sends no motion."""
        if self.connected:
            return
        self.arm.connect(timeout_s=self.config.connect_timeout_s)
        for cam in self.cameras.values():
            cam.open(timeout_s=self.config.connect_timeout_s)
        if self.takeover is not None:
            self.takeover.open()
        self.connected = True

    def close(self) -> None:
        """Stop the arm and release arm and cameras. Safe to call twice."""
        if self.closed:
            return
        self.closed = True
        self.episode_active = False
        self.safety.safe_stop()
        if self.takeover is not None:
            self.takeover.close()
        for thing in [*self.cameras.values(), self.arm]:
            try:
                thing.close()
            except Exception as e:  # closing must go on for the other devices
                log.warning("close() of %s failed: %s", thing, e)

    def __enter__(self) -> RobotEnv:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _abort(self, why: str) -> None:
        self.safety.safe_stop()
        self.episode_active = False
        self._ended_because = why

    def stop(self) -> None:
        """Halt the arm now (hold pose) and end the episode; the next call must be ``reset``."""
        self.safety.safe_stop()
        if self.episode_active:
            self._ended_because = "the arm was stopped by stop(); call reset()"
        self.episode_active = False

    def unlock(self) -> None:
        """Operator action after inspecting a locked robot; the next call must be ``reset``."""
        self.safety.unlock()

    # -- episode -------------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> Reset:
        if self.closed:
            raise SafetyViolation("reset() on a closed env", ErrorReason.EPISODE_ENDED)
        self._raise_if_locked()
        t0 = self.clock.now()
        if seed is not None:
            self._rng = np.random.default_rng(seed)
        if not self.connected:
            self.connect()
        self.episode_active = False
        if self.takeover is not None:
            self.takeover.reopen()  # a device that died in the last episode: RobotFault(FaultKind.TELEOP) if still gone
            self.takeover.start_episode()
        faults: list[str] = []
        while True:
            try:
                timing = self.resetter.run(self._rng)
                break
            except RobotFault as fault:
                faults.append(str(fault))
                self.faults.handle(fault)
                self._raise_if_locked()
            except BaseException:
                self._abort("reset failed with an unexpected error (see the exception); call reset()")
                raise
        self.episode_active = True
        self.episode_step = 0
        self.episodes += 1
        timing["total"] = self.clock.now() - t0
        self._deadline = self.clock.now()
        success = bool(self.task.success(self.observer.state))
        notes = ResetNotes(frame_index=dict(self.observer.frame_index), faults=tuple(faults))
        return Reset.one(self.observer.copy(), self.observer.stamps, success, timing, notes)

    def step(self, action) -> Step:
        self._raise_if_locked()
        if not self.episode_active:
            raise SafetyViolation(
                f"step() refused: no active episode ({self._ended_because})", ErrorReason.EPISODE_ENDED
            )
        action = self._check_action(action)
        t0 = self.clock.now()
        timing: dict[str, float] = {}
        if self.paced:  # how old the observation this action answers is, as the action arrives
            timing["obs_age"] = t0 - self.observer.observed_at
        clipped = False
        choice = None
        try:
            if self.takeover is not None:
                choice = self.takeover.choose(action)  # the operator's action replaces the client's while active
                action = choice.action
            cmd = self.task.command(action, self.observer.state)
            report = self.safety.move_to(cmd.position, self.observer.state, self.task.orientation)
            clipped = report.clipped
            if cmd.gripper_width is not None:
                clipped = self.safety.set_gripper(cmd.gripper_width) or clipped
            t1 = self.clock.now()
            timing["command"] = t1 - t0
            late = self._wait_period()
            if self.paced:  # a deadline kept or missed; a free simulator has none (its hit rate would say 100 %)
                timing["late"] = late
            t2 = self.clock.now()
            timing["wait"] = t2 - t1
            state = self.observer.take()
            timing["observe"] = self.clock.now() - t2
        except RobotFault as fault:
            sent = None if self.takeover is not None and choice is None else action  # None: the device died first
            return self._fault_step(fault, t0, timing, sent, choice)
        except BaseException:
            # A bug or an unexpected driver error: never leave the arm tracking a target nobody owns.
            self._abort("an unexpected error ended the episode (see the exception); call reset()")
            raise
        self.safety.note_clean_step()
        self.episode_step += 1
        reward, success, terminated, truncated, verdict = self._outcome(state, choice, timing)
        score = operator_verdict = None
        if verdict is not None:
            score = ClassifierScore(verdict.probability, verdict.threshold)
            if verdict.success and self.takeover is not None:  # asked while the episode is still the operator's
                operator_verdict = self.takeover.verdict()
        if terminated or truncated:
            self.episode_active = False
            self._ended_because = "the episode ended; call reset()"
        timing["total"] = self.clock.now() - t0
        notes = self._notes(choice, clipped=clipped, reward_classifier=score, operator_verdict=operator_verdict)
        return self._result(reward, terminated, truncated, success, timing, action, choice, state, notes)

    def use_classifier(self, path: str) -> None:
        """Judge success with the classifier in ``path`` from the next step on (a retrained one, between episodes:
        rlhw/rl/classifier_refresh.py)."""
        from rlhw.vision.classifier import SuccessJudge

        self.judge = SuccessJudge.from_config(self.config.reward, tuple(self.cameras), path=path)

    def _outcome(self, state: ArmState, choice: Choice | None, timing: dict[str, float]):
        """(reward, success, terminated, truncated, classifier verdict) of a clean step: the task's, then the
        classifier's verdict where configured, then the operator's mark; a sparse reward follows the final success."""
        reward = float(self.task.reward(state))
        success = bool(self.task.success(state))
        terminated = bool(self.task.terminated(state))
        obs = self.observer.obs
        verdict = self.judge.judge({c: obs[image_key(c)] for c in self.judge.cameras}) if self.judge else None
        if verdict is not None:  # the classifier decides success (and the sparse reward when configured)
            timing["classifier"], success = verdict.seconds, verdict.success
            terminated = terminated or (success and self.config.reward.terminate_on_success)
            reward = float(success) if self.config.reward.decides == "success_and_reward" else reward
        truncated = not terminated and (
            self.episode_step >= self.config.max_episode_steps or bool(self.task.truncated(state))
        )
        if choice is not None and choice.ends_episode:  # the operator ended it (docs/teleop.md)
            success = choice.label == "success" or (success and choice.label != "failure")
            terminated = terminated or choice.label == "success"
            truncated = not terminated
        if self.task.sparse_reward:  # 1 on success: whoever decided it (task, classifier, operator)
            reward = float(success)
        return reward, success, terminated, truncated, verdict

    # -- pieces --------------------------------------------------------------------------------
    def _check_action(self, action) -> np.ndarray:
        spec = self.spec.action
        a = np.asarray(action, dtype=np.float32)
        if a.shape != spec.shape:
            raise ValueError(f"action has shape {a.shape}, expected {spec.shape} (float32 in [-1, 1])")
        # Plain floats (a handful of numbers: cheaper than numpy calls). A sum of float32 values
        # cannot overflow a float64, so it is non-finite iff an element is NaN or inf.
        values = a.ravel().tolist()
        if not math.isfinite(sum(values)):
            raise SafetyViolation(f"action contains NaN or inf ({a.tolist()}); nothing was sent to the arm")
        peak = max(max(values), -min(values)) if values else 0.0
        return a if peak <= 1.0 else np.clip(a, -1.0, 1.0)

    def _wait_period(self) -> float:
        """Paced: sleep to the end of this control period (a simulated arm advances by the period first);
        returns how late the step was (s)."""
        if not self.realtime:
            self.arm.advance(self.period)
            if not self.paced:
                return 0.0
        self._deadline += self.period
        now = self.clock.now()
        if now > self._deadline:
            late = now - self._deadline
            self._deadline = now  # resynchronise; never burst to catch up
            return late
        self.clock.sleep_until(self._deadline)
        return 0.0

    def _fault_step(
        self,
        fault: RobotFault,
        t0: float,
        timing: dict[str, float],
        executed: np.ndarray | None = None,
        choice: Choice | None = None,
    ):
        self.faults.handle(fault)
        self.episode_active = False
        self._ended_because = f"the episode was truncated by fault {fault.kind}; call reset()"
        timing["total"] = self.clock.now() - t0
        kind, message, cause = self.faults.reported(fault)
        # A fault before anything was chosen (the teleop device died) sent nothing: executed = zeros.
        executed = np.zeros(self.spec.action.shape, np.float32) if executed is None else executed
        return self._result(
            float(self.task.reward(self.observer.state)),
            False,
            True,
            False,
            timing,
            executed,
            choice,
            self.observer.state,
            self._notes(choice, fault_cause=cause),
            kind,
            message,
        )

    def _result(
        self,
        reward: float,
        terminated: bool,
        truncated: bool,
        success: bool,
        timing: dict[str, float],
        executed: np.ndarray,
        choice: Choice | None,
        state: ArmState,
        notes: StepNotes,
        fault: FaultKind | None = None,
        message: str = "",
    ) -> Step:
        """The step as the env reports it: what went to the safety layer and whether the operator sent it (every
        step), and on a simulator the evaluation judge's verdict, apart from everything the learner reads."""
        return Step.one(
            self.observer.copy(),
            reward,
            terminated,
            truncated,
            success=bool(success),
            executed=executed,
            intervened=bool(choice is not None and choice.intervened),
            stamps=self.observer.stamps,
            timing=timing,
            fault=fault,
            fault_message=message,
            notes=notes,
            judge_success=None if self.realtime else bool(self.task.judge(self.arm, state)),
        )

    def _notes(self, choice: Choice | None, **facts) -> StepNotes:
        """The step's `StepNotes`: where the episode is and what the operator pressed, with the step's ``facts``
        (`StepNotes` fields: what only the clean step or the fault knows)."""
        return StepNotes(
            episode_step=self.episode_step,
            frame_index=dict(self.observer.frame_index),
            teleop_events=choice.events if choice is not None else (),
            operator_label=choice.label if choice is not None else None,
            **facts,
        )

    def _moment(self) -> tuple[int, int, ArmState] | None:
        """Where the episode is, for the operator's view: None between episodes."""
        state = self.observer.state
        if not self.episode_active or state is None:
            return None
        return self.episodes, self.episode_step, state

    @property
    def measured_state(self) -> ArmState | None:
        """The last measured arm state (for tools and tests; an operator sees it through ``operator_view``)."""
        return self.observer.state

    def _raise_if_locked(self) -> None:
        if self.safety.locked:
            raise SafetyViolation(
                f"env locked, the arm will not move: {self.safety.lock_reason}", ErrorReason.SAFETY_LOCKED
            )

    # -- read-only -----------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """JSON-able facts; reads nothing from the driver (the last measured state is reported)."""
        st = self.observer.state
        arm = None
        if st is not None:
            arm = {
                "timestamp": st.timestamp,
                "age_s": max(0.0, time.time() - st.timestamp),
                "q": np.asarray(st.q).tolist(),
                "ee_pose": np.asarray(st.ee_pose).tolist(),
                "gripper_width": float(st.gripper_width),
                "errors": list(st.errors),
            }
        return {
            "robot": self.spec.robot,
            "driver": type(self.arm).__name__,
            "cameras": list(self.cameras),
            "realtime": self.realtime,
            "paced": self.paced,
            "control_hz": self.config.control_hz,
            "connected": self.connected,
            "closed": self.closed,
            "episode_active": self.episode_active,
            "episode_step": self.episode_step,
            "episodes": self.episodes,
            "locked": self.safety.locked,
            "lock_reason": self.safety.lock_reason,
            "strikes": self.safety.strikes,
            "last_fault": self.last_fault,
            "task": self.task.describe(),
            "limits": self.safety.describe_limits(),
            "arm": arm,
        }
