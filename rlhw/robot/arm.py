"""The `Arm` interface every robot driver implements (franky, MuJoCo, mock).

Commands are *targets*: `command_pose` and `command_gripper` return at once and the arm tracks the
target until the next one, which is how a 10-30 Hz RL loop drives an impedance controller.
`move_joints` is the one blocking motion (used by reset); it takes a timeout like every other
call that can block. A driver reports trouble by raising `rlhw.errors.RobotFault`.

Optional abilities (a simulator's scene hooks) are declared, not probed: a driver lists the
`ArmCapability` members it implements in ``capabilities``, the env and tasks ask ``arm.has(...)``,
and a class that declares one without implementing its methods fails when it is defined.
"""

from __future__ import annotations

import abc
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NoReturn

import numpy as np

from rlhw.robot.build import ArmBuild, simulated_arm
from rlhw.robot.pose import Pose

#: Franka FR3 / Panda home posture (radians), the usual "ready" pose.
HOME_Q = np.array([0.0, -np.pi / 4, 0.0, -3 * np.pi / 4, 0.0, np.pi / 2, np.pi / 4])


@dataclass(frozen=True)
class ArmState:
    """One reading of the arm.

    ``pose`` is the flange/TCP `Pose` in the base frame (metres; quaternion scalar last, see
    rlhw/robot/pose.py); ``ee_pose`` is its 7-vector ``[x, y, z, qx, qy, qz, qw]``, for the wire and files.
    ``timestamp`` is wall-clock seconds (``time.time()``) when the reading was taken, so it can be
    compared across processes on one machine. ``errors`` lists active error flags by name; empty
    means the arm is ready to move. ``external_wrench`` is the measured external wrench on the hand
    ``[fx, fy, fz, tx, ty, tz]`` (N, Nm; base frame, torque about the TCP), franky's
    ``O_F_ext_hat_K``; None when the driver cannot measure it (the safety layer then has nothing
    to bound, and tasks observe zeros).
    """

    timestamp: float
    q: np.ndarray
    dq: np.ndarray
    pose: Pose
    gripper_width: float
    errors: tuple[str, ...] = field(default_factory=tuple)
    external_wrench: np.ndarray | None = None

    def __init__(
        self,
        timestamp: float,
        q: np.ndarray,
        dq: np.ndarray,
        pose: Pose,
        gripper_width: float,
        errors: tuple[str, ...] = (),
        external_wrench: np.ndarray | None = None,
    ):
        # Every driver builds one per control step: filling the instance dict directly costs
        # half of the generated frozen __init__ (an object.__setattr__ call per field). Still
        # frozen: assigning a field afterwards raises FrozenInstanceError.
        fields = self.__dict__
        fields["timestamp"], fields["q"], fields["dq"] = timestamp, q, dq
        fields["pose"], fields["gripper_width"], fields["errors"] = pose, gripper_width, errors
        fields["external_wrench"] = external_wrench

    @property
    def ee_position(self) -> np.ndarray:
        """The hand's position (m, base frame): ``pose.position`` (read-only)."""
        return self.pose.position

    @property
    def ee_pose(self) -> np.ndarray:
        """``[x, y, z, qx, qy, qz, qw]``: the 7-vector form of ``pose`` (a new array), for the wire and files."""
        return self.pose.vector


class ArmCapability(enum.Enum):
    """An optional ability of a driver; the value names the `Arm` methods that provide it.

    Real arms have none: each is something a simulator can do that a real cell does by hand (or not at all).
    """

    #: ``restore_initial_state()``: back to the state ``connect`` made, bit for bit (seeded resets).
    RESTORE_INITIAL_STATE = ("restore_initial_state",)
    #: ``object_pose(name)``: read a free object's pose; simulator state a real cell does not measure.
    OBJECT_STATE = ("object_pose",)
    #: ``set_object_pose(name, pose)``, ``park_object(name)``: put an object somewhere (a person, on a real cell).
    PLACE_OBJECTS = ("set_object_pose", "park_object")
    #: ``set_target_marker(position)``: show a goal point in rendered images.
    TARGET_MARKER = ("set_target_marker",)
    #: ``set_floor_mark(xy)``: a taped square on the table.
    FLOOR_MARK = ("set_floor_mark",)
    #: ``place_hole(goal_pose, depth)``: put the hole block under a recorded goal.
    PLACE_HOLE = ("place_hole",)

    @property
    def methods(self) -> tuple[str, ...]:
        return self.value


class Arm(abc.ABC):
    """A 7-DoF arm with a parallel gripper. One `Arm` object owns one physical (or simulated) arm."""

    name: str = "arm"
    #: The optional abilities this driver implements (see `ArmCapability`); checked when the class is made.
    capabilities: frozenset[ArmCapability] = frozenset()
    #: What the driver learnt about the robot at ``connect`` (franka: robot mode, gripper max width), for reports.
    info: Mapping[str, Any] = MappingProxyType({})
    #: Why the last call failed, when the driver knows more than it raised (franka: a failed ``recover``).
    last_error: str | None = None

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        for capability in cls.capabilities:
            missing = [m for m in capability.methods if getattr(cls, m, None) is getattr(Arm, m)]
            if missing:
                raise TypeError(f"{cls.__name__} declares {capability} but does not implement {', '.join(missing)}")

    @classmethod
    def from_plan(cls, build: ArmBuild) -> Arm:
        """Build this driver for one env instance (`rlhw.robot.factory.build_arm` calls it). The default is a
        simulator's (`rlhw.robot.build.simulated_arm`); a driver with hardware overrides it and reads its
        validated hardware model, ``build.hardware``."""
        return simulated_arm(cls, build)

    def has(self, capability: ArmCapability) -> bool:
        """Whether this driver declares ``capability``: ask before calling its methods."""
        return capability in self.capabilities

    @abc.abstractmethod
    def connect(self, timeout_s: float = 10.0) -> None:
        """Open the link to the arm. Raises RobotFault(FaultKind.NETWORK/"timeout") if it cannot."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop any motion and release the arm. Safe to call twice."""

    @abc.abstractmethod
    def state(self) -> ArmState:
        """The latest state. Raises RobotFault on a dead link; never blocks past the driver timeout."""

    @abc.abstractmethod
    def command_pose(self, pose: Pose) -> None:
        """Track an absolute end-effector target `Pose` in the base frame (non-blocking)."""

    @abc.abstractmethod
    def command_gripper(self, width: float) -> None:
        """Move the fingers to ``width`` metres apart (non-blocking); 0 closes, max opens."""

    @abc.abstractmethod
    def move_joints(self, q: np.ndarray, speed_factor: float = 0.2, timeout_s: float = 15.0) -> None:
        """Blocking joint-space move to ``q`` with reduced dynamics; raises RobotFault on failure."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop now: hold the current pose. Never raises for an already-stopped arm."""

    @abc.abstractmethod
    def recover(self, timeout_s: float = 5.0) -> bool:
        """Clear error flags (automatic error recovery). Returns True when the arm is ready again."""

    # Simulated time. A real arm moves on its own clock: the env sleeps until the control period
    # ends. A simulated arm only moves when told to: it sets ``realtime = False`` and the env calls
    # ``advance(dt)`` once per step instead of sleeping (and during reset settling), so a simulator
    # runs as fast as the CPU allows and stays deterministic. Cameras bound to a simulated arm
    # render the state after the latest ``advance``.
    realtime: bool = True

    def advance(self, dt: float) -> None:
        """Simulated arms only: integrate ``dt`` seconds of simulated time, tracking the latest
        targets (physics substeps are the driver's business). Never called on a real-time arm."""
        raise NotImplementedError(f"{type(self).__name__} is a real-time arm; it has no simulated clock to advance")

    # Conveniences that read like the task.
    max_gripper_width: float = 0.08

    def open_gripper(self) -> None:
        self.command_gripper(self.max_gripper_width)

    def close_gripper(self) -> None:
        self.command_gripper(0.0)

    # Optional abilities: declared in ``capabilities`` by the drivers that implement them.
    def _lacks(self, capability: ArmCapability) -> NoReturn:
        raise NotImplementedError(
            f"{type(self).__name__} does not declare {capability}; ask arm.has({capability}) first"
        )

    def restore_initial_state(self) -> None:
        self._lacks(ArmCapability.RESTORE_INITIAL_STATE)

    def object_pose(self, name: str) -> Pose:
        self._lacks(ArmCapability.OBJECT_STATE)

    def set_object_pose(self, name: str, pose: Pose) -> None:
        self._lacks(ArmCapability.PLACE_OBJECTS)

    def park_object(self, name: str) -> None:
        self._lacks(ArmCapability.PLACE_OBJECTS)

    def set_target_marker(self, position: np.ndarray) -> None:
        self._lacks(ArmCapability.TARGET_MARKER)

    def set_floor_mark(self, xy: np.ndarray) -> None:
        self._lacks(ArmCapability.FLOOR_MARK)

    def place_hole(self, goal_pose: Pose, insertion_depth_m: float) -> None:
        self._lacks(ArmCapability.PLACE_HOLE)

    def __enter__(self) -> Arm:
        self.connect()
        return self

    def __exit__(self, *exc) -> None:
        self.close()
