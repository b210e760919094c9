"""`push_cube`: push a 5 cm cube across the table to a goal marker (MuJoCo only; a contact task).

The cube's pose is not measured by any real sensor here, so the task reads it from the simulator
(``arm.object_pose("cube")``) and places it at reset (``arm.set_object_pose``). On a driver without
these hooks, building the env fails with a ConfigError that says to use ``env.sim=mujoco``.

- observations (float32, metres, base frame): ``ee_position`` (3), ``cube_position`` (3),
  ``goal_position`` (3), ``cube_to_goal`` (3), ``ee_to_cube`` (3), ``gripper_width`` (1);
- action: float32 in [-1, 1]^3 (+1 gripper component with ``env.action.gripper``): a hand
  displacement of ``action * env.action.scale_m``, bounded by the safety layer. Without a gripper
  action the fingers are closed (through the safety layer's rate limit) to make a solid pusher;
- reward (dense): ``-(d(cube, goal) + 0.5 * d(hand, push point)) / reward_scale_m``, distances in the
  table plane for the cube, in 3-D for the hand; the push point is behind the cube on the line to the
  goal, at pushing height;
- success: the cube's centre within ``success_m`` of the goal in the table plane;
- terminated: on success (``terminate_on_success``);
- truncated: when the cube leaves the workspace box by more than 5 cm (it cannot be pushed back). Not a
  terminal state: every reward is negative, so a terminal value of 0 would pay the policy to knock the cube
  off the table to end the episode early.

Options (``env.task_options``): ``cube_low``/``cube_high`` (xy box of cube starts),
``goal_min_m``/``goal_max_m`` (goal distance from the cube start), ``success_m``,
``reward_scale_m``, ``terminate_on_success``, ``operator_success_m`` (how close to the goal a demo's operator
pushes the cube before marking success; default half of ``success_m``), and for a rehearsal of a real cell
(``configs/sim_push_cube_pixels.yaml``, ``env.sim_state: hidden``, rlhw/robot/rehearsal.py):

- ``goal_xy``: a fixed goal (a taped square on the table, drawn in the scene so cameras see it); the cube's
  start stays random, ``goal_min_m``..``goal_max_m`` from it. Default null: a new goal per episode;
- ``observe_cube`` (default true): the four cube observations; false leaves ``ee_position``,
  ``goal_position``, ``gripper_width`` (+ ``external_wrench``): the camera must find the cube;
- ``observe_wrench`` (default false): ``external_wrench``, the measured wrench over the safety bounds (6);
- ``reward``: ``dense`` (default, the shaping above) or ``sparse`` (1 on success, else 0, HIL-SERL's);
- ``hand_start``: ``[x, y, z]``, where every episode starts the hand: after the homing move the env takes it
  there in a slow straight line (and straight up to that height before the next homing move), as a lab sets a
  task's reset pose. Default null: the episode starts at home, some 45 cm above the table.

Under ``env.sim_state: hidden`` the task never reads the cube: its success is not measured (a classifier or
an operator decides), it does not truncate on a cube out of reach, and ``judge`` (the simulator's verdict)
is the only reader of the cube's pose. The safety workspace must let the hand down to the
cube: ``env.safety.workspace_low`` z <= 0.04 (e.g. ``[0.25, -0.3, 0.02]``).

Its scripted expert (``env.teleop.device: scripted``) sees the cube as a person does (the simulator's, read for
it by the env's operator view, never by the policy): it goes behind the cube on the cube-goal line, above it,
descends, and pushes along the line.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from rlhw.config.env import EnvConfig
from rlhw.errors import ConfigError
from rlhw.robot.arm import ArmCapability, ArmState
from rlhw.robot.camera import Frame
from rlhw.robot.pose import Pose
from rlhw.robot.spec import TensorSpec
from rlhw.robot.task import Command, Task
from rlhw.robot.task_registry import register_expert, register_task
from rlhw.robot.tasks.reach import GRIPPER_WIDTH_MAX, gripper_width_observation
from rlhw.robot.teleop import Aim, Expert, Sight

CUBE_HALF_SIZE = 0.025
#: The highest hand (TCP) floor that still lets the fingertips touch a 5 cm cube's side.
MAX_FLOOR_Z = 0.04
OUT_OF_REACH_M = 0.05
#: The shaping's push point: this far behind the cube's face, the hand (TCP) this high above the table.
#: Shaping towards the cube's centre instead was smallest with the fingers pressing on the cube's top.
PUSH_OFFSET_M = 0.015
PUSH_HEIGHT_M = 0.03
#: Where the floating goal sphere waits when tape marks a fixed goal: out of every camera's view.
MARKER_PARKED = np.array([0.0, 1.5, 0.3])
#: The expert's hand (TCP) height while pushing (fingertips at the cube's mid-height), and moving around the cube.
EXPERT_PUSH_Z = 0.03
EXPERT_CLEAR_Z = 0.10
#: The expert starts a push this far behind the cube's centre, on the goal line, within this lateral tolerance.
EXPERT_BEHIND_M = 0.06
EXPERT_ALIGNED_M = 0.015


def shaping(hand, cube, goal, scale: float) -> float:
    """The dense reward of a hand and a cube position: ``-(d(cube, goal) + 0.5 d(hand, push point)) / scale``."""
    cube = np.asarray(cube, dtype=float)
    to_goal = float(np.linalg.norm(cube[:2] - goal[:2]))
    to_push = float(np.linalg.norm(np.asarray(hand, dtype=float) - push_point(cube, goal)))
    return -(to_goal + 0.5 * to_push) / scale


def push_point(cube, goal) -> np.ndarray:
    """Where a hand pushes ``cube`` towards ``goal`` from: behind it on the goal line, at pushing height."""
    u = np.asarray(goal[:2], dtype=float) - np.asarray(cube[:2], dtype=float)
    u = u / max(float(np.linalg.norm(u)), 1e-6)
    return np.array([*(np.asarray(cube[:2], dtype=float) - u * (CUBE_HALF_SIZE + PUSH_OFFSET_M)), PUSH_HEIGHT_M])


@register_task("push_cube")
class PushCube(Task):
    drivers = ("mujoco",)
    sim_arm_options = {"cube": True}
    operator_objects = ("cube",)  # a person sees the cube; a scripted stand-in reads it from the simulator
    success_measured = False  # a cube in place: no sensor of a real cell says so

    def __init__(self, config: EnvConfig, options: Mapping[str, Any] | None = None):
        super().__init__(config, options)
        self.check_options(
            {
                "cube_low",
                "cube_high",
                "goal_min_m",
                "goal_max_m",
                "success_m",
                "reward_scale_m",
                "terminate_on_success",
                "goal_xy",
                "observe_cube",
                "observe_wrench",
                "reward",
                "hand_start",
                "operator_success_m",
            }
        )
        self.cube_low = self.vector_option("cube_low", (0.42, -0.08), 2, "[x, y] in metres")
        self.cube_high = self.vector_option("cube_high", (0.52, 0.08), 2, "[x, y] in metres")
        self.goal_min = self.option("goal_min_m", 0.08)
        self.goal_max = self.option("goal_max_m", 0.15)
        self.success_m = self.option("success_m", 0.03)
        self.operator_success_m = self.option("operator_success_m", self.success_m / 2)
        self.reward_scale = self.option("reward_scale_m", 0.1)
        self.terminate_on_success = self.option("terminate_on_success", True, bool)
        self.fixed_goal = (
            None
            if self.options.get("goal_xy") is None
            else self.vector_option("goal_xy", None, 2, "[x, y] in metres, or null")
        )
        self.observe_cube = self.option("observe_cube", True, bool)
        self.observe_wrench = self.option("observe_wrench", False, bool)
        self.reward_kind = self.option("reward", "dense", str)
        self.hand_start = (
            None
            if self.options.get("hand_start") is None
            else self.vector_option("hand_start", None, 3, "[x, y, z] in metres, or null")
        )
        self.wrench_scale = np.array(
            [config.safety.max_contact_force_n] * 3 + [config.safety.max_contact_torque_nm] * 3
        )
        self.scale = config.action.scale_m
        self.use_gripper = config.action.gripper
        self.ws_low = np.array(config.safety.workspace_low, dtype=float)
        self.ws_high = np.array(config.safety.workspace_high, dtype=float)
        self._validate()
        self.goal = np.array([*(self.cube_low + self.cube_high) / 2, CUBE_HALF_SIZE])
        self.cube = self.goal.copy()
        self._object_pose = None
        self._place_object = None

    def _validate(self) -> None:
        if np.any(self.cube_low >= self.cube_high):
            raise ConfigError(
                "env.task_options.cube_low",
                f"cube_low {self.cube_low.tolist()} must be < cube_high {self.cube_high.tolist()} on x and y",
            )
        if not 0 < self.goal_min <= self.goal_max:
            raise ConfigError(
                "env.task_options.goal_min_m", f"need 0 < goal_min_m ({self.goal_min}) <= goal_max_m ({self.goal_max})"
            )
        for key, value in (("success_m", self.success_m), ("reward_scale_m", self.reward_scale)):
            if not value > 0:
                raise ConfigError(f"env.task_options.{key}", f"must be > 0, got {value}")
        if not 0 < self.operator_success_m <= self.success_m:
            raise ConfigError(
                "env.task_options.operator_success_m",
                f"must be in (0, success_m = {self.success_m}], got {self.operator_success_m}: the operator marks "
                "a success the judge agrees with",
            )
        if self.reward_kind not in ("dense", "sparse"):
            raise ConfigError("env.task_options.reward", f"expected dense or sparse, got {self.reward_kind!r}")
        if self.fixed_goal is not None and (
            np.any(self.fixed_goal < self.ws_low[:2] + CUBE_HALF_SIZE)
            or np.any(self.fixed_goal > self.ws_high[:2] - CUBE_HALF_SIZE)
        ):
            raise ConfigError(
                "env.task_options.goal_xy",
                f"the goal {self.fixed_goal.tolist()} must lie inside the safety "
                f"workspace xy {self.ws_low[:2].tolist()}..{self.ws_high[:2].tolist()} with "
                f"{CUBE_HALF_SIZE} m to spare",
            )
        if self.ws_low[2] > MAX_FLOOR_Z:
            raise ConfigError(
                "env.safety.workspace_low",
                f"push_cube needs the hand down to z <= {MAX_FLOOR_Z} m to touch the 5 cm cube, but the safety "
                f"workspace stops at z = {self.ws_low[2]}; set env.safety.workspace_low=[0.25, -0.3, 0.02]",
            )
        if self.hand_start is not None and (
            np.any(self.hand_start < self.ws_low) or np.any(self.hand_start > self.ws_high)
        ):
            raise ConfigError(
                "env.task_options.hand_start",
                f"the hand's start {self.hand_start.tolist()} must lie inside the "
                f"safety workspace {self.ws_low.tolist()}..{self.ws_high.tolist()}",
            )
        if self.hand_start is not None and self.hand_start[2] < CUBE_HALF_SIZE * 2 + 0.02:
            raise ConfigError(
                "env.task_options.hand_start",
                f"the hand's start z {self.hand_start[2]} must clear the cube's "
                f"top by 2 cm (z >= {CUBE_HALF_SIZE * 2 + 0.02} m): the start is reached before the cube is seen",
            )
        margin = CUBE_HALF_SIZE
        if np.any(self.cube_low < self.ws_low[:2] + margin) or np.any(self.cube_high > self.ws_high[:2] - margin):
            raise ConfigError(
                "env.task_options.cube_low",
                f"the cube start box {self.cube_low.tolist()}..{self.cube_high.tolist()} must lie inside the safety "
                f"workspace xy {self.ws_low[:2].tolist()}..{self.ws_high[:2].tolist()} with {margin} m to spare",
            )

    @property
    def sparse_reward(self) -> bool:
        return self.reward_kind == "sparse"

    def hidden_state_keys(self) -> list[tuple[str, str]]:
        keys = []
        if self.observe_cube:
            keys.append(("env.task_options.observe_cube", "push_cube then observes the cube's position"))
        if not self.sparse_reward:
            keys.append(("env.task_options.reward", "push_cube's dense reward is the cube's distance to the goal"))
        return keys

    def bind(self, arm) -> None:
        super().bind(arm)
        # In a rehearsal the arm is a MeasuredArm without object_pose: the cube is then never read here.
        hidden = self.config.sim_state == "hidden"
        if not hidden:
            self.require(ArmCapability.OBJECT_STATE)
        self.require(ArmCapability.PLACE_OBJECTS)
        self._object_pose = None if hidden else arm.object_pose
        self._place_object = arm.set_object_pose
        self._marker = arm.set_target_marker if arm.has(ArmCapability.TARGET_MARKER) else None
        self._floor_mark = arm.set_floor_mark if arm.has(ArmCapability.FLOOR_MARK) else None

    # -- specs ----------------------------------------------------------------------------------
    def observation_specs(self) -> dict[str, TensorSpec]:
        low, high = self.ws_low.astype(np.float32), self.ws_high.astype(np.float32)
        span = high - low
        table_low = np.array([*low[:2], 0.0], dtype=np.float32)
        table_high = np.array([*high[:2], 0.1], dtype=np.float32)
        specs = {"ee_position": TensorSpec("ee_position", "float32", (3,), low, high)}
        if self.observe_cube:
            specs["cube_position"] = TensorSpec("cube_position", "float32", (3,), table_low, table_high)
        specs["goal_position"] = TensorSpec("goal_position", "float32", (3,), table_low, table_high)
        if self.observe_cube:
            specs["cube_to_goal"] = TensorSpec("cube_to_goal", "float32", (3,), -span, span)
            specs["ee_to_cube"] = TensorSpec("ee_to_cube", "float32", (3,), -span, span)
        specs["gripper_width"] = TensorSpec("gripper_width", "float32", (1,), 0.0, GRIPPER_WIDTH_MAX)
        if self.observe_wrench:
            specs["external_wrench"] = TensorSpec("external_wrench", "float32", (6,), -5.0, 5.0)
        return specs

    def action_spec(self) -> TensorSpec:
        return TensorSpec("action", "float32", (4 if self.use_gripper else 3,), -1.0, 1.0)

    # -- episode --------------------------------------------------------------------------------
    def reset(self, state: ArmState, rng: np.random.Generator) -> None:
        self.orientation = state.pose.quaternion
        start, goal = self._start_and_goal(rng)
        self.goal = np.array([*goal, CUBE_HALF_SIZE])
        self._place_object("cube", Pose((*start, CUBE_HALF_SIZE)))
        if self._floor_mark is not None:
            self._floor_mark(self.goal[:2].copy())
        if self._marker is not None:  # the floating sphere marks a goal that moves; tape marks a fixed one
            self._marker(self.goal.copy() if self.fixed_goal is None else MARKER_PARKED.copy())
        self.cube = np.array([*start, CUBE_HALF_SIZE])

    def _start_and_goal(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """A random cube start and the goal: the fixed one (a start goal_min_m..goal_max_m from it, when the
        start box holds one), else a random goal at that distance from the start, inside the workspace."""
        if self.fixed_goal is not None:
            for _ in range(100):
                start = rng.uniform(self.cube_low, self.cube_high)
                if self.goal_min <= float(np.linalg.norm(start - self.fixed_goal)) <= self.goal_max:
                    break
            return start, self.fixed_goal.copy()
        start = rng.uniform(self.cube_low, self.cube_high)
        goal_low = self.ws_low[:2] + CUBE_HALF_SIZE
        goal_high = self.ws_high[:2] - CUBE_HALF_SIZE
        for _ in range(100):  # rejection sampling: a goal at the right distance, inside the workspace
            angle = rng.uniform(-np.pi, np.pi)
            goal = start + rng.uniform(self.goal_min, self.goal_max) * np.array([np.cos(angle), np.sin(angle)])
            if np.all(goal >= goal_low) and np.all(goal <= goal_high):
                break
        else:
            goal = np.clip(goal, goal_low, goal_high)
        return start, goal

    def approach_path(self, state: ArmState) -> list[Pose]:
        """To ``hand_start`` in one straight line from home (none without it)."""
        if self.hand_start is None:
            return []
        return [state.pose.with_position(self.hand_start)]

    def retreat_path(self, state: ArmState) -> list[Pose]:
        """Straight up to ``hand_start``'s height when below it, so that the homing joint move does not sweep
        the fingers across the table and the cube."""
        hand = np.asarray(state.ee_position, dtype=float)
        if self.hand_start is None or hand[2] >= self.hand_start[2] - 0.005:
            return []
        return [state.pose.with_position((hand[0], hand[1], self.hand_start[2]))]

    def command(self, action: np.ndarray, state: ArmState) -> Command:
        target = state.ee_position + np.asarray(action[:3], dtype=float) * self.scale
        if self.use_gripper:
            width = float((action[3] + 1.0) / 2.0 * self.arm.max_gripper_width)
        else:
            width = 0.0  # closed fingers push better than open ones straddling the cube
        return Command(position=target, gripper_width=width)

    def observe(self, state: ArmState, frames: Mapping[str, Frame]) -> dict[str, np.ndarray]:
        if self._object_pose is not None:  # never in a rehearsal (env.sim_state: hidden)
            self.cube = np.array(self._object_pose("cube").position)
        ee = np.asarray(state.ee_position, dtype=np.float32)
        goal = self.goal.astype(np.float32)
        obs = {"ee_position": ee}
        if self.observe_cube:
            cube = self.cube.astype(np.float32)
            obs.update(cube_position=cube, goal_position=goal, cube_to_goal=goal - cube, ee_to_cube=cube - ee)
        else:
            obs["goal_position"] = goal
        obs["gripper_width"] = np.array([gripper_width_observation(state.gripper_width)], dtype=np.float32)
        if self.observe_wrench:
            wrench = state.external_wrench
            wrench = np.zeros(6) if wrench is None else np.asarray(wrench, dtype=float) / self.wrench_scale
            obs["external_wrench"] = wrench.astype(np.float32)
        return obs

    # -- outcome (uses the cube pose read by the latest observe) ---------------------------------
    def cube_distance(self) -> float:
        return float(np.linalg.norm(self.cube[:2] - self.goal[:2]))

    def push_point(self) -> np.ndarray:
        """Where a hand pushes the cube towards the goal from: behind it on the goal line, at pushing height."""
        return push_point(self.cube, self.goal)

    def shaping(self, hand, cube) -> float:
        """The dense reward of a hand and a cube position (`shaping`) towards this episode's goal."""
        return shaping(hand, cube, self.goal, self.reward_scale)

    def reward(self, state: ArmState) -> float:
        if self.sparse_reward:
            return float(self.success(state))
        return self.shaping(state.ee_position, self.cube)

    def success(self, state: ArmState) -> bool:
        """The cube in the goal area; in a rehearsal never (no sensor says so: the classifier or operator does)."""
        return self._object_pose is not None and self.cube_distance() < self.success_m

    def judge(self, sim, state: ArmState) -> bool:
        return self._sim_cube_distance(sim) < self.success_m

    def operator_sees_success(self, sim, state: ArmState) -> bool:
        """A person pushes the cube well onto the tape before pressing success: within ``operator_success_m``.
        At the judge's own boundary (3 cm) the cube's edge sits on the tape's, 1-2 pixels from a miss in a
        64 px frame, and a classifier that learns success from such frames cannot tell in from near."""
        return self._sim_cube_distance(sim) < self.operator_success_m

    def _sim_cube_distance(self, sim) -> float:
        return float(np.linalg.norm(sim.object_pose("cube").position[:2] - self.goal[:2]))

    def cube_out_of_reach(self) -> bool:
        xy = self.cube[:2]
        return bool(np.any(xy < self.ws_low[:2] - OUT_OF_REACH_M) or np.any(xy > self.ws_high[:2] + OUT_OF_REACH_M))

    def terminated(self, state: ArmState) -> bool:
        return self.terminate_on_success and self.success(state)

    def truncated(self, state: ArmState) -> bool:
        return self._object_pose is not None and self.cube_out_of_reach()

    def operator_goal(self) -> np.ndarray:
        return self.goal.copy()

    def describe(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "goal_position": self.goal.tolist(),
            "cube_position": self.cube.tolist(),
            "success_m": self.success_m,
        }


@register_expert("push_cube")
def push_cube_expert(task: PushCube) -> Expert:
    """Behind the cube on the cube-goal line (above it), down, push along the line; progress: the dense shaping
    of what it sees (the hand and the cube), whatever reward the policy learns from."""
    scale = task.reward_scale

    def aim(sight: Sight) -> Aim:
        hand, cube, goal = sight.hand, np.asarray(sight.objects["cube"], dtype=float), sight.goal
        line = goal[:2] - cube[:2]
        u = line / max(float(np.linalg.norm(line)), 1e-6)
        rel = hand[:2] - cube[:2]
        along = float(rel @ u)
        lateral = rel - along * u
        behind = cube[:2] - u * EXPERT_BEHIND_M
        low = hand[2] < EXPERT_PUSH_Z + 0.02
        if along < -0.03 and float(np.linalg.norm(lateral)) < EXPERT_ALIGNED_M and low:
            target = np.array([*(hand[:2] + u * 0.03 - lateral), EXPERT_PUSH_Z])  # pushing, pulled back onto the line
        elif float(np.linalg.norm(hand[:2] - behind)) < EXPERT_ALIGNED_M:
            target = np.array([*behind, EXPERT_PUSH_Z])  # above the start of the push: descend
        elif hand[2] < EXPERT_CLEAR_Z - 0.02 and float(np.linalg.norm(rel)) < EXPERT_BEHIND_M + 0.03:
            target = np.array([*hand[:2], EXPERT_CLEAR_Z])  # near the cube and low: rise before crossing
        else:
            target = np.array([*behind, EXPERT_CLEAR_Z])
        return Aim(target, gripper=-1.0)

    return Expert(aim=aim, progress=lambda sight: shaping(sight.hand, sight.objects["cube"], sight.goal, scale))
