"""Checks of one arm: reachable, connects, state readable and finite, error flags, recovery, and
(only when the operator allowed motion) a small bounded motion and back, and the gripper.

Nothing here moves the arm unless ``options.motion_allowed``: the arm is wrapped in `MotionGuard`,
which refuses every motion command until the motion checks enable it, and counts what was sent, so
the report can say "0 motion commands" as a measured fact, not a promise.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from rlhw.config.env import EnvConfig
from rlhw.errors import FaultKind, RobotFault, SafetyViolation
from rlhw.network import FCI_PORT, tcp_connect_problem
from rlhw.robot.pose import Pose
from rlhw.smoke.bounded import Outcome, TargetRun, call_bounded, failed, passed, skipped
from rlhw.smoke.hints import REALTIME_KERNEL, ROBOT_UNREACHABLE
from rlhw.smoke.options import SmokeOptions
from rlhw.smoke.targets import RobotTarget

#: A motion counts as arrived within this distance of its target (m).
ARRIVED_M = 0.003
#: Resend period of a Cartesian target while waiting (keeps the driver's silence watchdog fed).
RESEND_S = 0.05

MOTION_METHODS = ("command_pose", "command_gripper", "move_joints", "command_joints")


class MotionGuard:
    """Wraps an `Arm`: motion methods raise SafetyViolation unless ``allow`` is set; counts them."""

    def __init__(self, arm):
        self._arm = arm
        self.allow = False
        self.sent: dict[str, int] = {}

    def __getattr__(self, name: str):
        attr = getattr(self._arm, name)
        if name in MOTION_METHODS:

            def guarded(*args, **kwargs):
                if not self.allow:
                    raise SafetyViolation(f"smoke test: {name}() refused: motion was not allowed (--allow-motion)")
                self.sent[name] = self.sent.get(name, 0) + 1
                return attr(*args, **kwargs)

            return guarded
        return attr

    @property
    def motion_commands(self) -> int:
        return sum(self.sent.values())


def _realtime_kernel() -> tuple[bool, str]:
    import platform

    try:
        from drivers.franka.probe import realtime_kernel

        rt = realtime_kernel()
    except Exception:
        rt = "PREEMPT_RT" in platform.uname().version
    return rt, f"{'PREEMPT_RT' if rt else 'no realtime kernel'} ({platform.release()})"


def _fmt_xyz(v) -> str:
    return "[" + ", ".join(f"{float(x):.3f}" for x in v) + "]"


def check_arm(
    run: TargetRun,
    arm_factory: Callable[[], Any],
    target: RobotTarget,
    options: SmokeOptions,
    env_config: EnvConfig,
    keep_open: bool = False,
):
    """Run the arm checks; returns the connected (guarded) arm when ``keep_open`` (sim cameras render
    it), else closes it and returns None."""
    is_franka = target.driver == "franka"
    timeout = options.timeout_s
    if is_franka:
        enforce = target.entry is not None and target.entry.controller.realtime == "enforce"
        run.run("realtime_kernel", lambda: _realtime_check(enforce), required=enforce, needs_ok=False)
    holder: dict[str, Any] = {}
    connect = lambda: _connect_check(holder, arm_factory, target, timeout)  # noqa: E731
    if is_franka:
        _fci_connect_and_reachable(run, connect, target.entry, timeout)
    else:
        run.run("connect", connect, timeout_s=timeout + 3.0)
    arm = holder.get("arm")
    run.run("state", lambda: _state_check(arm, options), timeout_s=options.window_s + timeout)
    run.run("error_flags", lambda: _error_flags_check(arm, timeout))
    run.run("recovery", lambda: _recovery_check(arm, timeout))
    if is_franka:
        run.run("versions", lambda: _versions_check(arm), required=False)
    _motion_checks(run, arm, target, options, env_config)
    if arm is not None:
        run.note(
            "motion_commands",
            passed(
                str(arm.motion_commands),
                "motion commands sent by the smoke test"
                + ("" if arm.motion_commands else " (none: the arm was not moved)"),
                sent=dict(arm.sent),
            ),
        )
    connected = any(r.check in ("connect", "fci_connect") and r.status == "PASS" for r in run.rows)
    if keep_open and run.hung is None and arm is not None and connected:
        return arm
    if run.hung is None:
        close_arm(arm, timeout)
    else:
        close_arm(arm, min(timeout, 3.0))  # a stuck driver: a bounded try, its process dies with us
    return None


def _realtime_check(enforce: bool) -> Outcome:
    ok, text = _realtime_kernel()
    if ok:
        return passed("PREEMPT_RT", text)
    if enforce:
        return failed(f"{text}; controller.realtime is 'enforce'", "missing", hint=REALTIME_KERNEL)
    return passed("not needed", f"{text}; controller.realtime: ignore (simulator/test setup only)")


def _connect_check(
    holder: dict[str, Any], arm_factory: Callable[[], Any], target: RobotTarget, timeout: float
) -> Outcome:
    """Make and connect the arm (kept in ``holder["arm"]`` even when connecting fails, to close it)."""
    t = time.perf_counter()
    arm = MotionGuard(arm_factory())
    holder["arm"] = arm
    arm.connect(timeout_s=timeout)
    dt = time.perf_counter() - t
    info = arm.info
    extra = f"; robot mode {info['robot_mode']}" if "robot_mode" in info else ""
    if "gripper_max_width" in info:
        extra += f"; gripper max width {info['gripper_max_width']:.3f} m"
    what = "FCI connected" if target.driver == "franka" else f"{target.driver} arm connected (simulated)"
    return passed(f"{dt:.2f} s", what + extra, connect_s=round(dt, 4))


def _fci_connect_and_reachable(run: TargetRun, connect: Callable[[], Outcome], entry, timeout: float) -> None:
    """FCI first, a bare TCP probe only to explain a failure: franky-sim takes any TCP connection
    for its client and refuses new ones for seconds after it closes (drivers/franka/probe.py).
    The "reachable" row goes before the "fci_connect" row either way."""
    out = run.run("fci_connect", connect, timeout_s=timeout + 3.0)  # the driver's own bound fires first
    position = len(run.rows) - 1
    if out.status == "PASS":
        run.rows.insert(
            position,
            _row_like(
                run, "reachable", passed(f"TCP {FCI_PORT}", f"{entry.robot_ip}:{FCI_PORT} accepted the FCI connection")
            ),
        )
        return

    def reachable():
        problem = tcp_connect_problem(entry.robot_ip, FCI_PORT, min(3.0, timeout))
        if problem:
            return failed(problem + " (robot not reachable)", "no", hint=ROBOT_UNREACHABLE)
        return passed(f"TCP {FCI_PORT}", f"{entry.robot_ip}:{FCI_PORT} accepts TCP, so the FCI handshake itself failed")

    run.run("reachable", reachable, needs_ok=False, uses_driver=False)
    run.rows.insert(position, run.rows.pop())


def _state_check(arm, options: SmokeOptions) -> Outcome:
    """Read the state for the window: it must keep coming, finite, at a useful rate."""
    window = options.window_s
    lat: list[float] = []
    t_end = time.monotonic() + window
    st = None
    while time.monotonic() < t_end:
        t = time.perf_counter()
        try:
            st = arm.state()
        except RobotFault as e:
            return failed(
                f"state read failed after {len(lat)} good reads in {window - (t_end - time.monotonic()):.2f} s: {e}",
                f"{len(lat)} reads",
            )
        lat.append(time.perf_counter() - t)
        for name in ("q", "dq", "ee_pose"):
            if not np.all(np.isfinite(np.asarray(getattr(st, name), float))):
                return failed(f"state.{name} has non-finite values: {getattr(st, name)}")
        if arm.realtime:
            time.sleep(0.01)
    rate = len(lat) / window
    p50 = statistics.median(lat) * 1e3
    return passed(
        f"{rate:.0f} reads/s, p50 {p50:.1f} ms",
        f"ee_xyz={_fmt_xyz(st.ee_position)} gripper={st.gripper_width:.3f} m; max read {max(lat) * 1e3:.1f} ms",
        reads=len(lat),
        p50_ms=round(p50, 3),
        max_ms=round(max(lat) * 1e3, 3),
        ee_pose=[float(x) for x in st.ee_pose],
        q=[float(x) for x in st.q],
    )


def _error_flags_check(arm, timeout: float) -> Outcome:
    st = arm.state()
    if not st.errors:
        return passed("none", "no error flags set")
    flags = ", ".join(st.errors)
    ok = arm.recover(timeout_s=timeout)
    after = arm.state().errors if ok else st.errors
    if ok and not after:
        return passed("cleared", f"found {flags}; automatic error recovery cleared them", flags=list(st.errors))
    why = arm.last_error or "errors remain"
    return failed(f"error flags {flags}; recovery did not clear them: {why}", flags, flags=list(st.errors))


def _recovery_check(arm, timeout: float) -> Outcome:
    t = time.perf_counter()
    ok = arm.recover(timeout_s=timeout)
    dt = time.perf_counter() - t
    if not ok:
        why = arm.last_error or "recover() returned False"
        return failed(f"automatic error recovery failed: {why}", "failed")
    return passed(f"{dt * 1e3:.0f} ms", "automatic error recovery answered and left no errors (no motion)")


def _versions_check(arm) -> Outcome:
    info = dict(arm.robot_info())
    if info.get("franky_version") in (None, "unknown"):
        from importlib.metadata import PackageNotFoundError, version

        try:
            info["franky_version"] = version("franky-control")
        except PackageNotFoundError:
            pass
    rate = info.get("control_command_success_rate")
    return passed(
        f"franky {info.get('franky_version')}",
        f"gripper server v{info.get('gripper_server_version', '?')}"
        + (f"; command success rate {rate:.2f}" if isinstance(rate, (int, float)) else ""),
        **{k: v for k, v in info.items() if isinstance(v, (int, float, str))},
    )


def close_arm(arm, timeout_s: float) -> None:
    if arm is None:
        return
    try:
        call_bounded(arm.close, max(3.0, timeout_s), "close")
    except Exception:
        pass  # the driver bounds and kills its own process; nothing else to do here


def _row_like(run: TargetRun, check: str, out: Outcome):
    from rlhw.smoke.results import CheckResult

    return CheckResult(
        run.node_rank, run.target, check, out.status, out.value, out.detail, out.hint, True, 0.0, dict(out.measured)
    )


# -- motion (only when allowed) ----------------------------------------------------------------


def _motion_checks(run: TargetRun, arm, target: RobotTarget, options: SmokeOptions, env_config: EnvConfig) -> None:
    has_gripper = target.entry is None or target.entry.gripper
    if not options.motion_allowed:
        reason = "moves the arm: " + options.motion_refusal()
        run.note("motion", skipped(reason))
        if has_gripper:
            run.note("gripper", skipped(reason))
        return
    run.run(
        "motion",
        lambda: _small_motion_check(arm, env_config.safety, options, env_config.control_hz),
        required=True,
        timeout_s=3 * options.timeout_s,
    )
    if has_gripper:
        run.run(
            "gripper", lambda: _gripper_check(arm, options.timeout_s), required=True, timeout_s=3 * options.timeout_s
        )


def _pause(arm) -> float:
    """Let ``RESEND_S`` pass for the arm: real time for a real arm, simulated time for a simulated
    one; returns the simulated seconds that passed (0 for a real arm)."""
    if arm.realtime:
        time.sleep(RESEND_S)
        return 0.0
    arm.advance(RESEND_S)
    return RESEND_S


def _wait_pose(arm, goal: Pose, limit_s: float) -> tuple[float, float]:
    """Seconds to arrive (simulated seconds for a simulated arm) and the remaining error."""
    t0 = time.monotonic()
    sim_t = 0.0
    while True:
        arm.command_pose(goal)  # same target again: keeps the driver's watchdog fed, no new motion
        sim_t += _pause(arm)
        err = arm.state().pose.distance(goal).translation_m
        if err < ARRIVED_M:
            return (time.monotonic() - t0 if arm.realtime else sim_t), err
        if time.monotonic() - t0 > limit_s:
            raise RobotFault(
                FaultKind.TIMEOUT, f"did not reach the target within {limit_s:g} s (still {err * 1e3:.1f} mm away)"
            )


def _step_response(arm, start: Pose, goal: Pose, period_s: float) -> float:
    """How far (m) the hand follows a target ``goal`` in one control period: what a policy's step achieves.
    A policy trained on one driver expects the fraction it saw there (the MuJoCo arm: about 64 % of a 25 mm
    step at 10 Hz); a controller that follows much less makes it reach slower or not at all."""
    arm.command_pose(goal)
    if arm.realtime:
        time.sleep(period_s)
    else:
        arm.advance(period_s)
    return arm.state().pose.distance(start).translation_m


def _small_motion_check(arm, safety, options: SmokeOptions, control_hz: float = 10.0) -> Outcome:
    """``options.motion_m`` up (down when up would leave the workspace) and back to the start; on the way out,
    the commanded displacement against the one measured after one control period (`_step_response`)."""
    d = options.motion_m
    start = arm.state().pose
    p = start.position
    low, high = np.asarray(safety.workspace_low), np.asarray(safety.workspace_high)
    if np.any(p < low) or np.any(p > high):
        return failed(
            f"the hand at {_fmt_xyz(p)} is outside the safety workspace {_fmt_xyz(low)}-{_fmt_xyz(high)}; "
            "move it inside (Desk, guiding mode) before a motion test",
            "refused",
            hint="",
        )
    up = p[2] + d <= high[2]
    goal = start.with_position(p + (0.0, 0.0, d if up else -d))
    arm.allow = True
    try:
        followed = _step_response(arm, start, goal, 1.0 / control_hz)
        t_out, _ = _wait_pose(arm, goal, options.timeout_s)
        moved = arm.state().pose.distance(start).translation_m
        t_back, err = _wait_pose(arm, start, options.timeout_s)
    except BaseException:
        arm.stop()  # a motion that did not arrive must not keep going (arrived ones end by themselves)
        raise
    finally:
        arm.allow = False
    share = followed / d
    return passed(
        f"{d * 100:.1f} cm {'up' if up else 'down'} and back; one step followed {share:.0%}",
        ("" if arm.realtime else "simulated time: ")
        + f"out in {t_out:.2f} s (moved {moved * 100:.2f} cm), back in {t_back:.2f} s, return error {err * 1e3:.1f} mm; "
        f"commanded {d * 1e3:.1f} mm, measured {followed * 1e3:.1f} mm after one control period ({1e3 / control_hz:.0f} ms)",
        moved_m=round(moved, 5),
        return_error_m=round(err, 5),
        out_s=round(t_out, 3),
        back_s=round(t_back, 3),
        step_commanded_m=round(d, 5),
        step_measured_m=round(followed, 5),
        step_followed_share=round(share, 3),
    )


def _wait_width(arm, width: float, limit_s: float) -> float:
    """Seconds (simulated seconds for a simulated arm) for the gripper to reach ``width``."""
    t0 = time.monotonic()
    sim_t = 0.0
    arm.command_gripper(width)
    while True:
        sim_t += _pause(arm)
        w = float(arm.state().gripper_width)
        if abs(w - width) < 0.004:
            return time.monotonic() - t0 if arm.realtime else sim_t
        if time.monotonic() - t0 > limit_s:
            raise RobotFault(
                FaultKind.TIMEOUT,
                f"gripper did not reach {width * 1e3:.0f} mm within {limit_s:g} s (at {w * 1e3:.1f} mm)",
            )


def _gripper_check(arm, timeout: float) -> Outcome:
    """Close to 10 mm, then open fully."""
    wmax = float(arm.max_gripper_width)
    arm.allow = True
    try:
        t_close = _wait_width(arm, 0.01, timeout)
        t_open = _wait_width(arm, wmax, timeout)
    finally:
        arm.allow = False
    return passed(
        f"closed {t_close:.2f} s, opened {t_open:.2f} s",
        f"moved to 10 mm and back to {wmax * 1e3:.0f} mm (open)",
        close_s=round(t_close, 3),
        open_s=round(t_open, 3),
    )
