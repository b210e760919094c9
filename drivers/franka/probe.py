"""Check one Franka for the smoke test: reachable, FCI connects, state reads, no errors, versions.

Read-only: the probe never commands motion. Each step is bounded and later steps are skipped
(not failed) once an earlier one fails, so the report points at the first real problem.
"""

from __future__ import annotations

import os
import platform
import time

from drivers.franka.arm import FrankaArm
from drivers.probe_report import ProbeReport
from rlhw.errors import RlhwError
from rlhw.hardware.types.franka import FrankaController
from rlhw.network import FCI_PORT, tcp_connect_problem


def realtime_kernel() -> bool:
    """True on a PREEMPT_RT kernel (what libfranka's RealtimeConfig.Enforce requires)."""
    if os.path.exists("/sys/kernel/realtime"):
        try:
            return open("/sys/kernel/realtime").read().strip() == "1"
        except OSError:
            return False
    return "PREEMPT_RT" in platform.uname().version or "PREEMPT RT" in platform.uname().version


def probe(robot_ip: str, timeout_s: float = 10.0, realtime: str = "ignore", gripper: bool = True) -> ProbeReport:
    """Probe ``robot_ip``; ``realtime="enforce"`` additionally requires a realtime kernel here."""
    report = ProbeReport(robot_ip)
    _check_kernel(report, realtime)
    # FCI first, a bare TCP probe only to diagnose a failure: franky-sim takes any TCP connection
    # for its client and refuses new ones for seconds after it closes.
    arm = None
    try:
        arm = FrankaArm(
            robot_ip, FrankaController(realtime=realtime), gripper=gripper, timeout_s=max(1.5, min(timeout_s, 5.0))
        )
        _check_arm(report, arm, timeout_s)
    except RlhwError as e:
        _report_failure(report, robot_ip, e, timeout_s)
    finally:
        if arm is not None:
            arm.close()
    return report


def _check_kernel(report: ProbeReport, realtime: str) -> None:
    """Row ``realtime_kernel``: a real arm (``realtime: enforce``) needs a PREEMPT_RT kernel on this node."""
    rt = realtime_kernel()
    if rt:
        hint = ""
    elif realtime == "ignore":
        hint = "fine for franky-sim (realtime: ignore); a real arm needs a PREEMPT_RT kernel"
    else:
        hint = "install a PREEMPT_RT kernel or set realtime: ignore (simulator only)"
    report.add(
        "realtime_kernel",
        rt or realtime == "ignore",
        f"{'PREEMPT_RT' if rt else 'no realtime kernel'} ({platform.release()})",
        hint,
    )


def _check_arm(report: ProbeReport, arm: FrankaArm, timeout_s: float) -> None:
    """Rows ``fci_connect``, ``state``, ``errors`` and ``versions``, read-only; raises at the first failure."""
    t = time.perf_counter()
    arm.connect(timeout_s=timeout_s)
    report.add(
        "fci_connect",
        True,
        f"connected in {(time.perf_counter() - t):.2f} s; robot mode {arm.info.get('robot_mode')}"
        + (f"; gripper max width {arm.info['gripper_max_width']:.3f} m" if "gripper_max_width" in arm.info else ""),
    )
    st = arm.state()
    report.add(
        "state",
        True,
        f"q={[round(float(v), 3) for v in st.q]} ee_xyz={[round(float(v), 3) for v in st.ee_position]}"
        f" gripper={st.gripper_width:.3f} m",
    )
    report.add(
        "errors",
        not st.errors,
        ", ".join(st.errors) or "none",
        "" if not st.errors else "clear them (recover) or release the user stop in Desk",
    )
    info = arm.robot_info()
    report.add(
        "versions",
        True,
        f"franky {info.get('franky_version')}, gripper server v{info.get('gripper_server_version')}, "
        f"command success rate {info.get('control_command_success_rate'):.2f}",
    )


def _report_failure(report: ProbeReport, robot_ip: str, error: RlhwError, timeout_s: float) -> None:
    """The failed row (``fci_connect`` when the arm never connected, else ``state``) with a hint; a failed
    connect is diagnosed with a bare TCP probe first (row ``tcp``)."""
    text = str(error)
    step = "fci_connect" if len(report.checks) == 1 else "state"
    if step == "fci_connect":
        t = time.perf_counter()
        problem = tcp_connect_problem(robot_ip, FCI_PORT, min(timeout_s, 3.0))
        reachable = problem is None
        report.add(
            "tcp",
            reachable,
            f"{f'{robot_ip}:{FCI_PORT} accepts TCP' if reachable else problem} "
            f"({(time.perf_counter() - t) * 1e3:.1f} ms)",
            "" if reachable else "check the network cable/IP and that FCI is enabled in Desk (or start franky-sim)",
        )
    hint = ""
    if "libfranka" in text and "version" in text.lower() or "IncompatibleVersion" in text:
        hint = "libfranka/firmware mismatch: install the franky-control build that matches the robot's system version"
    elif "realtime" in text.lower():
        hint = "set realtime: ignore for simulators, or run on a PREEMPT_RT kernel"
    report.add(step, False, text.splitlines()[0], hint)
