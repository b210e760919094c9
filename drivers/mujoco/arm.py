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
Timestamps are wall-clock (``time.time()``), as the env contract says: the wall time at which the
simulation reached the state (the end of the `advance` or `move_joints` that produced it), so
states and the frames rendered from them share one clock. (Simulated time runs faster than the
wall clock here; ``epoch + sim_time`` ran seconds ahead of real capture times within a minute.)

Faults, as on the real arm: a collision of the robot with the table (contact normal force above
``collision_force_n``) or a joint at its limit latches an error flag, the arm holds its pose and
refuses motion (RobotFault "reflex") until `recover`. A fault that arises while physics advances is
raised from `advance`/`move_joints` and also shows in ``state().errors``.

The pieces, by job: the scene and its model cache (scene.py), where the arm's joints, servos, sites
and geoms sit in the model (layout.py), the IK (ik.py), contact forces and the external wrench
(contact.py), live views for reading the state (state.py); this module holds the arm's lifecycle,
time, commands and faults.
"""

from __future__ import annotations

import math
import operator
import time

import mujoco
import numpy as np

from drivers.mujoco import scene as _scene
from drivers.mujoco.contact import NO_WRENCH, ContactSensor
from drivers.mujoco.ik import TcpIk
from drivers.mujoco.layout import ArmLayout
from drivers.mujoco.state import StateViews
from rlhw.errors import FaultKind, RobotFault
from rlhw.robot.arm import HOME_Q, Arm, ArmCapability, ArmState
from rlhw.robot.pose import Pose

#: FR3 joint velocity limits (rad/s), used to time `move_joints`.
FR3_MAX_JOINT_VELOCITY = np.array([2.62, 2.62, 2.62, 2.62, 5.26, 4.18, 5.26])
_BAD_QACC = int(mujoco.mjtWarning.mjWARN_BADQACC)


class MujocoArm(Arm):
    """One simulated arm with its own MjData; arms built with equal scene options share the MjModel.

    ``cube`` adds a free 5 cm cube (parked out of reach until a task places it). ``seed`` only
    feeds `rng` (tasks may use it); the physics itself is deterministic.
    """

    realtime = False
    max_gripper_width = 0.08
    capabilities = frozenset(ArmCapability)  # a simulator: every scene hook

    def __init__(
        self,
        name: str = "mujoco",
        *,
        cube: bool = False,
        peg: bool = False,
        timestep: float = 0.002,
        home_q: np.ndarray | None = None,
        collision_force_n: float = 30.0,
        seed: int | None = None,
    ):
        if collision_force_n <= 0:
            raise ValueError(f"collision_force_n: must be > 0 newtons, got {collision_force_n}")
        self.name = name
        self.options = _scene.SceneOptions(cube=cube, peg=peg, timestep=timestep)
        self.model = _scene.scene_model(self.options)
        self.home_q = np.array(HOME_Q if home_q is None else home_q, dtype=float)
        if self.home_q.shape != (7,):
            raise ValueError(f"home_q: expected 7 joint angles, got shape {self.home_q.shape}")
        self.collision_force_n = float(collision_force_n)
        self.rng = np.random.default_rng(seed)
        lay = self.layout = ArmLayout(self.model, cube=cube, peg=peg)
        # What the per-step code reads, one attribute lookup away.
        self._arm, self._arm_ctrl, self._tcp = lay.arm, lay.arm_ctrl, lay.tcp
        self.joint_low, self.joint_high = lay.joint_low, lay.joint_high
        self._ctrl_low, self._ctrl_high = lay.ctrl_low, lay.ctrl_high
        self._flag_low_list, self._flag_high_list = lay.flag_low.tolist(), lay.flag_high.tolist()
        self._objects = lay.objects
        # With the ``insert`` props (scene.py) the fingers start at the peg's width around it.
        self._start_width = 2 * _scene.PEG_HALF_WIDTH if peg else self.max_gripper_width
        self._ik = TcpIk(self.model, lay.tcp, lay.arm, self.home_q, lay.ctrl_low, lay.ctrl_high)
        self._contacts = ContactSensor(self.model, lay.robot_geom, lay.table_geom, lay.tcp)
        self._quat = np.zeros(4)
        self._init_sim_state()

    def _init_sim_state(self) -> None:
        """The bookkeeping of a not yet connected arm (`connect` creates the MjData)."""
        self._tcp_wxyz: tuple[float, float, float, float] | None = None  # TCP orientation at the current kinematics
        self._views: StateViews | None = None
        self.data: mujoco.MjData | None = None
        self._clock = (0.0, 0.0)  # (sim time, wall time when the simulation reached it)
        #: Counts changes of the state made by hand (teleports, restores): with the simulated time it
        #: tells cameras whether their last frame still shows the current state.
        self.state_changes = 0
        self._errors: list[str] = []
        self._kinematics_time = -1.0
        self._camlight_time = -1.0
        self._com_current = False  # COM terms (for the jacobian) match the kinematics
        self._stepped1 = False  # mj_step1 ran on the current state; mj_step2 finishes that substep
        self._forces_valid = False  # the MjData's contact forces belong to its contacts (not so after mj_step1)
        self._table_force = 0.0  # robot-table contact force of the last complete (sub)step
        self._wrench = NO_WRENCH
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
        d.qpos[self.layout.finger_qadr] = self._start_width / 2
        for qadr in self._objects.values():
            d.qpos[qadr : qadr + 3] = _scene.CUBE_PARKED
            d.qpos[qadr + 3 : qadr + 7] = (1.0, 0.0, 0.0, 0.0)
        d.ctrl[self._arm_ctrl] = self.home_q
        d.ctrl[self.layout.gripper_act] = self._start_width / self.max_gripper_width * _scene.GRIPPER_CTRL_MAX
        mujoco.mj_forward(m, d)
        self._wrench = NO_WRENCH
        self._kinematics_time = d.time
        self._com_current, self._tcp_wxyz, self._stepped1 = True, None, False
        self._forces_valid = True
        self._views = StateViews(self.layout, d)
        self._errors = []
        self._bad_qacc_seen = 0
        self._warnings = d.warning.number  # a live view: reading it later costs no binding call
        self._clock = (d.time, time.time())

    def restore_initial_state(self) -> None:
        """Put the simulation back into the state `connect` creates (home posture, gripper open,
        objects parked, at rest, simulated time 0), bit for bit: a simulator's reset that does not
        depend on what the previous episode left, so that seeded resets are reproducible."""
        self.close()
        self.connect()
        self._moved()

    def close(self) -> None:
        self.data = None
        self._views = None  # they hold the MjData's memory
        self._ik.release()

    @property
    def connected(self) -> bool:
        return self.data is not None

    def _live(self) -> mujoco.MjData:
        if self.data is None:
            raise RobotFault(FaultKind.NOT_CONNECTED, f"sim arm {self.name!r} is not connected; call connect() first")
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
        """The timestamp reported for simulated time ``sim_time``: the wall time at which the
        simulation last got there (exact for the current state, which is what is captured)."""
        sim_then, wall_then = self._clock
        return wall_then + (sim_time - sim_then)

    def advance(self, dt: float) -> None:
        """Step physics for ``dt`` seconds of simulated time (rounded to whole physics steps).

        Raises RobotFault(FaultKind.REFLEX) when a collision or joint-limit fault arises during the step.
        """
        d = self._live()
        if not math.isfinite(dt) or dt < 0:
            raise ValueError(f"dt: must be a finite number of seconds >= 0, got {dt}")
        m = self.model
        nstep = int(round(dt / m.opt.timestep))
        if nstep == 0:
            return
        # Split stepping: the last substep's first half (mj_step1: kinematics, COM terms, contacts
        # of the new state) is run here, its second half (mj_step2: forces with the controls set
        # meanwhile, integration) at the start of the next call. Same physics, bit for bit, and
        # the same work as mj_step(nstep) per call; what it saves is computing the kinematics
        # twice: `state` and the IK read those of mj_step1 instead of calling mj_kinematics and
        # mj_comPos again after mj_step.
        if self._stepped1:
            self._stepped1 = False
            mujoco.mj_step2(m, d)
            if nstep > 1:
                mujoco.mj_step(m, d, nstep - 1)
        else:
            mujoco.mj_step(m, d, nstep)
        self._forces_valid = True
        self._clock = (d.time, time.time())  # mj_step1 below does not advance time
        new = self._new_faults()  # on the contacts and forces of the last substep, as mj_step leaves them
        if new:
            self._raise_faults(new)  # and leave the state as mj_step left it, for `recover` to look at
        mujoco.mj_step1(m, d)
        self._stepped1, self._forces_valid = True, False
        self._kinematics_time = self._camlight_time = d.time
        self._com_current, self._tcp_wxyz = True, None

    def sync(self, cameras: bool = False) -> mujoco.MjData:
        """Bring positions (bodies, sites; cameras and lights with ``cameras``) up to the current
        qpos and return the MjData.

        ``mj_step`` leaves them one physics step behind; state and rendering want them current.
        After `advance` they are (its split stepping computed them); after anything else that
        moved the state (``move_joints``, placing objects) they are recomputed here.
        """
        d = self._live()
        if self._kinematics_time != d.time:
            mujoco.mj_kinematics(self.model, d)
            self._kinematics_time = d.time
            self._camlight_time = -1.0
            self._com_current, self._tcp_wxyz = False, None
        if cameras and self._camlight_time != d.time:
            mujoco.mj_camlight(self.model, d)
            self._camlight_time = d.time
        return d

    # ------------------------------------------------------------------ state
    def state(self) -> ArmState:
        d = self.sync()
        v = self._views
        return ArmState(
            timestamp=self.to_wall_clock(d.time),
            q=v.qpos_arm.copy(),
            dq=v.qvel_arm.copy(),
            pose=Pose.from_wxyz(v.tcp_xpos, self._tcp_quat(v)),  # MuJoCo's w-first order ends here
            gripper_width=v.gripper_width(),
            errors=tuple(self._errors),
            external_wrench=self._wrench,
        )

    def _tcp_quat(self, v: StateViews) -> tuple[float, float, float, float]:
        """The TCP orientation (w, x, y, z) at the current kinematics; computed once per `sync`
        that moved them: `state` and the IK of the next command read the same kinematics."""
        quat = self._tcp_wxyz
        if quat is None:
            mujoco.mju_mat2Quat(self._quat, v.tcp_xmat)
            quat = self._tcp_wxyz = tuple(self._quat.tolist())
        return quat

    @property
    def errors(self) -> tuple[str, ...]:
        return tuple(self._errors)

    # ------------------------------------------------------------------ commands
    def _refuse_if_faulted(self) -> None:
        if self._errors:
            raise RobotFault(
                FaultKind.REFLEX, f"sim arm {self.name!r} is in error state {self._errors}; call recover() first"
            )

    def command_pose(self, pose: Pose) -> None:
        """Track the TCP `Pose` (base frame): solves IK now, servos during `advance`."""
        d = self._live()
        target_wxyz = pose.wxyz  # finite and unit: a Pose checks that when it is made
        self._refuse_if_faulted()
        # One IK iteration per control step, linearised at the measured state: closed loop on the
        # measured pose, so successive steps converge while the servos move. It uses the live
        # MjData (its kinematics brought up to date), which physics just touched: much cheaper
        # than a scratch MjData that is cache-cold after 50 substeps.
        self.sync()
        if not self._com_current:
            mujoco.mj_comPos(self.model, d)
            self._com_current = True
        v = self._views
        v.ctrl_arm[:] = self._ik.iteration(
            d, v.qpos_arm.tolist(), pose.position.tolist(), target_wxyz, self._tcp_quat(v), v.tcp_xpos.tolist()
        )

    def solve_ik(self, target: Pose, q_start: np.ndarray, iterations: int = 20) -> np.ndarray:
        """Joint angles (within the ranges, minus a margin) that put the TCP at ``target``, from
        ``q_start``, on a scratch MjData: the arm's own state is untouched. For planning;
        `command_pose` does one iteration per step."""
        self._live()
        return self._ik.solve(target.position, np.array(target.wxyz), q_start, iterations)

    def command_joints(self, q: np.ndarray) -> None:
        """Servo to joint target ``q`` (non-blocking; tracked during `advance`)."""
        d = self._live()
        q = self._checked_joint_target(q)
        self._refuse_if_faulted()
        d.ctrl[self._arm_ctrl] = q

    def command_gripper(self, width: float) -> None:
        d = self._live()
        width = float(width)
        if not np.isfinite(width):
            raise ValueError(f"width: must be a finite number of metres, got {width}")
        width = min(max(width, 0.0), self.max_gripper_width)
        d.ctrl[self.layout.gripper_act] = width / self.max_gripper_width * _scene.GRIPPER_CTRL_MAX

    def _checked_joint_target(self, q: np.ndarray) -> np.ndarray:
        q = np.asarray(q, dtype=float)
        if q.shape != (7,) or not np.all(np.isfinite(q)):
            raise ValueError(f"q: expected 7 finite joint angles (rad), got {q!r}")
        outside = np.flatnonzero((q < self.joint_low) | (q > self.joint_high))
        if outside.size:
            i = int(outside[0])
            raise RobotFault(
                FaultKind.LIMIT,
                f"joint target q[{i}]={q[i]:.3f} rad is outside the FR3 range "
                f"[{self.joint_low[i]:.3f}, {self.joint_high[i]:.3f}]",
            )
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
        while True:
            elapsed = d.time - t0
            if elapsed < duration:
                s = elapsed / duration
                d.ctrl[self._arm_ctrl] = start + delta * (10 * s**3 - 15 * s**4 + 6 * s**5)
            else:
                d.ctrl[self._arm_ctrl] = target
                if np.max(np.abs(d.qpos[self._arm] - target)) < 5e-3 and np.max(np.abs(d.qvel[self._arm])) < 0.05:
                    return
            if elapsed > timeout_s or time.monotonic() > wall_deadline:
                self.stop()
                raise RobotFault(
                    FaultKind.TIMEOUT,
                    f"move_joints did not reach its target within {timeout_s} s "
                    f"(max joint error {np.max(np.abs(d.qpos[self._arm] - target)):.4f} rad)",
                )
            mujoco.mj_step(self.model, d, chunk)
            self._clock = (d.time, time.time())
            self._stepped1, self._forces_valid = False, True
            self._check_faults()

    def stop(self) -> None:
        """Hold the current joint positions (the servos' damping brings the arm to rest)."""
        if self.data is None:
            return
        self.data.ctrl[self._arm_ctrl] = np.clip(self.data.qpos[self._arm], self._ctrl_low, self._ctrl_high)

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
        # comparisons are cheaper than 4 ufunc calls. (For finite numbers a - b < 0 iff a < b;
        # a NaN angle never gets here: MuJoCo resets a diverged state, flagged below.)
        q = self._views.qpos_arm.tolist()
        if (
            min(map(operator.sub, q, self._flag_low_list)) < 0.0
            or min(map(operator.sub, self._flag_high_list, q)) < 0.0
        ):
            faults.append("joint_limit")
        if self._forces_valid:
            self._table_force, self._wrench = self._contacts.measure(d)
        # else mj_step1 has replaced the contacts (their forces come with mj_step2): judge the
        # force measured on the last complete substep, as after a plain mj_step.
        if self._table_force > self.collision_force_n:
            faults.append("collision")
        # MuJoCo resets the state itself when accelerations blow up; it counts that as a warning.
        bad_qacc = self._warnings[_BAD_QACC]
        if bad_qacc > self._bad_qacc_seen:
            self._bad_qacc_seen = bad_qacc
            faults.append("sim_unstable")
        return faults

    def place_hole(self, goal_pose: Pose, insertion_depth_m: float) -> None:
        """Put the block so that the peg is ``insertion_depth_m`` deep in its hole when the TCP is
        at ``goal_pose`` (sim only; scene built with ``peg=True``)."""
        d = self._live()
        hole = self.layout.hole_mocap
        if hole is None:
            raise ValueError("this sim scene has no hole block; build MujocoArm(peg=True)")
        pos, quat = _scene.hole_block_pose(goal_pose, insertion_depth_m)
        d.mocap_pos[hole], d.mocap_quat[hole] = pos, quat
        self._moved()

    def _check_faults(self) -> None:
        new = self._new_faults()
        if new:
            self._raise_faults(new)

    def _new_faults(self) -> list[str]:
        return [f for f in self._current_faults() if f not in self._errors]

    def _raise_faults(self, new: list[str]) -> None:
        self._errors.extend(new)
        self.stop()
        raise RobotFault(FaultKind.REFLEX, f"sim arm {self.name!r}: {', '.join(new)} (arm stopped; call recover())")

    # ------------------------------------------------------------------ sim-only extras (tasks)
    @property
    def objects(self) -> tuple[str, ...]:
        """Names of the free objects in this arm's scene (``("cube",)`` with ``cube=True``)."""
        return tuple(self._objects)

    def _object_qadr(self, name: str) -> int:
        if name not in self._objects:
            known = ", ".join(self._objects) or "none"
            raise ValueError(
                f"object {name!r} is not in this sim scene (objects: {known}); build MujocoArm(cube=True) for the cube"
            )
        return self._objects[name]

    def object_pose(self, name: str = "cube") -> Pose:
        """The `Pose` of a free object in the base frame (sim only)."""
        qadr = self._object_qadr(name)
        qpos = self._live().qpos
        return Pose.from_wxyz(qpos[qadr : qadr + 3], qpos[qadr + 3 : qadr + 7])

    def set_object_pose(self, name: str, pose: Pose) -> None:
        """Teleport a free object to ``pose`` (``Pose(position)``: upright) at rest."""
        qadr = self._object_qadr(name)
        d = self._live()
        d.qpos[qadr : qadr + 3] = pose.position
        d.qpos[qadr + 3 : qadr + 7] = pose.wxyz
        dadr = self.model.jnt_dofadr[self.model.joint(name).id]
        d.qvel[dadr : dadr + 6] = 0.0
        self._moved()

    def park_object(self, name: str = "cube") -> None:
        """Put an object back out of reach and out of view."""
        self.set_object_pose(name, Pose(_scene.CUBE_PARKED))

    def set_target_marker(self, position: np.ndarray) -> None:
        """Move the translucent goal marker (visual only, no collisions) to ``position``."""
        d = self._live()
        position = np.asarray(position, dtype=float)
        if position.shape != (3,) or not np.all(np.isfinite(position)):
            raise ValueError(f"position: expected 3 finite numbers, got {position!r}")
        d.mocap_pos[self.layout.target_mocap] = position
        self._moved()

    def set_floor_mark(self, xy: np.ndarray) -> None:
        """Move the taped goal square (visual only, flush on the table) to be centred on ``xy``; scenes with a cube."""
        if self.layout.floor_mark_mocap is None:
            raise ValueError("this scene has no floor mark: build MujocoArm(cube=True)")
        xy = np.asarray(xy, dtype=float)
        if xy.shape != (2,) or not np.all(np.isfinite(xy)):
            raise ValueError(f"xy: expected 2 finite numbers, got {xy!r}")
        self._live().mocap_pos[self.layout.floor_mark_mocap] = [*xy, _scene.FLOOR_MARK_HALF_HEIGHT]
        self._moved()

    def _moved(self) -> None:
        """The state was changed by hand: kinematics, any pending mj_step1 and frames are stale."""
        self.state_changes += 1
        self._kinematics_time = -1.0
        self._stepped1 = False
