"""`MujocoArm`: a simulated Franka FR3 + hand behind the `Arm` interface.

Control scheme (why it is cheap): a Cartesian target is turned into a joint target ONCE per
control step by one damped-least-squares inverse-kinematics iteration, linearised at the measured
state on the arm's own MjData (jacobian from ``mj_jacSite``; null-space pull toward the home
posture; saturated joints held and the others re-solved). The model's own joint position servos
(kp 2000-4500, overdamped, ~0.1 s time constant, like a stiff impedance controller) then track
that joint target for all physics substeps inside one ``mj_step(nstep=n)`` call, so no Python runs
per substep. Re-linearising every step closes the loop on the measured pose. The arm's links are
gravity compensated, like the real controller does.

Time: the simulation does not run by itself. ``realtime = False`` tells the env to call
``advance(dt)`` (which steps physics for ``dt`` seconds of simulated time) instead of sleeping.
Timestamps are ``epoch + sim_time`` with ``epoch`` the wall clock at `connect`, so states and the
frames rendered from them share one clock.

Faults, as on the real arm: a collision of the robot with the table (contact normal force above
``collision_force_n``) or a joint at its limit latches an error flag, the arm holds its pose and
refuses motion (RobotFault "reflex") until `recover`. A fault that arises while physics advances is
raised from `advance`/`move_joints` and also shows in ``state().errors``.
"""

from __future__ import annotations

import time

import mujoco
import numpy as np

from drivers.mujoco import scene as _scene
from rlhw.errors import RobotFault
from rlhw.robot.arm import HOME_Q, Arm, ArmState

#: FR3 joint velocity limits (rad/s), used to time `move_joints`.
FR3_MAX_JOINT_VELOCITY = np.array([2.62, 2.62, 2.62, 2.62, 5.26, 4.18, 5.26])
#: Joint targets stay this far (rad) inside the model's joint ranges: more than the safety layer's
#: default margin (env.safety.joint_limit_margin_rad = 0.05), so Cartesian tracking near the edge of
#: the reachable space stops short of a joint limit instead of tripping the safety layer's check.
JOINT_TARGET_MARGIN = 0.1
#: A joint this close (rad) to its range end raises the "joint_limit" flag.
JOINT_LIMIT_FLAG_MARGIN = 0.005
#: Largest joint change (rad) one IK iteration may ask for.
MAX_IK_STEP = 0.25
_BAD_QACC = int(mujoco.mjtWarning.mjWARN_BADQACC)


def _xyzw(wxyz: np.ndarray) -> np.ndarray:
    return np.array([wxyz[1], wxyz[2], wxyz[3], wxyz[0]])


def _wxyz(xyzw: np.ndarray) -> np.ndarray:
    return np.array([xyzw[3], xyzw[0], xyzw[1], xyzw[2]])


class MujocoArm(Arm):
    """One simulated arm with its own MjData; arms built with equal scene options share the MjModel.

    ``cube`` adds a free 5 cm cube (parked out of reach until a task places it). ``seed`` only
    feeds `rng` (tasks may use it); the physics itself is deterministic.
    """

    realtime = False
    max_gripper_width = 0.08

    def __init__(
        self,
        name: str = "mujoco",
        *,
        cube: bool = False,
        timestep: float = 0.002,
        home_q: np.ndarray | None = None,
        collision_force_n: float = 30.0,
        seed: int | None = None,
    ):
        if collision_force_n <= 0:
            raise ValueError(f"collision_force_n: must be > 0 newtons, got {collision_force_n}")
        self.name = name
        self.options = _scene.SceneOptions(cube=cube, timestep=timestep)
        self.model = _scene.scene_model(self.options)
        self.home_q = np.array(HOME_Q if home_q is None else home_q, dtype=float)
        if self.home_q.shape != (7,):
            raise ValueError(f"home_q: expected 7 joint angles, got shape {self.home_q.shape}")
        self.collision_force_n = float(collision_force_n)
        self.rng = np.random.default_rng(seed)

        m = self.model
        self._arm_qadr = np.array([m.joint(j).qposadr[0] for j in _scene.ARM_JOINTS])
        self._arm_dadr = np.array([m.joint(j).dofadr[0] for j in _scene.ARM_JOINTS])
        self._arm_act = np.array([m.actuator(a).id for a in _scene.ARM_ACTUATORS])
        self._finger_qadr = np.array([m.joint(j).qposadr[0] for j in _scene.FINGER_JOINTS])
        self._gripper_act = m.actuator(_scene.GRIPPER_ACTUATOR).id
        self._tcp = m.site("tcp").id
        self._target_mocap = m.body("target").mocapid[0]
        ranges = np.array([m.joint(j).range for j in _scene.ARM_JOINTS])
        self.joint_low, self.joint_high = ranges[:, 0].copy(), ranges[:, 1].copy()
        self._ctrl_low = self.joint_low + JOINT_TARGET_MARGIN
        self._ctrl_high = self.joint_high - JOINT_TARGET_MARGIN
        self._flag_low = self.joint_low + JOINT_LIMIT_FLAG_MARGIN
        self._flag_high = self.joint_high - JOINT_LIMIT_FLAG_MARGIN
        self._flag_low_list = self._flag_low.tolist()
        self._flag_high_list = self._flag_high.tolist()
        robot_bodies = {m.body(b).id for b in _scene.ARM_BODIES} | {m.body("fr3_link0").id}
        self._robot_geom = np.array([m.geom_bodyid[g] in robot_bodies for g in range(m.ngeom)])
        self._table_geom = np.zeros(m.ngeom, dtype=bool)
        self._table_geom[m.geom("table").id] = True
        self._objects: dict[str, int] = {}
        if cube:
            self._objects["cube"] = m.joint("cube").qposadr[0]

        # Scratch buffers, allocated once: the per-step path allocates little.
        self._jacp = np.zeros((3, m.nv))
        self._jacr = np.zeros((3, m.nv))
        self._quat = np.zeros(4)
        self._quat_inv = np.zeros(4)
        self._quat_err = np.zeros(4)
        self._rot_err = np.zeros(3)
        self._force = np.zeros(6)
        self._ik_err = np.zeros(6)
        self._target_quat = np.zeros(4)
        self._finger0, self._finger1 = (int(a) for a in self._finger_qadr)
        self._ik_jac = np.zeros((6, 7))
        self._ik_gram = np.zeros((6, 6))
        self._ik_gram_flat = self._ik_gram.reshape(36)  # views, made once
        self._ik_damping_flat = (1e-4 * np.eye(6)).reshape(36)
        self._ik_err_pos = self._ik_err[:3]
        self._ik_err_rot = self._ik_err[3:]
        self._ik_rhs = np.zeros(6)
        self._ik_x = np.zeros(6)
        self._ik_dq = np.zeros(7)
        self._ik_posture = np.zeros(7)
        self._ik_step = np.zeros(7)
        self._ik_q_next = np.zeros(7)
        self._arm = slice(int(self._arm_qadr[0]), int(self._arm_qadr[0]) + 7)
        if not np.array_equal(self._arm_qadr, np.arange(self._arm_qadr[0], self._arm_qadr[0] + 7)) or \
                not np.array_equal(self._arm_dadr, self._arm_qadr) or \
                not np.array_equal(self._arm_act, np.arange(self._arm_act[0], self._arm_act[0] + 7)):
            raise RuntimeError("the FR3 model's arm joints and servos are expected contiguous in qpos/qvel/ctrl")
        self._arm_ctrl = slice(int(self._arm_act[0]), int(self._arm_act[0]) + 7)

        self.data: mujoco.MjData | None = None
        self._ik_data: mujoco.MjData | None = None
        self._epoch = 0.0
        self._errors: list[str] = []
        self._q_des = self.home_q.copy()
        self._kinematics_time = -1.0
        self._camlight_time = -1.0
        self._bad_qacc_seen = 0

    # ------------------------------------------------------------------ lifecycle
    def connect(self, timeout_s: float = 10.0) -> None:
        """Create this arm's simulation state: arm at its home posture, gripper open, at rest."""
        if self.data is not None:
            return
        m = self.model
        self.data = mujoco.MjData(m)
        d = self.data
        d.qpos[self._arm] = self.home_q
        d.qpos[self._finger_qadr] = self.max_gripper_width / 2
        for qadr in self._objects.values():
            d.qpos[qadr:qadr + 3] = _scene.CUBE_PARKED
            d.qpos[qadr + 3:qadr + 7] = (1.0, 0.0, 0.0, 0.0)
        d.ctrl[self._arm_ctrl] = self.home_q
        d.ctrl[self._gripper_act] = _scene.GRIPPER_CTRL_MAX
        self._q_des = self.home_q.copy()
        mujoco.mj_forward(m, d)
        self._kinematics_time = d.time
        self._errors = []
        self._bad_qacc_seen = 0
        self._warnings = d.warning.number  # a live view: reading it later costs no binding call
        self._epoch = time.time()

    def close(self) -> None:
        self.data = None
        self._ik_data = None

    @property
    def connected(self) -> bool:
        return self.data is not None

    def _live(self) -> mujoco.MjData:
        if self.data is None:
            raise RobotFault("not_connected", f"sim arm {self.name!r} is not connected; call connect() first")
        return self.data

    # ------------------------------------------------------------------ time
    @property
    def sim_time(self) -> float:
        """Simulated seconds since `connect`."""
        return self._live().time

    @property
    def control_timestep(self) -> float:
        return self.model.opt.timestep

    def to_wall_clock(self, sim_time: float) -> float:
        """The timestamp reported for simulated time ``sim_time``."""
        return self._epoch + sim_time

    def advance(self, dt: float) -> None:
        """Step physics for ``dt`` seconds of simulated time (rounded to whole physics steps).

        Raises RobotFault("reflex") when a collision or joint-limit fault arises during the step.
        """
        d = self._live()
        if not np.isfinite(dt) or dt < 0:
            raise ValueError(f"dt: must be a finite number of seconds >= 0, got {dt}")
        nstep = int(round(dt / self.model.opt.timestep))
        if nstep == 0:
            return
        mujoco.mj_step(self.model, d, nstep)
        self._check_faults()

    def sync(self, cameras: bool = False) -> mujoco.MjData:
        """Bring positions (bodies, sites; cameras and lights with ``cameras``) up to the current
        qpos and return the MjData.

        ``mj_step`` leaves them one physics step behind; state and rendering want them current.
        """
        d = self._live()
        if self._kinematics_time != d.time:
            mujoco.mj_kinematics(self.model, d)
            self._kinematics_time = d.time
            self._camlight_time = -1.0
        if cameras and self._camlight_time != d.time:
            mujoco.mj_camlight(self.model, d)
            self._camlight_time = d.time
        return d

    # ------------------------------------------------------------------ state
    def state(self) -> ArmState:
        d = self.sync()
        quat = self._quat
        mujoco.mju_mat2Quat(quat, d.site_xmat[self._tcp])
        ee_pose = np.empty(7)
        ee_pose[:3] = d.site_xpos[self._tcp]
        ee_pose[3:6] = quat[1:]
        ee_pose[6] = quat[0]
        qpos = d.qpos
        return ArmState(
            timestamp=self._epoch + d.time,
            q=qpos[self._arm].copy(),
            dq=d.qvel[self._arm].copy(),
            ee_pose=ee_pose,
            gripper_width=float(qpos[self._finger0] + qpos[self._finger1]),
            errors=tuple(self._errors),
        )

    @property
    def errors(self) -> tuple[str, ...]:
        return tuple(self._errors)

    # ------------------------------------------------------------------ commands
    def _refuse_if_faulted(self) -> None:
        if self._errors:
            raise RobotFault(
                "reflex", f"sim arm {self.name!r} is in error state {self._errors}; call recover() first")

    def command_pose(self, pose: np.ndarray) -> None:
        """Track the TCP pose ``[x, y, z, qx, qy, qz, qw]`` (base frame): solves IK now, servos during `advance`."""
        d = self._live()
        pose = np.asarray(pose, dtype=float)
        if pose.shape != (7,) or not np.isfinite(pose).all():
            raise ValueError(f"pose: expected 7 finite numbers [x, y, z, qx, qy, qz, qw], got {pose!r}")
        quat = self._target_quat
        quat[0] = pose[6]
        quat[1:] = pose[3:6]
        if mujoco.mju_normalize4(quat) < 1e-6:
            raise ValueError(f"pose: quaternion {pose[3:]} has zero norm")
        self._refuse_if_faulted()
        # One IK iteration per control step, linearised at the measured state: closed loop on the
        # measured pose, so successive steps converge while the servos move. It uses the live
        # MjData (its kinematics brought up to date), which physics just touched: much cheaper
        # than a scratch MjData that is cache-cold after 50 substeps.
        self.sync()
        mujoco.mj_comPos(self.model, d)
        self._q_des = self._ik_iteration(d, d.qpos[self._arm].copy(), pose[:3], quat)
        d.ctrl[self._arm_ctrl] = self._q_des

    def solve_ik(self, position: np.ndarray, quat_wxyz: np.ndarray, q_start: np.ndarray,
                 iterations: int = 20) -> np.ndarray:
        """Joint angles (within the ranges, minus a margin) that put the TCP at the pose
        (``quat_wxyz`` is MuJoCo's w-first order), from ``q_start``, on a scratch MjData: the
        arm's own state is untouched. For planning; `command_pose` does one iteration per step."""
        self._live()
        m, k = self.model, self._ik_data
        if k is None:  # made on first use: most arms never plan, and each MjData costs memory
            k = self._ik_data = mujoco.MjData(m)
        q = np.array(q_start, dtype=float)
        for _ in range(iterations):
            k.qpos[self._arm] = q
            mujoco.mj_kinematics(m, k)
            mujoco.mj_comPos(m, k)
            q = self._ik_iteration(k, q, position, quat_wxyz)
        return q

    def _ik_iteration(self, data: mujoco.MjData, q: np.ndarray, position: np.ndarray,
                      quat_wxyz: np.ndarray) -> np.ndarray:
        """One damped-least-squares step from ``q`` (``data`` holds kinematics and COM terms at
        ``q``); returns ``q`` updated in place.

        A small null-space term keeps the elbow near the home posture so the redundant 7th DoF
        does not drift. Joints pushed past their range are held there and the others re-solved.
        """
        m, jac, tcp, arm = self.model, self._ik_jac, self._tcp, self._arm
        dq, posture, step, q_next = self._ik_dq, self._ik_posture, self._ik_step, self._ik_q_next
        quat, quat_inv, quat_err = self._quat, self._quat_inv, self._quat_err
        mujoco.mju_sub3(self._ik_err_pos, position, data.site_xpos[tcp])
        mujoco.mju_mat2Quat(quat, data.site_xmat[tcp])
        mujoco.mju_negQuat(quat_inv, quat)
        mujoco.mju_mulQuat(quat_err, quat_wxyz, quat_inv)
        if quat_err[0] < 0:  # the short way round
            mujoco.mju_scl(quat_err, quat_err, -1.0)
        mujoco.mju_quat2Vel(self._ik_err_rot, quat_err, 1.0)
        mujoco.mj_jacSite(m, data, self._jacp, self._jacr, tcp)
        jac[:3] = self._jacp[:, arm]
        jac[3:] = self._jacr[:, arm]
        # dq = J+ err + (I - J+ J) posture, J+ = J^T (J J^T + lambda^2 I)^-1: one 6x6 Cholesky
        # solve. mju_* calls instead of numpy: this runs every control step, and numpy's per-call
        # overhead on 6x7 matrices costs more than the arithmetic.
        mujoco.mju_sub(posture, self.home_q, q)
        mujoco.mju_scl(posture, posture, 0.2)
        self._dls_step(jac, posture, dq)
        mujoco.mju_add(step, dq, posture)
        mujoco.mju_add(q_next, q, step)
        blocked = (q_next < self._ctrl_low) | (q_next > self._ctrl_high)
        if blocked.any():
            # Joints pushed past their range are held there: solve again without them, so the
            # others do what they can instead of compensating for motion that never happens.
            jac[:, blocked] = 0.0
            posture[blocked] = 0.0
            self._dls_step(jac, posture, dq)
            mujoco.mju_add(step, dq, posture)
        largest = np.abs(step).max()
        if largest > MAX_IK_STEP:  # near singularities DLS can ask for big jumps: scale down
            mujoco.mju_scl(step, step, MAX_IK_STEP / largest)
        mujoco.mju_addTo(q, step)
        np.clip(q, self._ctrl_low, self._ctrl_high, out=q)
        return q

    def _dls_step(self, jac: np.ndarray, posture: np.ndarray, out: np.ndarray) -> None:
        """out = J^T (J J^T + lambda^2 I)^-1 (err - J posture): the task-space part of the IK step."""
        gram, rhs, x = self._ik_gram, self._ik_rhs, self._ik_x
        mujoco.mju_mulMatMatT(gram, jac, jac)
        mujoco.mju_addTo(self._ik_gram_flat, self._ik_damping_flat)
        mujoco.mju_cholFactor(gram, 0.0)
        mujoco.mju_mulMatVec(rhs, jac, posture)
        mujoco.mju_sub(rhs, self._ik_err, rhs)
        mujoco.mju_cholSolve(x, gram, rhs)
        mujoco.mju_mulMatTVec(out, jac, x)

    def command_joints(self, q: np.ndarray) -> None:
        """Servo to joint target ``q`` (non-blocking; tracked during `advance`)."""
        d = self._live()
        q = self._checked_joint_target(q)
        self._refuse_if_faulted()
        self._q_des = q
        d.ctrl[self._arm_ctrl] = q

    def command_gripper(self, width: float) -> None:
        d = self._live()
        width = float(width)
        if not np.isfinite(width):
            raise ValueError(f"width: must be a finite number of metres, got {width}")
        width = min(max(width, 0.0), self.max_gripper_width)
        d.ctrl[self._gripper_act] = width / self.max_gripper_width * _scene.GRIPPER_CTRL_MAX

    def _checked_joint_target(self, q: np.ndarray) -> np.ndarray:
        q = np.asarray(q, dtype=float)
        if q.shape != (7,) or not np.all(np.isfinite(q)):
            raise ValueError(f"q: expected 7 finite joint angles (rad), got {q!r}")
        outside = np.flatnonzero((q < self.joint_low) | (q > self.joint_high))
        if outside.size:
            i = int(outside[0])
            raise RobotFault(
                "limit", f"joint target q[{i}]={q[i]:.3f} rad is outside the FR3 range "
                f"[{self.joint_low[i]:.3f}, {self.joint_high[i]:.3f}]")
        return np.clip(q, self._ctrl_low, self._ctrl_high)

    def move_joints(self, q: np.ndarray, speed_factor: float = 0.2, timeout_s: float = 15.0) -> None:
        """Blocking joint move along a quintic (minimum-jerk) profile at ``speed_factor`` x FR3 max
        joint velocity, then settle. Bounded by ``timeout_s`` of simulated time AND of wall time."""
        d = self._live()
        target = self._checked_joint_target(q)
        if not (0.0 < speed_factor <= 1.0):
            raise ValueError(f"speed_factor: must be in (0, 1], got {speed_factor}")
        self._refuse_if_faulted()
        start = d.qpos[self._arm].copy()
        delta = target - start
        # A quintic's peak velocity is 1.875 x the average: time the move so it stays under the limit.
        duration = max(0.1, 1.875 * float(np.max(np.abs(delta) / (speed_factor * FR3_MAX_JOINT_VELOCITY))))
        chunk = max(1, int(round(0.02 / self.model.opt.timestep)))
        t0, wall_deadline = d.time, time.monotonic() + timeout_s
        self._q_des = target
        while True:
            elapsed = d.time - t0
            if elapsed < duration:
                s = elapsed / duration
                d.ctrl[self._arm_ctrl] = start + delta * (10 * s**3 - 15 * s**4 + 6 * s**5)
            else:
                d.ctrl[self._arm_ctrl] = target
                if (np.max(np.abs(d.qpos[self._arm] - target)) < 5e-3
                        and np.max(np.abs(d.qvel[self._arm])) < 0.05):
                    return
            if elapsed > timeout_s or time.monotonic() > wall_deadline:
                self.stop()
                raise RobotFault(
                    "timeout", f"move_joints did not reach its target within {timeout_s} s "
                    f"(max joint error {np.max(np.abs(d.qpos[self._arm] - target)):.4f} rad)")
            mujoco.mj_step(self.model, d, chunk)
            self._check_faults()

    def stop(self) -> None:
        """Hold the current joint positions (the servos' damping brings the arm to rest)."""
        if self.data is None:
            return
        self._q_des = np.clip(self.data.qpos[self._arm], self._ctrl_low, self._ctrl_high)
        self.data.ctrl[self._arm_ctrl] = self._q_des

    def recover(self, timeout_s: float = 5.0) -> bool:
        """Clear the error flags unless their cause persists (still pressed into the table)."""
        self._live()
        self.stop()
        self._errors = []
        self._errors = self._current_faults()
        return not self._errors

    # ------------------------------------------------------------------ faults
    def _current_faults(self) -> list[str]:
        d = self.data
        faults = []
        # Plain Python floats: right after mj_step numpy's machinery is cache-cold, 7 float
        # comparisons are cheaper than 4 ufunc calls.
        for qi, lo, hi in zip(d.qpos[self._arm].tolist(), self._flag_low_list, self._flag_high_list):
            if qi < lo or qi > hi:
                faults.append("joint_limit")
                break
        if d.ncon:
            geoms = d.contact.geom
            g1, g2 = geoms[:, 0], geoms[:, 1]
            hits = np.flatnonzero((self._robot_geom[g1] & self._table_geom[g2])
                                  | (self._table_geom[g1] & self._robot_geom[g2]))
            for i in hits:
                mujoco.mj_contactForce(self.model, d, int(i), self._force)
                if abs(self._force[0]) > self.collision_force_n:
                    faults.append("collision")
                    break
        # MuJoCo resets the state itself when accelerations blow up; it counts that as a warning.
        bad_qacc = self._warnings[_BAD_QACC]
        if bad_qacc > self._bad_qacc_seen:
            self._bad_qacc_seen = bad_qacc
            faults.append("sim_unstable")
        return faults

    def _check_faults(self) -> None:
        faults = self._current_faults()
        new = [f for f in faults if f not in self._errors]
        if new:
            self._errors.extend(new)
            self.stop()
            raise RobotFault("reflex", f"sim arm {self.name!r}: {', '.join(new)} (arm stopped; call recover())")

    # ------------------------------------------------------------------ sim-only extras (tasks)
    @property
    def objects(self) -> tuple[str, ...]:
        """Names of the free objects in this arm's scene (``("cube",)`` with ``cube=True``)."""
        return tuple(self._objects)

    def _object_qadr(self, name: str) -> int:
        if name not in self._objects:
            known = ", ".join(self._objects) or "none"
            raise ValueError(f"object {name!r} is not in this sim scene (objects: {known}); "
                             "build MujocoArm(cube=True) for the cube")
        return self._objects[name]

    def object_pose(self, name: str = "cube") -> np.ndarray:
        """Pose ``[x, y, z, qx, qy, qz, qw]`` of a free object in the base frame (sim only)."""
        qadr = self._object_qadr(name)
        qpos = self._live().qpos
        return np.concatenate([qpos[qadr:qadr + 3], _xyzw(qpos[qadr + 3:qadr + 7])])

    def set_object_pose(self, name: str, pose: np.ndarray) -> None:
        """Teleport a free object to ``pose`` (position, or ``[x, y, z, qx, qy, qz, qw]``) at rest."""
        qadr = self._object_qadr(name)
        d = self._live()
        pose = np.asarray(pose, dtype=float)
        if pose.shape not in ((3,), (7,)) or not np.all(np.isfinite(pose)):
            raise ValueError(f"pose: expected 3 or 7 finite numbers, got {pose!r}")
        d.qpos[qadr:qadr + 3] = pose[:3]
        d.qpos[qadr + 3:qadr + 7] = _wxyz(pose[3:] / np.linalg.norm(pose[3:])) if pose.shape == (7,) else (1, 0, 0, 0)
        dadr = self.model.jnt_dofadr[self.model.joint(name).id]
        d.qvel[dadr:dadr + 6] = 0.0
        self._kinematics_time = -1.0

    def park_object(self, name: str = "cube") -> None:
        """Put an object back out of reach and out of view."""
        self.set_object_pose(name, _scene.CUBE_PARKED)

    def set_target_marker(self, position: np.ndarray) -> None:
        """Move the translucent goal marker (visual only, no collisions) to ``position``."""
        d = self._live()
        position = np.asarray(position, dtype=float)
        if position.shape != (3,) or not np.all(np.isfinite(position)):
            raise ValueError(f"position: expected 3 finite numbers, got {position!r}")
        d.mocap_pos[self._target_mocap] = position
        self._kinematics_time = -1.0
