"""The safety layer: the only path from a policy's wish to an arm command, whatever the driver.

Rules (limits from ``env.safety``, see rlhw/config/env.py):

1. Non-finite numbers (NaN, inf) in a command raise `SafetyViolation`; nothing is sent.
2. A Cartesian target is clipped into the workspace box. Orientation is the caller's (tasks hold it fixed).
3. The commanded target is then at most ``min(max_step_m, max_velocity_mps * control_period)`` away
   from the measured hand position (the displacement is scaled down along its direction, so the arm
   still goes where the policy pointed, only slower). A hand outside the box is thus brought back
   at that speed rather than jumping to the box.
4. The gripper width is clipped to [0, max width] and changes by at most
   ``gripper_max_speed_mps * control_period`` per step.
5. Every measured state is checked: a joint within ``joint_limit_margin_rad`` of its limit, a joint
   faster than ``dq_max``, a non-finite reading or active driver error flags stop the arm and raise
   `RobotFault` (kind ``limit``, or ``reflex`` for driver error flags). A measured external wrench
   (`ArmState.external_wrench`, when the driver measures one) above ``max_contact_force_n`` or
   ``max_contact_torque_nm`` stops the arm and raises `RobotFault` kind ``contact``.
6. Inside the contact zone a task declares (`set_contact_zone`: a ball around its target, e.g. the
   hole of ``insert``), the step of rule 3 is capped further by ``contact_zone_speed_mps``: when the
   hand or the target is in the zone. Contact then builds up slowly enough for rule 5 to stop it.

Fault handling (`handle_fault`): stop, then try ``recover()`` (each bounded by the driver). The layer
keeps *strikes*: one per failed recovery attempt, and one per fault that happens before any clean
step since the previous fault (a recovery that did not really help). A clean step clears the
strikes. At ``max_recoveries`` strikes the layer locks: every later command raises
`SafetyViolation` with the reason, until an operator calls `unlock()` after inspecting the robot.
"""

from __future__ import annotations

import logging
import math
import operator
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from rlhw.config.env import SafetyConfig
from rlhw.errors import ErrorReason, FaultKind, RobotFault, SafetyViolation
from rlhw.robot.arm import Arm, ArmState
from rlhw.robot.pose import MIN_QUATERNION_NORM, Pose

log = logging.getLogger(__name__)


@dataclass
class CommandReport:
    """What the layer did to one command (returned so the env can put it in ``info``)."""

    target: np.ndarray
    step_clipped: bool = False
    workspace_clipped: bool = False
    gripper_clipped: bool = False

    @property
    def clipped(self) -> bool:
        return self.step_clipped or self.workspace_clipped or self.gripper_clipped


@dataclass
class FaultRecord:
    kind: FaultKind
    message: str
    time: float
    recovered: bool
    attempts: int = 0


@dataclass
class SafetyStatus:
    locked: bool
    lock_reason: str | None
    strikes: int
    faults: list[FaultRecord] = field(default_factory=list)


def _require_finite(values, what: str) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if not np.isfinite(arr).all():
        raise SafetyViolation(f"{what} contains NaN or inf ({arr.tolist()}); nothing was sent to the arm")
    return arr


def _finite_floats(values, what: str) -> list[float]:
    """`_require_finite` as a flat list of floats: the per-step path does its few-element
    arithmetic on plain floats, which costs less than one numpy call per operation."""
    arr = np.asarray(values, dtype=float)
    floats = arr.ravel().tolist()
    # a sum is non-finite iff an element is NaN/inf, or finite ones overflow: then look closer
    if not math.isfinite(sum(floats)):
        _require_finite(arr, what)
    return floats


def _unit_quaternion(values) -> np.ndarray:
    """A caller's orientation ``[qx, qy, qz, qw]``: finite (rule 1) and normalised, for `Pose.unchecked`.
    Per step, the usual case is a task's held orientation, already a unit float array: passed on as it is."""
    arr = np.asarray(values, dtype=float)
    x, y, z, w = _finite_floats(arr, "end-effector orientation")
    norm = math.sqrt(x * x + y * y + z * z + w * w)
    if norm < MIN_QUATERNION_NORM:
        raise SafetyViolation(f"end-effector orientation {[x, y, z, w]} has zero length; nothing was sent to the arm")
    if abs(norm - 1.0) <= 1e-12:
        return arr
    return np.array((x / norm, y / norm, z / norm, w / norm))


def _pose_sum(pose: Pose) -> float:
    """The sum of a measured pose's 7 numbers: non-finite iff one of them is (a driver read NaN)."""
    return sum(pose.position.tolist()) + sum(pose.quaternion.tolist())


class SafetyLayer:
    """Wraps one `Arm`. All motion the env commands goes through ``move_to``, ``set_gripper`` and ``move_home``."""

    def __init__(self, arm: Arm, limits: SafetyConfig, control_period_s: float):
        self.arm = arm
        self.limits = limits
        self.period = float(control_period_s)
        self.low = np.array(limits.workspace_low)
        self.high = np.array(limits.workspace_high)
        self.q_min = np.array(limits.q_min) + limits.joint_limit_margin_rad
        self.q_max = np.array(limits.q_max) - limits.joint_limit_margin_rad
        self.dq_max = np.array(limits.dq_max)
        self.max_step = min(limits.max_step_m, limits.max_velocity_mps * self.period)
        # The same limits as plain floats, for the per-step checks.
        self._low3, self._high3 = self.low.tolist(), self.high.tolist()
        self._q_min_list, self._q_max_list = self.q_min.tolist(), self.q_max.tolist()
        self._dq_max_list = self.dq_max.tolist()
        n = len(self._q_min_list)
        self._joint_shape = (n,) if len(self._q_max_list) == len(self._dq_max_list) == n else None
        self.max_gripper_step = limits.gripper_max_speed_mps * self.period
        self.zone_step = min(self.max_step, limits.contact_zone_speed_mps * self.period)
        self._zone: tuple[float, float, float, float] | None = None  # centre x, y, z and radius squared
        self.gripper_target: float | None = None
        self.locked = False
        self.lock_reason: str | None = None
        self.strikes = 0
        self._clean_since_fault = True
        self.history: list[FaultRecord] = []

    # -- commands -----------------------------------------------------------------------------
    def _check_unlocked(self) -> None:
        if self.locked:
            raise SafetyViolation(
                f"arm {self.arm.name!r} is locked and will not move: {self.lock_reason}", ErrorReason.SAFETY_LOCKED
            )

    def clip_target(self, target_xyz: np.ndarray, current_xyz: np.ndarray) -> CommandReport:
        """Rules 2 and 3 without sending anything.

        The target is clipped into the box first, then the step toward it is capped. With the hand
        inside the box the result is inside the box (both ends of the step are); with the hand
        outside (pushed out, or a box changed between runs) it heads back in at the capped speed
        instead of jumping to the box's surface."""
        report, target = self._clip(target_xyz, current_xyz)
        report.target = np.array(target)
        return report

    def set_contact_zone(self, center: np.ndarray | None, radius_m: float = 0.0) -> None:
        """Rule 6: slow down within ``radius_m`` of ``center`` (None: no zone). Tasks with contact
        near a known target declare it at every reset (the env passes ``task.contact_zone``)."""
        if center is None or radius_m <= 0:
            self._zone = None
            return
        x, y, z = _finite_floats(center, "contact zone centre")[:3]
        self._zone = (x, y, z, float(radius_m) ** 2)

    def _in_zone(self, x: float, y: float, z: float) -> bool:
        zx, zy, zz, r2 = self._zone
        return (x - zx) ** 2 + (y - zy) ** 2 + (z - zz) ** 2 <= r2

    def _clip(self, target_xyz, current_xyz, max_step: float | None = None) -> tuple[CommandReport, list[float]]:
        """`clip_target` on plain floats (3 numbers: cheaper than numpy calls); the report's
        ``target`` is left for the caller to fill. ``max_step`` lowers the cap further (approach)."""
        tx, ty, tz = _finite_floats(target_xyz, "end-effector target")[:3]
        cx, cy, cz = np.asarray(current_xyz, dtype=float)[:3].tolist()
        (lx, ly, lz), (hx, hy, hz) = self._low3, self._high3
        bx, by, bz = min(max(tx, lx), hx), min(max(ty, ly), hy), min(max(tz, lz), hz)
        report = CommandReport(target=None, workspace_clipped=bx != tx or by != ty or bz != tz)
        cap = self.max_step if max_step is None else min(max_step, self.max_step)
        if self._zone is not None and (self._in_zone(cx, cy, cz) or self._in_zone(bx, by, bz)):
            cap = min(cap, self.zone_step)
        dx, dy, dz = bx - cx, by - cy, bz - cz
        dist = math.sqrt(dx * dx + dy * dy + dz * dz)
        if dist > cap:
            scale = cap / dist
            report.step_clipped = True
            return report, [cx + dx * scale, cy + dy * scale, cz + dz * scale]
        return report, [bx, by, bz]

    def move_to(
        self,
        target_xyz: np.ndarray,
        state: ArmState,
        orientation: np.ndarray | None = None,
        max_step: float | None = None,
    ) -> CommandReport:
        """Send a bounded Cartesian target (rules 1-3, 6). ``state`` is the latest measured state;
        ``max_step`` (m) caps this step further (slow approaches)."""
        self._check_unlocked()
        quat = state.pose.quaternion if orientation is None else _unit_quaternion(orientation)
        report, target = self._clip(target_xyz, state.ee_position, max_step)
        pose = Pose.unchecked(target, quat)  # finite (rule 1) and clipped (rules 2, 3, 6)
        report.target = pose.position
        self.arm.command_pose(pose)
        return report

    def approach(
        self,
        pose: Pose,
        state: ArmState,
        read_state: Callable[[], ArmState],
        wait: Callable[[float], None],
        speed_mps: float,
        tolerance_m: float = 0.002,
        timeout_s: float = 20.0,
    ) -> ArmState:
        """A slow straight-line move of the hand to ``pose`` made of ordinary bounded steps (rules 1-3 and 6 at ``speed_mps`` or less), for a task's reset path.

        Each step waits one control period (``wait``) and reads the state with ``read_state`` (the
        env's checked read: a contact or limit fault ends the move like any step). Returns the
        state once the hand is within ``tolerance_m``; RobotFault ``timeout`` when ``timeout_s`` of
        control periods pass first (blocked by an obstacle, or a target outside the workspace)."""
        step = max(speed_mps * self.period, 1e-4)
        for _ in range(max(1, int(timeout_s / self.period))):
            if state.pose.distance(pose).translation_m <= tolerance_m:
                return state
            self.move_to(pose.position, state, pose.quaternion, max_step=step)
            wait(self.period)
            state = read_state()
        if state.pose.distance(pose).translation_m <= tolerance_m:
            return state
        self.safe_stop()
        raise RobotFault(
            FaultKind.TIMEOUT,
            f"the approach to {np.round(pose.position, 4).tolist()} did not arrive within {timeout_s} s "
            f"(hand at {np.round(state.ee_position, 4).tolist()}); an obstacle, or a target outside the workspace",
        )

    def set_gripper(self, width: float) -> bool:
        """Send a rate-limited gripper width (rule 4). Returns True when the request was clipped."""
        self._check_unlocked()
        w = float(_require_finite([width], "gripper width")[0])
        wmax = float(self.arm.max_gripper_width)
        wanted = min(max(w, 0.0), wmax)
        prev = wanted if self.gripper_target is None else self.gripper_target
        sent = prev + float(np.clip(wanted - prev, -self.max_gripper_step, self.max_gripper_step))
        if sent != prev or self.gripper_target is None:
            self.arm.command_gripper(sent)
        self.gripper_target = sent
        return abs(sent - w) > 1e-9

    def move_home(self, home_q: np.ndarray, speed_factor: float, timeout_s: float) -> None:
        """The reset move: a joint move with reduced dynamics to a posture inside the joint limits."""
        self._check_unlocked()
        q = _require_finite(home_q, "home posture")
        if np.any(q < self.q_min) or np.any(q > self.q_max):
            raise SafetyViolation(
                f"home posture {q.tolist()} is outside the joint limits (with margin); fix env.reset.home_q"
            )
        self.arm.move_joints(q, speed_factor=speed_factor, timeout_s=timeout_s)

    def sync_gripper(self, state: ArmState) -> None:
        """Start rate limiting from the measured width (after a reset)."""
        self.gripper_target = float(state.gripper_width)

    # -- state checks -------------------------------------------------------------------------
    def check_state(self, state: ArmState) -> None:
        """Rule 5. On a violation the arm is stopped first, then RobotFault is raised.

        Written for the hot path (once per step): one vectorised test, details only on failure."""
        problem = self._joint_problem(state)
        if problem is None and state.external_wrench is not None:
            problem = self._contact_problem(state.external_wrench)
        if problem is not None:
            self.safe_stop()
            raise RobotFault(*problem)

    def _contact_problem(self, wrench) -> tuple[FaultKind, str] | None:
        fx, fy, fz, tx, ty, tz = np.asarray(wrench, dtype=float).tolist()
        force, torque = math.sqrt(fx * fx + fy * fy + fz * fz), math.sqrt(tx * tx + ty * ty + tz * tz)
        if force <= self.limits.max_contact_force_n and torque <= self.limits.max_contact_torque_nm:
            return None  # a NaN compares False: a non-finite wrench is a contact fault too
        return (
            FaultKind.CONTACT,
            f"measured external wrench {force:.1f} N / {torque:.2f} Nm is over the bound "
            f"{self.limits.max_contact_force_n} N / {self.limits.max_contact_torque_nm} Nm "
            "(env.safety.max_contact_force_n / max_contact_torque_nm)",
        )

    def _joint_problem(self, state: ArmState) -> tuple[FaultKind, str] | None:
        q, dq = np.asarray(state.q), np.asarray(state.dq)
        if state.errors:
            problem = (FaultKind.REFLEX, f"the arm reports errors {list(state.errors)}")
        elif q.shape == dq.shape == self._joint_shape:
            # Plain floats: 7 numbers each, cheaper than a dozen numpy calls. A sum is non-finite
            # iff an element is NaN/inf (or beyond 1e308); for finite numbers a - b < 0 iff a < b.
            ql, dql = q.tolist(), dq.tolist()
            if not math.isfinite(sum(ql) + sum(dql) + _pose_sum(state.pose)):
                problem = (FaultKind.LIMIT, "the arm reported non-finite joint or pose values")
            elif (
                min(map(operator.sub, ql, self._q_min_list)) < 0.0
                or min(map(operator.sub, self._q_max_list, ql)) < 0.0
                or min(map(operator.sub, self._dq_max_list, map(abs, dql))) < 0.0
            ):
                problem = self._describe_limit(q, dq)
            else:
                return None
        # any other shape: the vectorised test (numpy reports a length mismatch)
        elif not math.isfinite(float(q.sum()) + float(dq.sum()) + _pose_sum(state.pose)):
            problem = (FaultKind.LIMIT, "the arm reported non-finite joint or pose values")
        elif ((q < self.q_min) | (q > self.q_max) | (np.abs(dq) > self.dq_max)).any():
            problem = self._describe_limit(q, dq)
        else:
            return None
        return problem

    def _describe_limit(self, q: np.ndarray, dq: np.ndarray) -> tuple[FaultKind, str]:
        low = np.flatnonzero(q < self.q_min)
        high = np.flatnonzero(q > self.q_max)
        if low.size or high.size:
            j = int((low if low.size else high)[0])
            side, lim = ("lower", self.q_min[j]) if low.size else ("upper", self.q_max[j])
            return (
                FaultKind.LIMIT,
                f"joint {j + 1} at {q[j]:.3f} rad is past its {side} limit {lim:.3f} rad (margin included)",
            )
        j = int(np.flatnonzero(np.abs(dq) > self.dq_max)[0])
        return (FaultKind.LIMIT, f"joint {j + 1} moves at {dq[j]:.2f} rad/s, over its limit {self.dq_max[j]:.2f} rad/s")

    # -- faults -------------------------------------------------------------------------------
    def safe_stop(self) -> str | None:
        """Stop the arm; never raises. Returns the error text if even stopping failed."""
        try:
            self.arm.stop()
            return None
        except Exception as e:  # a dead link cannot stop; the driver/robot's own watchdog takes over
            log.warning("stop() failed on %s: %s", self.arm.name, e)
            return f"{type(e).__name__}: {e}"

    def handle_fault(self, fault: RobotFault, recover: Callable[[], bool] | None = None) -> FaultRecord:
        """Stop, then recover until it works or the strikes run out. Returns what happened.

        ``recover`` defaults to ``arm.recover``; the env passes its own for camera faults (reopen).
        """
        stop_error = self.safe_stop()
        if not self._clean_since_fault:
            self.strikes += 1  # the previous recovery did not buy a single clean step
        self._clean_since_fault = False
        record = FaultRecord(kind=fault.kind, message=str(fault), time=time.time(), recovered=False)
        recover = recover or (lambda: bool(self.arm.recover()))
        while not self.locked and self.strikes < self.limits.max_recoveries:
            record.attempts += 1
            try:
                ok = recover()
                why = "recover() returned False"
            except Exception as e:
                ok, why = False, f"recover() raised {type(e).__name__}: {e}"
            if ok:
                record.recovered = True
                break
            self.strikes += 1
            log.warning("recovery %d of %s failed: %s", self.strikes, self.arm.name, why)
        if not record.recovered:
            self.lock(
                f"{self.strikes} strikes (max_recoveries={self.limits.max_recoveries}) after fault {fault}"
                + (f"; stop() also failed: {stop_error}" if stop_error else "")
                + "; inspect the robot, then call unlock()"
            )
        self.history.append(record)
        del self.history[:-20]
        return record

    def note_clean_step(self) -> None:
        """A step finished without a fault: the arm works, clear the strikes."""
        self._clean_since_fault = True
        self.strikes = 0

    def lock(self, reason: str) -> None:
        self.locked = True
        self.lock_reason = reason
        log.error("arm %s locked: %s", self.arm.name, reason)

    def unlock(self) -> None:
        """Operator action after inspecting the robot: allow motion again with fresh strikes."""
        self.locked = False
        self.lock_reason = None
        self.strikes = 0
        self._clean_since_fault = True

    def status(self) -> SafetyStatus:
        return SafetyStatus(self.locked, self.lock_reason, self.strikes, list(self.history))

    def describe_limits(self) -> dict:
        return {
            "workspace_low": self.low.tolist(),
            "workspace_high": self.high.tolist(),
            "max_step_m": self.max_step,
            "max_gripper_step_m": self.max_gripper_step,
            "max_recoveries": self.limits.max_recoveries,
            "max_contact_force_n": self.limits.max_contact_force_n,
            "max_contact_torque_nm": self.limits.max_contact_torque_nm,
            "contact_zone": None
            if self._zone is None
            else {"center": list(self._zone[:3]), "radius_m": math.sqrt(self._zone[3]), "max_step_m": self.zone_step},
            "control_period_s": self.period if math.isfinite(self.period) else None,
        }
