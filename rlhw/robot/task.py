"""`Task`: what the robot should do, written once over `Arm` and `Camera`, for every driver.

A task owns the meaning of observations, actions and rewards; the env owns time, safety and faults.
Per episode the env calls, in order:

0. ``retreat_path(state)`` before the homing move: poses the env visits first, slowly, in straight
   lines through the safety layer (``insert``: up out of the hole);
1. ``reset(arm, rng)`` after the arm is home (sample a goal; set up the scene in sim), then
   ``approach_path(state)``: poses visited the same way (``insert``: above the hole, down to the start)
   and ``contact_zone`` (handed to the safety layer, rule 6);
2. ``observe(state, frames)`` -> the observation dict (proprio here, images added by the env);
3. per step: ``command(action, state)`` -> `Command` (an absolute hand target + optional gripper
   width; the safety layer bounds it), then ``observe``, ``reward``, ``success``, ``terminated``.

Sim-only extras (for contact tasks such as ``push_cube``): ``self.arm`` is the bound driver, so a
task can call the simulator hooks it declares (`ArmCapability`, rlhw/robot/arm.py), such as
``arm.object_pose("cube")``. ``self.require(capability)`` at bind refuses a driver without one with a
ConfigError that says the task needs a simulator (``env.sim: mujoco``); a hook the task can do without
(``set_target_marker``, to show the goal in rendered images) it asks ``arm.has(...)`` about.

Poses are `Pose` objects (rlhw/robot/pose.py); ``orientation`` is a quaternion ``[qx, qy, qz, qw]``.
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlhw.config.env import EnvConfig
from rlhw.errors import ConfigError
from rlhw.robot.arm import Arm, ArmCapability, ArmState
from rlhw.robot.camera import Frame
from rlhw.robot.pose import Pose
from rlhw.robot.spec import TensorSpec


@dataclass(frozen=True)
class Command:
    """An absolute end-effector position target (m, base frame) and an optional gripper width (m)."""

    position: np.ndarray
    gripper_width: float | None = None

    def __init__(self, position: np.ndarray, gripper_width: float | None = None):
        # One per control step: filling the instance dict directly costs half of the generated
        # frozen __init__; still frozen afterwards.
        fields = self.__dict__
        fields["position"], fields["gripper_width"] = position, gripper_width


class Task(abc.ABC):
    """Base of every task. Subclasses set ``name`` and implement the abstract methods."""

    name: str = "task"
    #: Drivers this task can run on; None = any. push_cube sets ("mujoco",).
    drivers: tuple[str, ...] | None = None
    #: Keyword options a simulated arm needs for this task (make_env passes them to mujoco/mock
    #: arms only), e.g. push_cube: ``{"cube": True}``.
    sim_arm_options: dict[str, Any] = {}

    #: Options that name pose files recorded on the robot (`rlhw record-pose CONFIG NAME`).
    pose_options: tuple[str, ...] = ()
    #: (centre, radius m) of the ball around the target where the safety layer slows the hand,
    #: or None; the env hands it over after each ``reset``.
    contact_zone: tuple[np.ndarray, float] | None = None
    #: Speed (m/s) of the env's straight moves along ``retreat_path`` / ``approach_path``.
    path_speed_mps: float = 0.05
    #: The env opens the fingers at every reset even when the action does not move them
    #: (``env.action.gripper`` false), so ``gripper_width`` reads the same on every driver: the
    #: MuJoCo hand starts open, franky-sim's half open (40 mm), a real hand where it was left.
    #: A task that holds something between the fingers (insert: the peg) keeps False.
    opens_gripper_at_reset: bool = False

    #: Whether ``success`` reads only what a real cell measures (the hand's pose, the wrench, recorded poses).
    #: False (push_cube: the cube must be in place): under ``env.sim_state: hidden`` a classifier or an
    #: operator says so, and the simulator's verdict is the judge's alone (``judge``).
    success_measured: bool = True

    #: The reward is 1 on success, else 0: the env recomputes it from its final verdict on success, which
    #: may be the classifier's or the operator's (``env.reward``, an operator's success mark).
    sparse_reward: bool = False

    def __init__(self, config: EnvConfig, options: Mapping[str, Any] | None = None):
        self.config = config
        self.options = dict(options or {})
        self.arm: Arm | None = None
        self.orientation: np.ndarray | None = None  # hand orientation held during the episode

    def bind(self, arm: Arm) -> None:
        """Called once by the env: gives the task the driver (for sim-only hooks)."""
        self.arm = arm

    def arm_has(self, capability: ArmCapability) -> bool:
        """Whether the bound driver declares ``capability`` (False before ``bind``): for hooks a task can do without."""
        return self.arm is not None and self.arm.has(capability)

    def require(self, capability: ArmCapability) -> None:
        """Refuse a driver without ``capability`` (simulator hooks this task needs) with a clear ConfigError."""
        if self.arm is None or not self.arm.has(capability):
            driver = type(self.arm).__name__ if self.arm is not None else "no arm"
            raise ConfigError(
                "env.task",
                f"task {self.name!r} needs the simulator hook {', '.join(capability.methods)} ({capability}), which "
                f"{driver} does not provide; run it with env.sim=mujoco (or env.driver=mujoco)",
            )

    def option(self, key: str, default: Any, kind: type = float) -> Any:
        """Read ``env.task_options.<key>`` with a type check and a clear error."""
        value = self.options.get(key, default)
        if kind is bool:  # bool("false") is True: accept only real booleans
            if isinstance(value, bool):
                return value
            raise ConfigError(f"env.task_options.{key}", f"expected true or false, got {value!r}")
        try:
            return kind(value)
        except (TypeError, ValueError):
            raise ConfigError(f"env.task_options.{key}", f"expected {kind.__name__}, got {value!r}") from None

    def vector_option(self, key: str, default: Any, length: int, hint: str) -> np.ndarray:
        """Read ``env.task_options.<key>`` as ``length`` finite numbers (``hint`` says what they are)."""
        value = self.options.get(key, default)
        try:
            vector = np.asarray(value, dtype=float)
        except (TypeError, ValueError):
            vector = np.zeros(0)
        if vector.shape != (length,) or not np.all(np.isfinite(vector)):
            raise ConfigError(f"env.task_options.{key}", f"expected {hint}, got {value!r}")
        return vector

    def check_options(self, known: set[str]) -> None:
        unknown = sorted(set(self.options) - known)
        if unknown:
            raise ConfigError(
                f"env.task_options.{unknown[0]}",
                f"unknown option for task {self.name!r}; known: {', '.join(sorted(known)) or '(none)'}",
            )

    # -- the task ------------------------------------------------------------------------------
    @abc.abstractmethod
    def observation_specs(self) -> dict[str, TensorSpec]:
        """Proprio observation specs (name -> TensorSpec); the env adds image specs."""

    @abc.abstractmethod
    def action_spec(self) -> TensorSpec:
        """The action: float32 in [-1, 1]."""

    @abc.abstractmethod
    def reset(self, state: ArmState, rng: np.random.Generator) -> None:
        """Start an episode from the measured home ``state``: sample the goal, prepare the scene."""

    @abc.abstractmethod
    def command(self, action: np.ndarray, state: ArmState) -> Command:
        """Turn a (finite, in-bounds) action into a target relative to the measured ``state``."""

    @abc.abstractmethod
    def observe(self, state: ArmState, frames: Mapping[str, Frame]) -> dict[str, np.ndarray]:
        """Proprio observations (float32 arrays matching ``observation_specs``)."""

    @abc.abstractmethod
    def reward(self, state: ArmState) -> float: ...

    @abc.abstractmethod
    def success(self, state: ArmState) -> bool: ...

    def retreat_path(self, state: ArmState) -> list[Pose]:
        """Poses to visit before the reset's homing move (default none)."""
        return []

    def approach_path(self, state: ArmState) -> list[Pose]:
        """Poses to visit after homing and ``reset``, before the first observation (default none)."""
        return []

    def terminated(self, state: ArmState) -> bool:
        """True when the episode reaches an end state of the task (a success): nothing follows, so the
        learner stops bootstrapping there. Default: never."""
        return False

    def truncated(self, state: ArmState) -> bool:
        """True when the episode cannot usefully go on but is NOT an end state (e.g. a pushed object out of
        reach). The learner bootstraps from the last observation, as at the time limit. A task whose rewards
        are negative must end its failures here, never in ``terminated``: a terminal state's value is 0,
        which beats every negative return and would teach the policy to fail fast. Default: never."""
        return False

    def hidden_state_keys(self) -> list[tuple[str, str]]:
        """``(config key, what it reads)`` for each option whose current value needs simulator object state
        (``env.sim_state: hidden`` refuses them, rlhw/robot/rehearsal.py). Default: none."""
        return []

    def judge(self, sim: Arm, state: ArmState) -> bool:
        """The evaluation judge's verdict on ``state``: ground truth, read from the unrestricted simulated arm
        ``sim``. Reported apart (``info["judge_success"]``), never in an observation, reward or done flag.
        Default: ``success`` (a task whose success is measured is its own judge)."""
        return self.success(state)

    def operator_sees_success(self, sim: Arm, state: ArmState) -> bool:
        """When a person at the cell would press the success key in a demo, as the scripted operator (a person's
        eyes) reads it from ``sim``. Its frames are what a success classifier learns "success" from, so a task
        whose judge's boundary a camera can barely resolve asks for a clear case here. Default: the judge."""
        return self.judge(sim, state)

    def operator_sees_failure(self, sim: Arm, state: ArmState) -> bool:
        """When a person at the cell would reject a success the classifier called (`TeleopDevice.verdict`): the
        task plainly not done, read from ``sim``. Not the demo's clear case (`operator_sees_success`): between the
        two a person says neither, and teaching a classifier both boundaries teaches one no camera resolves.
        Default: the judge says not done."""
        return not self.judge(sim, state)

    #: Objects of the scene an operator sees and a scripted stand-in reads from the simulator (`Sight.objects`).
    operator_objects: tuple[str, ...] = ()

    def operator_goal(self) -> np.ndarray:
        """The goal position (m, base frame) as an operator at the cell knows it (`Sight.goal`): a target, a
        taped square, a hole. A task without one cannot have a scripted expert."""
        raise ConfigError("env.teleop.device", f"task {self.name!r} does not tell an operator its goal")

    def describe(self) -> dict[str, Any]:
        """JSON-able facts for status() (e.g. the current goal)."""
        return {"name": self.name}
