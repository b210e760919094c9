"""`insert`: put a peg held in the gripper into a hole, whose goal pose was recorded on the robot.

Written for a real arm: it uses nothing a real cell cannot measure. The goal is the hand (TCP) pose
with the peg fully in, recorded with `rlhw record-pose CONFIG goal_pose` (rlhw/robot/poses.py) into
the file ``env.task_options.goal_pose`` names; the peg is in the gripper before the first episode
and the task never moves the fingers (opening them would drop it).

- reset: the env first lifts the hand straight up out of the hole when it is there
  (``retreat_path``; a joint move home from inside the hole would drag the peg through its walls),
  homes, then moves slowly in straight lines (through the safety layer) up to ``approach_height_m``
  above the goal and vertically down to a start sampled in the box ``goal + [start_low, start_high]``,
  with the hand at the goal's orientation, which it then holds;
- observations (float32): ``to_goal`` = goal - hand (m, base frame, 3), ``orientation_error`` (the
  rotation from the hand to the goal orientation as a rotation vector, rad, 3), ``gripper_width``
  (m, 1), ``external_wrench`` (the measured wrench divided by the safety bounds
  ``max_contact_force_n``/``max_contact_torque_nm``: +-1 is where the contact fault fires; zeros
  when the driver measures none, 6);
- action: float32 in [-1, 1]^3, a hand displacement of ``action * env.action.scale_m``; the safety
  layer slows it inside the contact zone (a ball of ``contact_zone_m`` around the goal) and stops
  the arm with fault ``contact`` when the measured wrench passes its bound;
- success: the hand within ``success_m`` of the goal position and ``success_rad`` of its
  orientation; it ends the episode (terminated) unless ``terminate_on_success`` is false (then the
  episode runs on: to let a classifier alone end it, or to record frames that hold the success,
  tools/reward_frames.py). A learned classifier on camera frames
  (``env.reward.classifier``) or the operator's success key (``env.teleop``) overrides it in the env,
  as for every task;
- reward: sparse, 1 on success and 0 otherwise; with ``dense_reward: true`` minus the distance to
  the goal over ``reward_scale_m`` is added (shaping, for sim studies).

In MuJoCo (``sim_arm_options``: the peg scene, drivers/mujoco/scene.py), the hole block is placed
under the recorded goal at every reset, ``insertion_depth_m`` deep, so the config that runs a real
cell rehearses its layout with ``--sim``.

Its scripted expert (``env.teleop.device: scripted``; demos in sim and a baseline for the learned policy) does
what an operator does: line the peg up over the hole at a safe height (the peg's tip above the hole's top), then
go down the hole's axis, correcting x and y on the way. It reads the measured hand and the recorded goal (what
an operator sees), never the policy's observations; the safety layer bounds its steps as any policy's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from rlhw.config.env import EnvConfig
from rlhw.errors import ConfigError
from rlhw.robot.arm import ArmCapability, ArmState
from rlhw.robot.camera import Frame
from rlhw.robot.pose import Pose
from rlhw.robot.poses import RecordedPose, load_pose
from rlhw.robot.spec import TensorSpec
from rlhw.robot.task import Command, Task
from rlhw.robot.task_registry import register_expert, register_task
from rlhw.robot.teleop import Aim, Expert, Sight

#: The task's options that name pose files (`rlhw record-pose CONFIG NAME` writes them).
POSE_OPTIONS = ("goal_pose",)
OPTIONS = {
    "goal_pose",
    "insertion_depth_m",
    "start_low",
    "start_high",
    "approach_height_m",
    "contact_zone_m",
    "success_m",
    "success_rad",
    "dense_reward",
    "reward_scale_m",
    "path_speed_mps",
    "terminate_on_success",
}
#: Start heights must leave the peg's tip this far above the hole (m).
START_MARGIN_M = 0.005
#: The reset paths move along the base frame's z: the hole's axis (the hand's approach axis at the
#: goal) may lean this far from vertical (rad) before they would scrape its walls.
MAX_TILT_RAD = 0.1
#: The expert counts the peg lined up when its axis is this close to the hole's (m): under half the 2 mm clearance.
EXPERT_ALIGNED_M = 0.001
#: Height of the peg's tip above the hole's top while the expert lines it up (m).
EXPERT_CLEARANCE_M = 0.008


@register_task("insert")
class Insert(Task):
    sim_arm_options = {"peg": True}
    pose_options = POSE_OPTIONS

    def __init__(self, config: EnvConfig, options: Mapping[str, Any] | None = None):
        super().__init__(config, options)
        self.check_options(OPTIONS)
        if "goal_pose" not in self.options:
            raise ConfigError(
                "env.task_options.goal_pose",
                "insert needs the goal pose file: set env.task_options.goal_pose "
                "to a path, then record it with `rlhw record-pose CONFIG goal_pose`",
            )
        self.goal_file = str(self.options["goal_pose"])
        self.goal_record: RecordedPose = load_pose(self.goal_file, "env.task_options.goal_pose")
        self.depth = self.option("insertion_depth_m", 0.02)
        self.start_low = self.vector_option(
            "start_low", (-0.02, -0.02, 0.04), 3, "[dx, dy, dz] in metres from the goal"
        )
        self.start_high = self.vector_option(
            "start_high", (0.02, 0.02, 0.06), 3, "[dx, dy, dz] in metres from the goal"
        )
        self.approach_height = self.option("approach_height_m", 0.1)
        self.zone_m = self.option("contact_zone_m", 0.05)
        self.success_m = self.option("success_m", 0.008)
        self.success_rad = self.option("success_rad", 0.1)
        self.dense = self.option("dense_reward", False, bool)
        self.reward_scale = self.option("reward_scale_m", 0.05)
        self.path_speed_mps = self.option("path_speed_mps", 0.1)
        self.terminate_on_success = self.option("terminate_on_success", True, bool)
        self.scale = config.action.scale_m
        self.ws_low = np.array(config.safety.workspace_low, dtype=float)
        self.ws_high = np.array(config.safety.workspace_high, dtype=float)
        self.wrench_scale = np.array(
            [config.safety.max_contact_force_n] * 3 + [config.safety.max_contact_torque_nm] * 3
        )
        self.goal: Pose = self.goal_record.pose
        self._validate(config)
        self.orientation = self.goal.quaternion
        self.contact_zone = (self.goal.position.copy(), self.zone_m)
        self.start = self.goal.position + (self.start_low + self.start_high) / 2
        self._judged: tuple[ArmState | None, bool] = (None, False)

    def _validate(self, config: EnvConfig) -> None:
        opt = "env.task_options."
        down = -float(self.goal.rotation_matrix[2, 2])  # minus the z of the hand's approach axis
        tilt = math.acos(max(-1.0, min(1.0, down)))
        if tilt > MAX_TILT_RAD:
            raise ConfigError(
                "env.task_options.goal_pose",
                f"the recorded goal's approach axis leans {math.degrees(tilt):.0f} deg from straight down; "
                f"insert moves in and out of the hole vertically (up to {math.degrees(MAX_TILT_RAD):.0f} deg "
                "of lean): record the goal with the hand pointing down into a vertical hole",
            )
        if config.action.gripper:
            raise ConfigError(
                "env.action.gripper",
                "insert holds the peg in closed fingers and never moves them "
                "(opening drops the peg); set env.action.gripper=false",
            )
        if config.reset.randomize_radius_m > 0:
            raise ConfigError(
                "env.reset.randomize_radius_m",
                "insert samples its own start above the hole (task_options.start_low/high); set it to 0",
            )
        for key, value in (
            ("insertion_depth_m", self.depth),
            ("approach_height_m", self.approach_height),
            ("contact_zone_m", self.zone_m),
            ("success_m", self.success_m),
            ("success_rad", self.success_rad),
            ("reward_scale_m", self.reward_scale),
            ("path_speed_mps", self.path_speed_mps),
        ):
            if not value > 0:
                raise ConfigError(opt + key, f"must be > 0, got {value}")
        if np.any(self.start_low > self.start_high):
            raise ConfigError(
                opt + "start_low",
                f"start_low {self.start_low.tolist()} must be <= start_high {self.start_high.tolist()}",
            )
        if self.start_low[2] < self.depth + START_MARGIN_M:
            raise ConfigError(
                opt + "start_low",
                f"start_low z = {self.start_low[2]} m would start the peg inside the hole: "
                f"it must be >= insertion_depth_m + {START_MARGIN_M} = {self.depth + START_MARGIN_M}",
            )
        if self.approach_height < self.start_high[2]:
            raise ConfigError(
                opt + "approach_height_m",
                f"{self.approach_height} m is below start_high z = {self.start_high[2]}; "
                "the hand comes down to the start from there",
            )
        goal = self.goal.position
        corners = [goal, goal + self.start_low, goal + self.start_high, goal + [0.0, 0.0, self.approach_height]]
        for point in corners:
            if np.any(point < self.ws_low) or np.any(point > self.ws_high):
                raise ConfigError(
                    "env.safety.workspace_low",
                    f"the goal {np.round(goal, 3).tolist()} with its start box and approach height "
                    f"reaches {np.round(point, 3).tolist()}, outside the safety workspace "
                    f"{self.ws_low.tolist()}..{self.ws_high.tolist()}; widen the workspace or shrink the box",
                )

    # -- specs ----------------------------------------------------------------------------------
    def observation_specs(self) -> dict[str, TensorSpec]:
        span = (self.ws_high - self.ws_low).astype(np.float32)
        return {
            "to_goal": TensorSpec("to_goal", "float32", (3,), -span, span),
            "orientation_error": TensorSpec("orientation_error", "float32", (3,), -np.pi, np.pi),
            "gripper_width": TensorSpec("gripper_width", "float32", (1,), 0.0, 0.08),
            "external_wrench": TensorSpec("external_wrench", "float32", (6,), -5.0, 5.0),
        }

    def action_spec(self) -> TensorSpec:
        return TensorSpec("action", "float32", (3,), -1.0, 1.0)

    # -- episode --------------------------------------------------------------------------------
    def retreat_path(self, state: ArmState) -> list[Pose]:
        """Straight up along z, orientation kept, when the hand is over the hole below the approach
        height (within the contact zone's radius of its axis)."""
        hand, goal = state.ee_position, self.goal.position
        top = goal[2] + self.approach_height
        if np.linalg.norm(hand[:2] - goal[:2]) > self.zone_m or hand[2] >= top:
            return []
        return [state.pose.with_position((hand[0], hand[1], top))]

    def reset(self, state: ArmState, rng: np.random.Generator) -> None:
        self.start = self.goal.position + rng.uniform(self.start_low, self.start_high)
        self._judged = (None, False)
        if self.arm_has(ArmCapability.PLACE_HOLE):  # sim only: a real hole is where it is
            self.arm.place_hole(self.goal, self.depth)

    def approach_path(self, state: ArmState) -> list[Pose]:
        """Up to the approach height where needed, over the start, then down to it (at the goal's orientation)."""
        hand = state.ee_position
        hover = self.goal.position[2] + self.approach_height
        at = self.goal.with_position
        path = [] if hand[2] >= hover else [at((hand[0], hand[1], hover))]
        return path + [at((self.start[0], self.start[1], hover)), at(self.start)]

    def command(self, action: np.ndarray, state: ArmState) -> Command:
        ax, ay, az = np.asarray(action).tolist()[:3]
        x, y, z = state.ee_position.tolist()
        scale = self.scale
        return Command(position=np.array((x + ax * scale, y + ay * scale, z + az * scale)))

    def observe(self, state: ArmState, frames: Mapping[str, Frame]) -> dict[str, np.ndarray]:
        wrench = state.external_wrench
        wrench = np.zeros(6) if wrench is None else np.asarray(wrench, dtype=float) / self.wrench_scale
        return {
            "to_goal": (self.goal.position - state.ee_position).astype(np.float32),
            "orientation_error": state.pose.rotation_to(self.goal).astype(np.float32),
            "gripper_width": np.array([state.gripper_width], dtype=np.float32),
            "external_wrench": wrench.astype(np.float32),
        }

    # -- outcome --------------------------------------------------------------------------------
    def distance(self, state: ArmState) -> float:
        return state.pose.distance(self.goal).translation_m

    def angle(self, state: ArmState) -> float:
        return state.pose.angle_to(self.goal)

    def pose_success(self, state: ArmState) -> bool:
        return self.distance(state) < self.success_m and self.angle(state) < self.success_rad

    def success(self, state: ArmState) -> bool:
        if self._judged[0] is not state:  # reward, success and terminated ask about the same state
            self._judged = (state, self.pose_success(state))
        return self._judged[1]

    def reward(self, state: ArmState) -> float:
        bonus = 1.0 if self.success(state) else 0.0
        return bonus - self.distance(state) / self.reward_scale if self.dense else bonus

    def terminated(self, state: ArmState) -> bool:
        return self.terminate_on_success and self.success(state)

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "goal_pose": self.goal.vector.tolist(),
            "goal_file": self.goal_file,
            "goal_robot": self.goal_record.robot,
            "start_position": self.start.tolist(),
            "success_m": self.success_m,
            "success_rad": self.success_rad,
        }

    def operator_goal(self) -> np.ndarray:
        return self.goal.position.copy()


@register_expert("insert")
def insert_expert(task: Insert) -> Expert:
    """Over the hole at a safe height, then down its axis; progress: minus the scaled distance to the goal."""
    top, scale = task.depth + EXPERT_CLEARANCE_M, task.reward_scale

    def aim(sight: Sight) -> Aim:
        goal, hand = sight.goal, sight.hand
        target = goal.copy()
        if np.linalg.norm(goal[:2] - hand[:2]) > EXPERT_ALIGNED_M:
            # not over the hole: stay (or rise) to where the peg's tip clears the hole's top
            target[2] = max(hand[2], goal[2] + top)
        return Aim(target)

    def progress(sight: Sight) -> float:
        return -float(np.linalg.norm(sight.goal - sight.hand)) / scale

    return Expert(aim=aim, progress=progress)
