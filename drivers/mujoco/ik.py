"""Cartesian control of the sim arm: one damped-least-squares IK iteration per control step.

Why one iteration per step is enough: it is linearised at the MEASURED state, and the next control
step re-linearises at the state the servos reached, so successive steps converge on the target
while the arm moves (a closed loop on the measured pose). `TcpIk.solve` iterates to convergence on
a scratch MjData, for planning.
"""

from __future__ import annotations

import operator

import mujoco
import numpy as np

from rlhw.robot.pose import rotation_error

#: Largest joint change (rad) one IK iteration may ask for.
MAX_IK_STEP = 0.25


class TcpIk:
    """The IK of one arm: the TCP site ``tcp``, the arm's joints at ``arm`` (a slice of qpos and of
    the dofs, which coincide), joint targets kept within ``[ctrl_low, ctrl_high]`` and pulled
    toward ``home_q`` in the null space. Scratch buffers are allocated once: the per-step path
    allocates little."""

    def __init__(
        self,
        model: mujoco.MjModel,
        tcp: int,
        arm: slice,
        home_q: np.ndarray,
        ctrl_low: np.ndarray,
        ctrl_high: np.ndarray,
    ):
        self.model, self.tcp, self.arm = model, tcp, arm
        m = model
        # The TCP jacobian, full width: its rows 0-2 (translation) and 3-5 (rotation) are the two
        # outputs of mj_jacSite, written in place. Only the arm's joints move the TCP (checked by
        # the layout), so every other column (fingers, free objects) is exactly zero, and the IK
        # can work on all nv columns without copying the arm's 7 out first.
        self._jac6 = np.zeros((6, m.nv))
        self._jacp, self._jacr = self._jac6[:3], self._jac6[3:]
        self._quat = np.zeros(4)
        self._err = np.zeros(6)
        self._gram = np.zeros((6, 6))
        self._gram_flat = self._gram.reshape(36)  # views, made once
        self._damping_flat = (1e-4 * np.eye(6)).reshape(36)
        self._rhs = np.zeros(6)
        self._x = np.zeros(6)
        self._dq = np.zeros(m.nv)
        self._posture = np.zeros(m.nv)  # zero outside the arm's columns
        self._dq_arm = self._dq[arm]
        self._posture_arm = self._posture[arm]
        self._home_list = np.asarray(home_q, dtype=float).tolist()
        self._ctrl_low, self._ctrl_high = ctrl_low, ctrl_high
        self._ctrl_low_list = ctrl_low.tolist()
        self._ctrl_high_list = ctrl_high.tolist()
        self._scratch: mujoco.MjData | None = None

    def solve(self, position: np.ndarray, quat_wxyz: np.ndarray, q_start: np.ndarray, iterations: int) -> np.ndarray:
        """Joint angles that put the TCP at the pose, from ``q_start``, on a scratch MjData."""
        m, k = self.model, self._scratch
        if k is None:  # made on first use: most arms never plan, and each MjData costs memory
            k = self._scratch = mujoco.MjData(m)
        q = np.array(q_start, dtype=float)
        position = np.asarray(position, dtype=float).tolist()
        quat_wxyz = np.asarray(quat_wxyz, dtype=float).tolist()
        for _ in range(iterations):
            k.qpos[self.arm] = q
            mujoco.mj_kinematics(m, k)
            mujoco.mj_comPos(m, k)
            mujoco.mju_mat2Quat(self._quat, k.site_xmat[self.tcp])
            q = np.array(
                self.iteration(k, q.tolist(), position, quat_wxyz, self._quat.tolist(), k.site_xpos[self.tcp].tolist())
            )
        return q

    def release(self) -> None:
        """Drop the scratch MjData (the arm is closing); `solve` makes a new one when needed."""
        self._scratch = None

    def iteration(
        self, data: mujoco.MjData, q: list[float], position, quat_wxyz, current_wxyz, current_xyz
    ) -> list[float]:
        """One damped-least-squares step from joint angles ``q`` (``data`` holds kinematics and
        COM terms at ``q``; ``current_wxyz`` and ``current_xyz`` are the TCP pose there); returns
        the new angles.

        A small null-space term keeps the elbow near the home posture so the redundant 7th DoF
        does not drift. Joints pushed past their range are held there and the others re-solved.

        Speed (this runs every control step): vectors of 3, 4 and 7 are plain floats, since one
        numpy or binding call costs about as much as a dozen float operations; the 6x6 solve is
        mju_* calls on buffers allocated once.
        """
        px, py, pz = position
        x, y, z = current_xyz
        tw, tx, ty, tz = quat_wxyz
        cw, cx, cy, cz = current_wxyz
        rx, ry, rz = rotation_error((cx, cy, cz, cw), (tx, ty, tz, tw))  # target * conj(current)
        self._err[:] = (px - x, py - y, pz - z, rx, ry, rz)
        mujoco.mj_jacSite(self.model, data, self._jacp, self._jacr, self.tcp)
        # dq = J+ err + (I - J+ J) posture, J+ = J^T (J J^T + lambda^2 I)^-1: one 6x6 Cholesky solve.
        posture = [(h - qi) * 0.2 for h, qi in zip(self._home_list, q)]
        self._posture_arm[:] = posture
        self._dls_step(self._jac6, self._posture, self._dq)
        step = list(map(operator.add, self._dq_arm.tolist(), posture))
        low, high = self._ctrl_low_list, self._ctrl_high_list
        q_next = list(map(operator.add, q, step))
        inside = all(map(operator.le, low, q_next)) and all(map(operator.le, q_next, high))
        if not inside:
            step = self._step_without_blocked_joints(q_next, posture)
        largest = max(map(abs, step))
        if largest > MAX_IK_STEP:  # near singularities DLS can ask for big jumps: scale down
            scale = MAX_IK_STEP / largest
            step = [s * scale for s in step]
        elif inside:
            return q_next  # the usual case: q + step, already within the ranges
        return [min(max(qi + s, lo), hi) for qi, s, lo, hi in zip(q, step, low, high)]

    def _step_without_blocked_joints(self, q_next: list[float], posture: list[float]) -> list[float]:
        """Joints pushed past their range are held there: solve again without them, so the others
        do what they can instead of compensating for motion that never happens."""
        blocked = (np.array(q_next) < self._ctrl_low) | (np.array(q_next) > self._ctrl_high)
        jac = self._jac6.copy()
        cols = np.flatnonzero(blocked) + self.arm.start
        jac[:, cols] = 0.0
        posture = [0.0 if b else p for p, b in zip(posture, blocked.tolist())]
        self._posture_arm[:] = posture
        self._dls_step(jac, self._posture, self._dq)
        return list(map(operator.add, self._dq_arm.tolist(), posture))

    def _dls_step(self, jac: np.ndarray, posture: np.ndarray, out: np.ndarray) -> None:
        """out = J^T (J J^T + lambda^2 I)^-1 (err - J posture): the task-space part of the IK step."""
        gram, rhs, x = self._gram, self._rhs, self._x
        mujoco.mju_mulMatMatT(gram, jac, jac)
        mujoco.mju_addTo(self._gram_flat, self._damping_flat)
        mujoco.mju_cholFactor(gram, 0.0)
        mujoco.mju_mulMatVec(rhs, jac, posture)
        mujoco.mju_sub(rhs, self._err, rhs)
        mujoco.mju_cholSolve(x, gram, rhs)
        mujoco.mju_mulMatTVec(out, jac, x)
