"""Where one arm's pieces live in a compiled scene model: addresses, slices, ranges and geom masks.

Looked up once per `MujocoArm` (names -> indices), so the per-step code indexes arrays instead of
asking the model by name. The layout also checks the two facts the fast paths rely on: the arm's
joints and servos are contiguous (so a slice views them), and only those 7 joints move the TCP
(so the IK can use the full-width jacobian, whose other columns are exactly zero).
"""

from __future__ import annotations

import mujoco
import numpy as np

from drivers.mujoco import scene as _scene

#: Joint targets stay this far (rad) inside the model's joint ranges: more than the safety layer's
#: default margin (env.safety.joint_limit_margin_rad = 0.05), so Cartesian tracking near the edge of
#: the reachable space stops short of a joint limit instead of tripping the safety layer's check.
JOINT_TARGET_MARGIN = 0.1
#: A joint this close (rad) to its range end raises the "joint_limit" flag.
JOINT_LIMIT_FLAG_MARGIN = 0.005


class ArmLayout:
    """The indices of one arm (and its props) in ``model``, built with ``cube``/``peg`` as the
    scene was (`scene.SceneOptions`)."""

    def __init__(self, model: mujoco.MjModel, *, cube: bool, peg: bool):
        m = model
        self.arm, self.arm_ctrl = _arm_slices(m)
        self.finger_qadr = np.array([m.joint(j).qposadr[0] for j in _scene.FINGER_JOINTS])
        self.finger0, self.finger1 = (int(a) for a in self.finger_qadr)
        #: Both fingers as one slice when they are adjacent in qpos (one view reads both), else None.
        self.fingers = slice(self.finger0, self.finger0 + 2) if self.finger1 == self.finger0 + 1 else None
        self.gripper_act = m.actuator(_scene.GRIPPER_ACTUATOR).id
        self.tcp = m.site("tcp").id
        _check_tcp_moves_with_the_arm_only(m, self.tcp, self.arm)
        self.target_mocap = m.body("target").mocapid[0]
        self.hole_mocap = m.body("hole_block").mocapid[0] if peg else None
        self.floor_mark_mocap = m.body("floor_mark").mocapid[0] if cube else None
        #: Free objects by name -> qpos address of their free joint.
        self.objects: dict[str, int] = {"cube": m.joint("cube").qposadr[0]} if cube else {}
        self._joint_ranges(m)
        robot_bodies = {m.body(b).id for b in _scene.ARM_BODIES} | {m.body("fr3_link0").id}
        self.robot_geom = np.array([m.geom_bodyid[g] in robot_bodies for g in range(m.ngeom)])
        self.table_geom = np.zeros(m.ngeom, dtype=bool)
        self.table_geom[m.geom("table").id] = True

    def _joint_ranges(self, m: mujoco.MjModel) -> None:
        """The model's joint ranges, and inside them where targets are clipped and faults flagged."""
        ranges = np.array([m.joint(j).range for j in _scene.ARM_JOINTS])
        self.joint_low, self.joint_high = ranges[:, 0].copy(), ranges[:, 1].copy()
        self.ctrl_low = self.joint_low + JOINT_TARGET_MARGIN
        self.ctrl_high = self.joint_high - JOINT_TARGET_MARGIN
        self.flag_low = self.joint_low + JOINT_LIMIT_FLAG_MARGIN
        self.flag_high = self.joint_high - JOINT_LIMIT_FLAG_MARGIN


def _arm_slices(m: mujoco.MjModel) -> tuple[slice, slice]:
    """The arm's 7 joints in qpos/qvel and its 7 servos in ctrl, as slices (checked contiguous)."""
    qadr = np.array([m.joint(j).qposadr[0] for j in _scene.ARM_JOINTS])
    dadr = np.array([m.joint(j).dofadr[0] for j in _scene.ARM_JOINTS])
    act = np.array([m.actuator(a).id for a in _scene.ARM_ACTUATORS])
    if (
        not np.array_equal(qadr, np.arange(qadr[0], qadr[0] + 7))
        or not np.array_equal(dadr, qadr)
        or not np.array_equal(act, np.arange(act[0], act[0] + 7))
    ):
        raise RuntimeError("the FR3 model's arm joints and servos are expected contiguous in qpos/qvel/ctrl")
    return slice(int(qadr[0]), int(qadr[0]) + 7), slice(int(act[0]), int(act[0]) + 7)


def _check_tcp_moves_with_the_arm_only(m: mujoco.MjModel, tcp: int, arm: slice) -> None:
    tcp_dofs, body = set(), int(m.site_bodyid[tcp])
    while body:
        tcp_dofs.update(range(m.body_dofadr[body], m.body_dofadr[body] + m.body_dofnum[body]))
        body = int(m.body_parentid[body])
    if tcp_dofs != set(range(arm.start, arm.stop)):
        raise RuntimeError("the FR3 model's TCP is expected to move with the 7 arm joints only")
