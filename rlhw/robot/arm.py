"""The `Arm` interface every robot driver implements (franky, MuJoCo, mock).

Commands are *targets*: `command_pose` and `command_gripper` return at once and the arm tracks the
target until the next one, which is how a 10-30 Hz RL loop drives an impedance controller.
`move_joints` is the one blocking motion (used by reset); it takes a timeout like every other
call that can block. A driver reports trouble by raising `rlhw.errors.RobotFault`.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass, field

import numpy as np

#: Franka FR3 / Panda home posture (radians), the usual "ready" pose.
HOME_Q = np.array([0.0, -np.pi / 4, 0.0, -3 * np.pi / 4, 0.0, np.pi / 2, np.pi / 4])


@dataclass(frozen=True)
class ArmState:
    """One reading of the arm.

    ``ee_pose`` is ``[x, y, z, qx, qy, qz, qw]`` of the flange/TCP in the base frame (metres).
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
    ee_pose: np.ndarray
    gripper_width: float
    errors: tuple[str, ...] = field(default_factory=tuple)
    external_wrench: np.ndarray | None = None

    def __init__(self, timestamp: float, q: np.ndarray, dq: np.ndarray, ee_pose: np.ndarray,
                 gripper_width: float, errors: tuple[str, ...] = (), external_wrench: np.ndarray | None = None):
        # Every driver builds one per control step: filling the instance dict directly costs
        # half of the generated frozen __init__ (an object.__setattr__ call per field). Still
        # frozen: assigning a field afterwards raises FrozenInstanceError.
        fields = self.__dict__
        fields["timestamp"], fields["q"], fields["dq"] = timestamp, q, dq
        fields["ee_pose"], fields["gripper_width"], fields["errors"] = ee_pose, gripper_width, errors
        fields["external_wrench"] = external_wrench

    @property
    def ee_position(self) -> np.ndarray:
        return self.ee_pose[:3]


class Arm(abc.ABC):
    """A 7-DoF arm with a parallel gripper. One `Arm` object owns one physical (or simulated) arm."""

    name: str = "arm"

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
    def command_pose(self, pose: np.ndarray) -> None:
        """Track an absolute end-effector target ``[x, y, z, qx, qy, qz, qw]`` (non-blocking)."""

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

    def __enter__(self) -> "Arm":
        self.connect()
        return self

    def __exit__(self, *exc) -> None:
        self.close()
