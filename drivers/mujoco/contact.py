"""Contact forces on the sim arm: the robot-table force that trips the collision reflex, and the
external wrench `ArmState.external_wrench` reports."""

from __future__ import annotations

import mujoco
import numpy as np

#: The external wrench without contact (shared, read-only: ArmStates hand it out).
NO_WRENCH = np.zeros(6)
NO_WRENCH.setflags(write=False)


class ContactSensor:
    """Reads one arm's contacts off its MjData. ``robot_geom`` and ``table_geom`` are boolean masks
    over the model's geoms (drivers/mujoco/layout.py); ``tcp`` is the site torques are taken about."""

    def __init__(self, model: mujoco.MjModel, robot_geom: np.ndarray, table_geom: np.ndarray, tcp: int):
        self.model, self.robot_geom, self.table_geom, self.tcp = model, robot_geom, table_geom, tcp
        self._force = np.zeros(6)

    def measure(self, d: mujoco.MjData) -> tuple[float, np.ndarray]:
        """The largest normal force (N) of a robot-table contact (0 without one), and the external
        wrench on the robot ``[f, torque about the TCP]`` (N, Nm, base frame): the sum over every
        contact between a robot geom and anything else (table, block, cube).

        This is the simulator's exact counterpart of franky's ``O_F_ext_hat_K``, the wrench the
        real arm estimates from its joint torques, gravity and model removed: a force/torque
        sensor body at the flange would also read the hand's weight and inertia."""
        if not d.ncon:
            return 0.0, NO_WRENCH
        geoms = d.contact.geom
        g1, g2 = geoms[:, 0], geoms[:, 1]
        robot1, robot2 = self.robot_geom[g1], self.robot_geom[g2]
        hits = np.flatnonzero(robot1 != robot2)
        if not hits.size:
            return 0.0, NO_WRENCH
        strongest, wrench = 0.0, np.zeros(6)
        tcp = d.site_xpos[self.tcp]
        for i in hits.tolist():
            mujoco.mj_contactForce(self.model, d, i, self._force)
            contact = d.contact[i]
            a, b = int(contact.geom[0]), int(contact.geom[1])
            if self.table_geom[a] or self.table_geom[b]:
                strongest = max(strongest, abs(float(self._force[0])))
            # the contact frame's rows are its axes (normal first, from geom1 to geom2); the
            # force is geom1's on geom2, so the robot as geom1 gets the opposite
            force = contact.frame.reshape(3, 3).T @ self._force[:3]
            if robot1[i]:
                force = -force
            wrench[:3] += force
            wrench[3:] += np.cross(contact.pos - tcp, force)
        return strongest, wrench
