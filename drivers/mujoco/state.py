"""Reading the sim arm's state cheaply: live views into its MjData."""

from __future__ import annotations

import mujoco

from drivers.mujoco.layout import ArmLayout


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
