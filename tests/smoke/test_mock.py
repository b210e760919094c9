"""Smoke test against the mock drivers (env.sim=mock): the whole path through node, arm, camera
and a real `rlhw serve-env` child process, and every fault the mock can inject."""

from __future__ import annotations

import json
import time

import pytest

from rlhw.cli.smoke_test import main
from rlhw.smoke import FAIL, PASS, SKIP
from rlhw.smoke.env_server import ServerProcess
from tests.smoke.conftest import SIM_CONFIG, rows, smoke


@pytest.mark.timeout(120)
def test_mock_setup_passes_every_required_check_and_writes_the_json_report(tmp_path, capsys):
    out = tmp_path / "report.json"
    code = main([SIM_CONFIG, "env.sim=mock", "--window", "0.5", "--timeout", "5", "--json", str(out)])
    report = json.loads(out.read_text())
    assert code == 0 and report["ok"] is True and report["exit_code"] == 0
    by = {(c["target"], c["check"]): c for c in report["checks"]}
    for check in ("python", "accelerators"):
        assert by[("node 0", check)]["status"] == PASS
    for check in ("connect", "state", "error_flags", "recovery"):
        assert by[("mock-sim0", check)]["status"] == PASS
    for check in ("open", "resolution", "stream", "dropped_frames"):
        assert by[("camera front", check)]["status"] == PASS
    server = {k[1]: v for k, v in by.items() if k[0].startswith("env-server")}
    assert [server[c]["status"] for c in ("start", "health", "spec", "reset", "step", "shutdown")] == [PASS] * 6
    assert "simulated arm" in server["step"]["detail"] and server["step"]["measured"]["steps"] == 5
    assert server["step"]["measured"]["p50_ms"] > 0
    printed = capsys.readouterr().out
    assert "PASS" in printed and "exit status 0" in printed


@pytest.mark.timeout(60)
def test_without_allow_motion_the_mock_arm_receives_no_motion_command(mock_arms):
    report = smoke(SIM_CONFIG, ["env.sim=mock"], checks=("robots", "cameras"))
    r = rows(report, "mock-sim0")
    assert r["motion"].status == SKIP and "--allow-motion" in r["motion"].detail
    assert r["gripper"].status == SKIP
    assert r["motion_commands"].value == "0"
    assert mock_arms and all(arm.motion_count == 0 for arm in mock_arms)
    assert report.exit_code == 0


@pytest.mark.timeout(60)
def test_allowed_motion_moves_the_mock_hand_and_brings_it_back(mock_arms):
    report = smoke(SIM_CONFIG, ["env.sim=mock"], checks=("robots",), motion="allowed")
    r = rows(report, "mock-sim0")
    assert r["motion"].status == PASS and r["gripper"].status == PASS
    assert r["motion"].measured["moved_m"] > 0.01
    m = r["motion"].measured
    assert 0 < m["step_measured_m"] <= m["step_commanded_m"] * 1.2 and m["step_followed_share"] > 0
    assert r["motion"].measured["return_error_m"] < 0.003
    arm = mock_arms[0]
    poses = [m[1] for m in arm.motions if m[0] == "command_pose"]
    assert max(abs(p[2] - poses[-1][2]) for p in poses) == pytest.approx(0.015, abs=1e-6)  # 1.5 cm, no more
    widths = [m[1] for m in arm.motions if m[0] == "command_gripper"]
    assert widths == [0.01, arm.max_gripper_width]


FAULTS = [
    # (mock fault, target prefix, check that fails, words in the reason)
    ({"kind": "network", "after": 3}, "mock-sim0", "state", "UDP receive timed out"),
    ({"kind": "hang", "on": "state", "after": 1}, "mock-sim0", "state", "blocked past the driver timeout"),
    ({"kind": "recover_fail", "count": 5}, "mock-sim0", "recovery", "recovery failed"),
    ({"kind": "camera_stall", "after": 2, "count": 1000}, "camera front", "stream", "no new frame"),
    ({"kind": "drop_frames", "after": 2, "count": 4}, "camera front", "dropped_frames", "4 of"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fault, target, check, reason", FAULTS, ids=[f[0]["kind"] for f in FAULTS])
def test_an_injected_fault_fails_its_check_with_the_reason_and_a_nonzero_exit(fault, target, check, reason):
    spec = json.dumps([fault])  # JSON is YAML, and keeps the key "on" a string
    report = smoke(SIM_CONFIG, ["env.sim=mock", f"env.mock_faults={spec}"], checks=("robots", "cameras"), timeout_s=3.0)
    row = rows(report, target)[check]
    assert row.status == FAIL and reason in row.detail
    assert row.required and report.exit_code == 1


@pytest.mark.timeout(60)
def test_a_reflex_during_the_motion_check_fails_it_and_the_hint_says_to_clear_it():
    report = smoke(
        SIM_CONFIG, ["env.sim=mock", "env.mock_faults=[{kind: reflex, after: 2}]"], checks=("robots",), motion="allowed"
    )
    r = rows(report, "mock-sim0")
    assert r["motion"].status == FAIL and "reflex" in r["motion"].detail
    assert "reflex" in r["motion"].hint
    assert report.exit_code == 1


@pytest.mark.timeout(30)
def test_an_env_server_address_that_answers_nothing_fails_health_within_the_timeout():
    t = time.monotonic()
    report = smoke(SIM_CONFIG, ["env.sim=mock"], checks=("env-server",), env_server="127.0.0.1:9", timeout_s=2.0)
    r = rows(report, "env-server 127.0.0.1:9")
    assert r["health"].status == FAIL and r["spec"].status == SKIP
    assert "start" not in r and "shutdown" not in r  # a given server is neither started nor stopped
    assert time.monotonic() - t < 10 and report.exit_code == 1


@pytest.mark.timeout(60)
def test_a_serve_env_child_that_exits_before_listening_fails_the_smoke_start_with_its_exit_code_and_last_output(
    tmp_path,
):
    server = ServerProcess(str(tmp_path / "missing.yaml"), (), 0)
    try:
        with pytest.raises(RuntimeError) as e:
            server.wait_listening(60.0)
    finally:
        server.kill()
    assert "rlhw serve-env exited with code 2 before listening" in str(e.value)
    assert "missing.yaml" in str(e.value)  # the child's own one-line error, from its log
