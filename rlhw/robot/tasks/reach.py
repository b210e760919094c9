"""`reach`: move the hand to a target point sampled in a box, with the hand orientation held.

Kept small and well scaled on purpose, so SAC learns it in minutes:

- observations (float32, metres, base frame): ``ee_position`` (3), ``target_position`` (3),
  ``to_target`` = target - hand (3), ``gripper_width`` (1); images are added by the env;
- action: float32 in [-1, 1]^3 (+1 gripper component with ``env.action.gripper``): a hand displacement
  of ``action * env.action.scale_m`` from the measured position (the safety layer bounds it);
- reward: ``-distance / env.reach.reward_scale_m`` per step (dense, about -1 at 10 cm);
- success: distance < ``env.reach.success_m`` (3 cm); terminates the episode by default.

Its scripted expert (``env.teleop.device: scripted``) moves the hand straight at the target it sees.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from rlhw.config.env import EnvConfig
from rlhw.robot.arm import ArmCapability, ArmState
from rlhw.robot.camera import Frame
from rlhw.robot.spec import TensorSpec
from rlhw.robot.task import Command, Task
from rlhw.robot.task_registry import register_expert, register_task
from rlhw.robot.teleop import Aim, Expert, Sight

#: The gripper_width observation's bound (m): the Franka hand's opening. Measured widths can read a
#: hair above it (MuJoCo's finger joints settle at 0.0800002), so observations are clipped to it.
GRIPPER_WIDTH_MAX = 0.08


def gripper_width_observation(width: float) -> float:
    """The measured ``width`` within the declared [0, GRIPPER_WIDTH_MAX] (the observation space)."""
    return min(max(float(width), 0.0), GRIPPER_WIDTH_MAX)


@register_task("reach")
class Reach(Task):
    opens_gripper_at_reset = True  # nothing in the hand; gripper_width must not differ between drivers

    def __init__(self, config: EnvConfig, options: Mapping[str, Any] | None = None):
        super().__init__(config, options)
        self.check_options(set())
        rc = config.reach
        self.target_low = np.array(rc.target_low)
        self.target_high = np.array(rc.target_high)
        self.success_m = rc.success_m
        self.reward_scale = rc.reward_scale_m
        self.terminate_on_success = rc.terminate_on_success
        self.scale = config.action.scale_m
        self.use_gripper = config.action.gripper
        self.ws_low = np.array(config.safety.workspace_low, dtype=np.float32)
        self.ws_high = np.array(config.safety.workspace_high, dtype=np.float32)
        self._dist_for: ArmState | None = None
        self._dist = 0.0
        self.target = (self.target_low + self.target_high) / 2

    @property
    def target(self) -> np.ndarray:
        """The goal position (m, base frame) of this episode."""
        return self._target

    @target.setter
    def target(self, value) -> None:
        # Kept with its float32 observation and plain floats, made once per episode, not per step.
        self._target = np.array(value, dtype=float)
        self._target_obs = self._target.astype(np.float32)
        self._target_floats = self._target.tolist()
        self._dist_for = None

    def observation_specs(self) -> dict[str, TensorSpec]:
        span = self.ws_high - self.ws_low
        return {
            "ee_position": TensorSpec("ee_position", "float32", (3,), self.ws_low, self.ws_high),
            "target_position": TensorSpec(
                "target_position",
                "float32",
                (3,),
                self.target_low.astype(np.float32),
                self.target_high.astype(np.float32),
            ),
            "to_target": TensorSpec("to_target", "float32", (3,), -span, span),
            "gripper_width": TensorSpec("gripper_width", "float32", (1,), 0.0, GRIPPER_WIDTH_MAX),
        }

    def action_spec(self) -> TensorSpec:
        return TensorSpec("action", "float32", (4 if self.use_gripper else 3,), -1.0, 1.0)

    def reset(self, state: ArmState, rng: np.random.Generator) -> None:
        self.target = rng.uniform(self.target_low, self.target_high)
        self.orientation = state.pose.quaternion
        if self.arm_has(ArmCapability.TARGET_MARKER):
            self.arm.set_target_marker(self.target.copy())

    def command(self, action: np.ndarray, state: ArmState) -> Command:
        # float32 actions widen exactly to floats; 3 numbers: plain floats beat numpy calls
        ax, ay, az = np.asarray(action).tolist()[:3]
        x, y, z = state.ee_position.tolist()
        scale = self.scale
        target = np.array((x + ax * scale, y + ay * scale, z + az * scale))
        width = None
        if self.use_gripper:
            width = float((action[3] + 1.0) / 2.0 * self.arm.max_gripper_width)
        return Command(position=target, gripper_width=width)

    def distance(self, state: ArmState) -> float:
        # called for reward, success and termination of the same state: compute once
        if self._dist_for is not state:
            self._offset(state)
        return self._dist

    def _offset(self, state: ArmState) -> tuple[float, float, float, float, float, float]:
        """Hand position and target - hand as floats; caches the distance for this ``state``."""
        x, y, z = state.ee_position.tolist()
        tx, ty, tz = self._target_floats
        dx, dy, dz = tx - x, ty - y, tz - z
        self._dist, self._dist_for = math.sqrt(dx * dx + dy * dy + dz * dz), state
        return x, y, z, dx, dy, dz

    def observe(self, state: ArmState, frames: Mapping[str, Frame]) -> dict[str, np.ndarray]:
        # One float32 array for the per-step values, handed out as slices: the env returns
        # copies of observations (never these arrays), so sharing one buffer here is safe.
        values = np.array((*self._offset(state), gripper_width_observation(state.gripper_width)), dtype=np.float32)
        return {
            "ee_position": values[0:3],
            "target_position": self._target_obs,
            "to_target": values[3:6],
            "gripper_width": values[6:7],
        }

    def reward(self, state: ArmState) -> float:
        return -self.distance(state) / self.reward_scale

    def success(self, state: ArmState) -> bool:
        return self.distance(state) < self.success_m

    def terminated(self, state: ArmState) -> bool:
        return self.terminate_on_success and self.success(state)

    def operator_goal(self) -> np.ndarray:
        return self.target.copy()

    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "target_position": self.target.tolist(), "success_m": self.success_m}


@register_expert("reach")
def reach_expert(task: Reach) -> Expert:
    """Straight to the target, gripper open; progress as the task's reward sees it (minus the scaled distance)."""
    scale = task.reward_scale

    def progress(sight: Sight) -> float:
        return -float(np.linalg.norm(sight.goal - sight.hand)) / scale

    return Expert(aim=lambda sight: Aim(sight.goal), progress=progress)
