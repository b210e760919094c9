"""Mock arm and camera: pure Python, deterministic, fast, and able to fail on purpose.

They exist so that every safety rule and every fault path can be tested without a robot (franky-sim
never raises reflex errors, see FIELD-NOTES). They are not a physics model:

- `MockArm` runs in *simulated* time (``realtime = False``): the env calls ``advance(dt)`` and the
  end effector follows its target with a first-order lag (time constant ``tau_s``). Joint positions
  come from a fixed linear kinematic stand-in around the home posture (``ee = ee_home + K (q - q_home)``),
  so joint limits and joint speeds can be checked like on a real arm.
- `MockCamera` synthesizes frames (a gradient plus a bright square that follows the bound arm's hand,
  so images carry information) with wall-clock timestamps and frame indices.

Faults are scheduled with ``faults=[{"kind": "reflex", "after": 3, "count": 1}, ...]`` (the config's
``env.mock_faults``) or injected later with ``inject(kind, after=0, count=1)``:

==============  ==================  ==========================================================
kind            default method      effect
==============  ==================  ==========================================================
reflex          command_pose        raises RobotFault(FaultKind.REFLEX) and leaves the arm in error
                                    (state().errors) until ``recover()``; commands fail meanwhile
timeout         state               waits ``timeout_s`` then raises RobotFault(FaultKind.TIMEOUT)
network         state               raises RobotFault(FaultKind.NETWORK) at once (link lost)
hang            command_pose        blocks for the driver timeout ``timeout_s``, then RobotFault(FaultKind.HANG)
recover_fail    recover             ``recover()`` returns False and the errors stay
camera_stall    latest              no new frames: ``latest(max_age_s)`` raises RobotFault(FaultKind.CAMERA_STALL),
                                    ``wait_frame`` raises it after its timeout
drop_frames     latest              each affected call skips one frame index (a dropped frame)
==============  ==================  ==========================================================

``after`` counts successful calls of that method before the fault fires; ``count`` is how many
consecutive calls it affects. ``on`` picks another method.

Contact: `MockArm.set_external_wrench` sets the external wrench that ``state()`` reports from then on
(zeros by default, like franky-sim, which measures no force), so the safety layer's contact bound
can be tested without a real collision.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np

from rlhw.config.env import DROP_FRAMES, MOCK_ARM_FAULTS, MOCK_CAMERA_FAULTS, MOCK_INJECTIONS
from rlhw.errors import FaultKind, RobotFault
from rlhw.robot.arm import HOME_Q, Arm, ArmState
from rlhw.robot.build import ArmBuild, CameraBuild, DriverArg, construct_driver
from rlhw.robot.camera import Camera, Frame, Intrinsics
from rlhw.robot.pose import Pose
from rlhw.robot.registry import register_arm, register_camera

#: End-effector position of the stand-in kinematics at HOME_Q (close to a real FR3 with its hand).
HOME_EE = np.array([0.307, 0.0, 0.487])
#: Hand pointing down: 180 degrees about x, as [qx, qy, qz, qw].
DOWN_QUAT = np.array([1.0, 0.0, 0.0, 0.0])
DOWN_QUAT.flags.writeable = False

# Linear stand-in for the arm's position kinematics near home (metres per radian). Each joint moves
# the hand in a plausible direction; the pseudo-inverse maps hand targets back to joints.
_K = np.array(
    [
        [0.00, 0.45, 0.00, -0.30, 0.00, 0.10, 0.00],  # x
        [0.40, 0.00, 0.35, 0.00, 0.10, 0.00, 0.00],  # y
        [0.00, -0.30, 0.00, -0.35, 0.00, -0.10, 0.00],  # z
    ]
)
_K_PINV = np.linalg.pinv(_K)

_DEFAULT_METHOD = {
    FaultKind.REFLEX: "command_pose",
    FaultKind.TIMEOUT: "state",
    FaultKind.NETWORK: "state",
    FaultKind.HANG: "command_pose",
    FaultKind.RECOVER_FAIL: "recover",
    FaultKind.CAMERA_STALL: "latest",
    DROP_FRAMES: "latest",
}
ARM_FAULTS = MOCK_ARM_FAULTS
CAMERA_FAULTS = MOCK_CAMERA_FAULTS | {DROP_FRAMES}  # drop_frames is no fault: frames are skipped


def _injection(kind: FaultKind | str) -> FaultKind | str:
    """``kind`` as what the schedule compares (a FaultKind, or ``drop_frames``); ValueError if unknown."""
    if kind == DROP_FRAMES:
        return DROP_FRAMES
    if kind not in _DEFAULT_METHOD:
        raise ValueError(f"unknown mock fault kind {kind!r}; known: {', '.join(map(str, MOCK_INJECTIONS))}")
    return FaultKind(kind)


@dataclass
class _Fault:
    kind: FaultKind | str  # str only for drop_frames
    on: str
    after: int
    count: int
    seen: int = 0  # matching calls so far

    def fires(self) -> bool:
        """Count one call of ``on``; True when this call is inside the fault window."""
        i = self.seen
        self.seen += 1
        return self.after <= i < self.after + self.count


def _parse_faults(faults: Iterable[Any], allowed: frozenset) -> list[_Fault]:
    out = []
    for f in faults or ():
        d = f if isinstance(f, dict) else f.model_dump() if hasattr(f, "model_dump") else dict(vars(f))
        kind = _injection(d["kind"])
        if kind not in allowed:
            continue  # a camera fault in an arm's list (or the reverse) belongs to the other driver
        out.append(_Fault(kind, d.get("on") or _DEFAULT_METHOD[kind], int(d.get("after", 0)), int(d.get("count", 1))))
    return out


class _FaultSchedule:
    def __init__(self, faults: list[_Fault]):
        self.faults = faults

    def add(self, kind: FaultKind | str, on: str | None, after: int, count: int) -> None:
        self.faults.append(_Fault(kind, on or _DEFAULT_METHOD[kind], after, count))

    def check(self, method: str) -> list[FaultKind | str]:
        """Kinds firing on this call of ``method`` (every matching fault counts the call)."""
        return [f.kind for f in self.faults if f.on == method and f.fires()]


#: Motion commands a `MockArm` keeps (``motions``): about 1 MiB of them, more than any test episode sends.
KEEP_MOTIONS = 4096


@register_arm("mock")
class MockArm(Arm):
    """A fault-injecting stand-in for a Franka arm, in simulated time. See the module docstring.

    ``cube`` / ``peg`` are the simulator scene options a task may ask for (``sim_arm_options``); the
    mock has no scene, so it takes them and draws nothing: the insert task runs on it without its block.
    """

    def __init__(
        self,
        name: str = "mock",
        seed: int = 0,
        faults: Iterable[Any] = (),
        timeout_s: float = 0.2,
        tau_s: float = 0.05,
        gripper_speed_mps: float = 0.1,
        home_q: Iterable[float] = tuple(HOME_Q),
        state_noise_m: float = 0.0,
        realtime: bool = False,
        keep_motions: int = KEEP_MOTIONS,
        cube: bool = False,
        peg: bool = False,
    ):
        self.name = name
        #: realtime=True emulates a real arm: it moves on the wall clock by itself (integrated
        #: lazily at each call), so the env sleeps to keep its control rate instead of advancing.
        self.realtime = bool(realtime)
        self._wall = time.monotonic()
        self.timeout_s = float(timeout_s)
        self.tau_s = float(tau_s)
        self.gripper_speed_mps = float(gripper_speed_mps)
        self.home_q = np.asarray(home_q, dtype=float)
        self.state_noise_m = float(state_noise_m)
        self._rng = np.random.default_rng(seed)
        self._schedule = _FaultSchedule(_parse_faults(faults, ARM_FAULTS))
        self._lock = threading.Lock()
        self.connected = False
        self.sim_time = 0.0
        self.q = self.home_q.copy()
        self.dq = np.zeros(7)
        self.width = self.max_gripper_width
        self.width_target = self.width
        self.target: np.ndarray | None = None  # absolute position target, None = hold
        self.errors: tuple[str, ...] = ()
        self.external_wrench = np.zeros(6)
        #: The most recent ``keep_motions`` motion commands, in order: ("command_pose", xyz),
        #: ("command_gripper", w), ("move_joints", q, speed_factor). Tests read it to see what was sent.
        #: Bounded because a long sim-only run sends one per step: keeping all of them grew a server's
        #: RSS from 81 to 164 MiB over 400,000 steps. ``motion_count`` counts every one ever received,
        #: so "nothing moved unless asked" is proved by a count that did not change, not by the length.
        self.motions: deque[tuple[str, Any]] = deque(maxlen=int(keep_motions))
        self.motion_count = 0
        self.calls: dict[str, int] = {}

    @classmethod
    def from_plan(cls, build: ArmBuild) -> MockArm:
        """A simulated arm (`ArmBuild.simulated_args`) that also injects ``env.mock_faults``, each call bounded
        well inside the env's driver timeout."""
        return construct_driver(
            cls,
            build.driver,
            **build.simulated_args(),
            faults=DriverArg(build.env.mock_faults, "env.mock_faults"),
            timeout_s=DriverArg(min(build.env.driver_timeout_s, 0.5), "env.driver_timeout_s"),
        )

    def _motion(self, *command: Any) -> None:
        self.motions.append(command)
        self.motion_count += 1

    # -- kinematic stand-in ------------------------------------------------------------------
    def fk(self, q: np.ndarray) -> np.ndarray:
        return HOME_EE + _K @ (np.asarray(q) - self.home_q)

    def ee_position(self) -> np.ndarray:
        return self.fk(self.q)

    def set_joint_positions(self, q: Iterable[float]) -> None:
        """Teleport the joints (tests: e.g. put a joint at its limit)."""
        self.q = np.asarray(q, dtype=float).copy()
        self.target = None

    def set_external_wrench(self, wrench: Iterable[float]) -> None:
        """The wrench ``[fx, fy, fz, tx, ty, tz]`` (N, Nm, base frame) every later state reports."""
        wrench = np.asarray(wrench, dtype=float)
        if wrench.shape != (6,):
            raise ValueError(f"wrench: expected 6 numbers [fx, fy, fz, tx, ty, tz], got shape {wrench.shape}")
        self.external_wrench = wrench.copy()

    def inject(self, kind: FaultKind, after: int = 0, count: int = 1, on: str | None = None) -> None:
        """Schedule a fault from now on: it fires after ``after`` more calls of its method."""
        kind = _injection(kind)
        if kind not in ARM_FAULTS:
            raise ValueError(f"MockArm cannot inject {kind!r}; arm faults: {', '.join(sorted(ARM_FAULTS))}")
        method = on or _DEFAULT_METHOD[kind]
        # count from the next call: the already-seen calls of other faults are irrelevant
        self._schedule.faults.append(_Fault(kind, method, after, count))

    # -- fault plumbing ----------------------------------------------------------------------
    def _enter(self, method: str) -> list[FaultKind]:
        """Count the call, refuse when disconnected, fire scheduled faults. Returns the kinds that
        fired without raising (recover_fail), so the method can act on them."""
        self.calls[method] = self.calls.get(method, 0) + 1
        if not self.connected:
            raise RobotFault(FaultKind.NOT_CONNECTED, f"mock arm {self.name!r}: {method}() before connect()")
        kinds = self._schedule.check(method)
        for kind in kinds:
            if kind is FaultKind.REFLEX:
                self.errors = ("cartesian_reflex",)
                self.target = None
                raise RobotFault(FaultKind.REFLEX, f"mock arm {self.name!r}: cartesian reflex during {method}()")
            if kind is FaultKind.NETWORK:
                raise RobotFault(FaultKind.NETWORK, f"mock arm {self.name!r}: UDP receive timed out during {method}()")
            if kind is FaultKind.TIMEOUT:
                time.sleep(self.timeout_s)
                raise RobotFault(
                    FaultKind.TIMEOUT, f"mock arm {self.name!r}: {method}() got no answer within {self.timeout_s:.2f} s"
                )
            if kind is FaultKind.HANG:
                time.sleep(self.timeout_s)
                raise RobotFault(
                    FaultKind.HANG,
                    f"mock arm {self.name!r}: {method}() blocked past the driver timeout {self.timeout_s:.2f} s",
                )
        return kinds

    def _require_ready(self, method: str) -> None:
        if self.errors:
            raise RobotFault(
                FaultKind.REFLEX,
                f"mock arm {self.name!r}: {method}() refused, arm in error {self.errors}; call recover()",
            )

    # -- Arm interface -----------------------------------------------------------------------
    def connect(self, timeout_s: float = 10.0) -> None:
        self.connected = True
        self._wall = time.monotonic()

    def close(self) -> None:
        self.target = None
        self.connected = False

    def _catch_up(self) -> None:
        if self.realtime:
            now = time.monotonic()
            self._integrate(now - self._wall)
            self._wall = now

    def state(self) -> ArmState:
        self._enter("state")
        self._catch_up()
        ee = self.fk(self.q)
        if self.state_noise_m:
            ee = ee + self._rng.normal(0.0, self.state_noise_m, 3)
        return ArmState(
            timestamp=time.time(),
            q=self.q.copy(),
            dq=self.dq.copy(),
            pose=Pose.unchecked(ee, DOWN_QUAT),  # the stand-in kinematics: finite, unit
            gripper_width=float(self.width),
            errors=self.errors,
            external_wrench=self.external_wrench.copy(),
        )

    def command_pose(self, pose: Pose) -> None:
        self._enter("command_pose")
        self._catch_up()
        self._require_ready("command_pose")
        self.target = np.array(pose.position)
        self._motion("command_pose", self.target.copy())

    def command_gripper(self, width: float) -> None:
        self._enter("command_gripper")
        self._require_ready("command_gripper")
        self.width_target = float(np.clip(width, 0.0, self.max_gripper_width))
        self._motion("command_gripper", self.width_target)

    def move_joints(self, q: np.ndarray, speed_factor: float = 0.2, timeout_s: float = 15.0) -> None:
        self._enter("move_joints")
        self._require_ready("move_joints")
        q = np.asarray(q, dtype=float)
        self._motion("move_joints", q.copy(), float(speed_factor))
        # Reduced dynamics: the slowest joint at speed_factor * 2.62 rad/s sets the duration.
        duration = float(np.max(np.abs(q - self.q))) / (2.62 * speed_factor)
        if duration > timeout_s:
            raise RobotFault(
                FaultKind.TIMEOUT,
                f"mock arm {self.name!r}: joint move needs {duration:.1f} s > timeout {timeout_s:.1f} s",
            )
        self.sim_time += duration
        self.q = q.copy()
        self.dq = np.zeros(7)
        self.target = None

    def stop(self) -> None:
        self.calls["stop"] = self.calls.get("stop", 0) + 1
        self.target = None
        self.width_target = self.width
        self.dq = np.zeros(7)

    def recover(self, timeout_s: float = 5.0) -> bool:
        if FaultKind.RECOVER_FAIL in self._enter("recover"):
            return False
        self.errors = ()
        return True

    def advance(self, dt: float) -> None:
        """First-order tracking of the target for ``dt`` simulated seconds."""
        if self.realtime:
            raise NotImplementedError("this MockArm runs in real time (realtime=True); it moves by itself")
        self._integrate(dt)

    def _integrate(self, dt: float) -> None:
        if dt <= 0:
            return
        self.sim_time += dt
        q_old = self.q
        if self.target is not None and not self.errors:
            alpha = 1.0 - math.exp(-dt / self.tau_s)
            q_goal = self.q + _K_PINV @ (self.target - self.fk(self.q))
            self.q = self.q + alpha * (q_goal - self.q)
        self.dq = (self.q - q_old) / dt
        step = self.gripper_speed_mps * dt
        self.width += float(np.clip(self.width_target - self.width, -step, step))


@register_camera("mock")
class MockCamera(Camera):
    """Synthetic frames on demand. Bound to an arm (``arm=``), a bright square follows the hand."""

    def __init__(
        self,
        serial: str = "mock",
        width: int = 128,
        height: int = 128,
        fps: float = 30.0,
        seed: int = 0,
        faults: Iterable[Any] = (),
        timeout_s: float = 0.2,
        arm: MockArm | None = None,
        depth: bool = False,
    ):
        self.serial = serial
        self.width, self.height = int(width), int(height)
        self._fps = float(fps)
        self.timeout_s = float(timeout_s)
        self.arm = arm
        self.depth = depth
        self._schedule = _FaultSchedule(_parse_faults(faults, CAMERA_FAULTS))
        rng = np.random.default_rng(seed)
        yy, xx = np.mgrid[0 : self.height, 0 : self.width]
        base = np.stack(
            [xx * 255 // max(1, self.width - 1), yy * 255 // max(1, self.height - 1), np.full_like(xx, 64)], -1
        )
        self._base = (base + rng.integers(0, 16, base.shape)).clip(0, 255).astype(np.uint8)
        self._opened = False
        self._index = -1
        self._last: Frame | None = None
        self._returned_index = -1

    @classmethod
    def from_plan(cls, build: CameraBuild) -> MockCamera:
        """A camera that draws its arm's hand (`CameraBuild.rendered_args`), injects ``env.mock_faults`` and
        seeds its noise per camera."""
        return construct_driver(
            cls,
            build.driver,
            **build.rendered_args(),
            faults=DriverArg(build.env.mock_faults, "env.mock_faults"),
            seed=DriverArg(build.seed + 17 * build.index, "env.seed"),
        )

    def inject(self, kind: FaultKind | str, after: int = 0, count: int = 1, on: str | None = None) -> None:
        kind = _injection(kind)
        if kind not in CAMERA_FAULTS:
            raise ValueError(f"MockCamera cannot inject {kind!r}; camera faults: {', '.join(sorted(CAMERA_FAULTS))}")
        self._schedule.add(kind, on, after, count)

    def open(self, timeout_s: float = 10.0) -> None:
        self._opened = True
        self._capture()

    def close(self) -> None:
        self._opened = False

    def _capture(self, skip: int = 0) -> Frame:
        self._index += 1 + skip
        img = self._base.copy()
        if self.arm is not None:
            x, y, _ = self.arm.ee_position()
            # top view: base x -> image rows, base y -> image columns, workspace ~ [0.2,0.8] x [-0.4,0.4]
            r = int(np.clip((x - 0.2) / 0.6, 0, 1) * (self.height - 1))
            c = int(np.clip((y + 0.4) / 0.8, 0, 1) * (self.width - 1))
            s = max(1, self.height // 16)
            img[max(0, r - s) : r + s + 1, max(0, c - s) : c + s + 1] = 255
        depth = np.full((self.height, self.width), 800, np.uint16) if self.depth else None
        self._last = Frame(color=img, timestamp=time.time(), index=self._index, depth=depth)
        return self._last

    def _check_open(self, method: str) -> None:
        if not self._opened:
            raise RobotFault(FaultKind.NOT_CONNECTED, f"mock camera {self.serial!r}: {method}() before open()")

    def latest(self, max_age_s: float | None = None) -> Frame:
        self._check_open("latest")
        kinds = self._schedule.check("latest")
        if FaultKind.CAMERA_STALL in kinds:
            if max_age_s is not None:
                raise RobotFault(
                    FaultKind.CAMERA_STALL,
                    f"mock camera {self.serial!r}: no new frame (stalled); last index {self._index}",
                )
            return self._last  # type: ignore[return-value]
        frame = self._capture(skip=kinds.count(DROP_FRAMES))
        self._returned_index = frame.index
        return frame

    def wait_frame(self, timeout_s: float = 1.0) -> Frame:
        self._check_open("wait_frame")
        kinds = self._schedule.check("wait_frame")
        if FaultKind.CAMERA_STALL in kinds:
            time.sleep(min(timeout_s, self.timeout_s))
            raise RobotFault(FaultKind.CAMERA_STALL, f"mock camera {self.serial!r}: no frame within {timeout_s:.2f} s")
        frame = self._capture(skip=kinds.count(DROP_FRAMES))
        self._returned_index = frame.index
        return frame

    @property
    def intrinsics(self) -> Intrinsics:
        f = 0.5 * self.width / math.tan(math.radians(45.0) / 2)
        return Intrinsics(self.width, self.height, f, f, (self.width - 1) / 2, (self.height - 1) / 2)

    @property
    def fps(self) -> float:
        return self._fps
