"""The smoke test's own machinery: bounded checks, skipping after failures, exit status, hints,
the motion guard and the motion confirmation."""

from __future__ import annotations

import io
import threading
from types import SimpleNamespace

import pytest

from rlhw.cli.smoke_test import confirm_motion
from rlhw.errors import FaultKind, RobotFault, SafetyViolation
from rlhw.smoke import FAIL, PASS, SKIP, CheckResult, SmokeReport
from rlhw.smoke.arm_checks import MotionGuard
from rlhw.smoke.bounded import TargetRun, passed
from rlhw.smoke.hints import REALTIME_KERNEL, ROBOT_UNREACHABLE, USB2_LINK, VERSION_MISMATCH, hint_for


@pytest.mark.timeout(20)
def test_a_check_that_hangs_fails_at_its_timeout_and_the_rest_of_its_target_is_skipped():
    run = TargetRun(0, "franka@10.0.0.1", timeout_s=0.3)
    release = threading.Event()
    try:
        run.run("state", lambda: release.wait(60) and passed())  # the hang under test
        assert not release.is_set()  # the run returned while the check still hung: it did not wait for it
        run.run("error_flags", lambda: passed("none"), needs_ok=False)
    finally:
        release.set()
    state, later = run.rows
    assert state.status == FAIL and "did not finish within 0.3 s" in state.detail
    assert later.status == SKIP and "state did not finish" in later.detail


def test_a_driver_fault_becomes_a_fail_row_with_its_reason_and_a_hint():
    def boom():
        raise RobotFault(FaultKind.NETWORK, "127.0.0.9: UDP receive timed out")

    run = TargetRun(0, "franka@127.0.0.9", timeout_s=2)
    run.run("state", boom)
    run.run("recovery", lambda: passed("ok"))
    state, recovery = run.rows
    assert state.status == FAIL and "UDP receive timed out" in state.detail
    assert state.hint == ROBOT_UNREACHABLE
    assert recovery.status == SKIP and recovery.detail == "skipped: state failed"


def test_an_unexpected_exception_is_reported_with_where_it_happened():
    run = TargetRun(0, "camera x", timeout_s=2)
    run.run("open", lambda: {}["missing"])
    assert run.rows[0].status == FAIL and "KeyError" in run.rows[0].detail and "test_units.py" in run.rows[0].detail


def test_exit_status_is_zero_only_when_every_required_check_passed():
    ok = SmokeReport(
        "c",
        [
            CheckResult(0, "a", "x", PASS),
            CheckResult(0, "a", "y", SKIP, required=False),
            CheckResult(0, "a", "fps", FAIL, required=False),
        ],
    )
    bad = SmokeReport("c", ok.results + [CheckResult(0, "b", "state", FAIL)])
    assert ok.exit_code == 0 and ok.ok
    assert bad.exit_code == 1 and [r.check for r in bad.failures()] == ["fps", "state"]
    assert bad.to_json()["counts"] == {PASS: 1, FAIL: 2, SKIP: 1}


def test_a_status_outside_pass_fail_skip_is_refused():
    with pytest.raises(ValueError, match="PASS"):
        CheckResult(0, "a", "x", "WARN")


@pytest.mark.parametrize(
    "message, hint",
    [
        ("not_connected: Running kernel does not have realtime capabilities", REALTIME_KERNEL),
        ("IncompatibleVersionException: server version 5, library version 9", VERSION_MISMATCH),
        ("USB 2.1 link: expect dropped frames", USB2_LINK),
        ("network: cannot reach 172.16.0.2:1337 (FCI)", ROBOT_UNREACHABLE),
    ],
)
def test_common_failures_get_the_hint_that_names_the_fix(message, hint):
    assert hint_for(message) == hint


class _Arm:
    realtime = True

    def __init__(self):
        self.poses = []

    def command_pose(self, pose):
        self.poses.append(pose)

    def state(self):
        return "state"


def test_motion_guard_refuses_motion_until_allowed_and_counts_what_it_let_through():
    arm = _Arm()
    guard = MotionGuard(arm)
    assert guard.state() == "state" and guard.realtime is True
    with pytest.raises(SafetyViolation, match="--allow-motion"):
        guard.command_pose([0.5, 0, 0.3, 1, 0, 0, 0])
    assert arm.poses == [] and guard.motion_commands == 0
    guard.allow = True
    guard.command_pose([0.5, 0, 0.3, 1, 0, 0, 0])
    assert len(arm.poses) == 1 and guard.sent == {"command_pose": 1}


class _Tty(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self._tty = tty

    def isatty(self):
        return self._tty


def _targets(simulated: bool):
    return SimpleNamespace(robots=[SimpleNamespace(name="franka@10.0.0.1", simulated=simulated)])


def _args(**kw):
    base = dict(allow_motion=True, yes=False, motion_cm=1.5)
    base.update(kw)
    return SimpleNamespace(**base)


def test_motion_without_a_terminal_and_without_yes_is_refused_with_the_reason():
    answer = confirm_motion(_args(), _targets(False), ask=lambda _: pytest.fail("must not prompt"), stdin=_Tty(False))
    assert answer != "allowed" and "--yes" in answer


def test_motion_is_asked_on_a_terminal_and_only_yes_allows_it():
    assert confirm_motion(_args(), _targets(False), ask=lambda _: "y", stdin=_Tty(True)) == "allowed"
    declined = confirm_motion(_args(), _targets(False), ask=lambda _: "", stdin=_Tty(True))
    assert declined != "allowed" and "declined" in declined


def test_yes_allows_motion_unattended_and_simulated_arms_need_no_confirmation():
    assert confirm_motion(_args(yes=True), _targets(False), stdin=_Tty(False)) == "allowed"
    assert confirm_motion(_args(), _targets(True), stdin=_Tty(False)) == "allowed"
    assert confirm_motion(_args(allow_motion=False), _targets(False), stdin=_Tty(True)) == "off"
