"""Reading the sim arm's state cheaply: live views into its MjData, and quaternion order helpers."""

from __future__ import annotations

import mujoco
import numpy as np

from drivers.mujoco.layout import ArmLayout


def xyzw(wxyz: np.ndarray) -> np.ndarray:
    """MuJoCo's w-first quaternion in the scalar-last order rlhw's poses use."""
    return np.array([wxyz[1], wxyz[2], wxyz[3], wxyz[0]])


def wxyz(xyzw: np.ndarray) -> np.ndarray:
    """A scalar-last quaternion in MuJoCo's w-first order."""
    return np.array([xyzw[3], xyzw[0], xyzw[1], xyzw[2]])


class StateViews:
    """Live numpy views into one MjData, made once at `connect`: reading through them costs no
    binding call (each ``data.qpos``-style attribute access builds a new array object)."""

    def __init__(self, layout: ArmLayout, d: mujoco.MjData):
        self.qpos_arm = d.qpos[layout.arm]
        self.qvel_arm = d.qvel[layout.arm]
        self.ctrl_arm = d.ctrl[layout.arm_ctrl]
        self.tcp_xpos = d.site_xpos[layout.tcp]
        self.tcp_xmat = d.site_xmat[layout.tcp]
        self.fingers = d.qpos[layout.fingers] if layout.fingers is not None else None
        self._qpos, self._f0, self._f1 = d.qpos, layout.finger0, layout.finger1

    def gripper_width(self) -> float:
        if self.fingers is not None:
            a, b = self.fingers.tolist()
            return a + b
        return float(self._qpos[self._f0] + self._qpos[self._f1])
