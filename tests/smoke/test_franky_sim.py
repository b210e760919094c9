"""Smoke test against franky-sim through configs/franky_sim.yaml: the real `franka` driver (franky,
libfranka's protocol) on loopback, with robot_ip overridden to the simulator's 127.0.0.X."""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest

from drivers.franka import FrankaArm
from drivers.franky_sim import FrankySim, free_loopback_host
from rlhw.cli.smoke_test import main
from rlhw.hardware.types.franka import FrankaController
from rlhw.smoke import FAIL, PASS, SKIP
from rlhw.smoke.hints import ROBOT_UNREACHABLE
from tests.smoke.conftest import FRANKY_CONFIG, robot_ip_override, rows, smoke
from tests.waiting import wait_until


@pytest.fixture(scope="module")
def sim():
    with FrankySim(start_timeout_s=90) as s:
        yield s


def hand_position(host: str) -> np.ndarray:
    arm = FrankaArm(host, FrankaController(realtime="ignore"), timeout_s=3.0)
    try:
        arm.connect(timeout_s=20)
        return np.array(arm.state().ee_position)
    finally:
        arm.close()


@pytest.mark.timeout(120)
def test_franky_sim_robot_passes_its_checks_and_unconfirmed_motion_moves_nothing(sim, tmp_path, capsys):
    """--allow-motion without a terminal and without --yes: every read-only check runs, motion is
    skipped with the reason, and the hand stays where it was."""
    before = hand_position(sim.host)
    out = tmp_path / "report.json"
    code = main(
        [
            FRANKY_CONFIG,
            robot_ip_override(sim.host),
            "--allow-motion",
            "--checks",
            "nodes,robots",
            "--window",
            "0.5",
            "--timeout",
            "10",
            "--json",
            str(out),
        ]
    )
    after = hand_position(sim.host)
    report = json.loads(out.read_text())
    r = {c["check"]: c for c in report["checks"] if c["target"] == f"franka@{sim.host}"}
    for check in ("realtime_kernel", "reachable", "fci_connect", "state", "error_flags", "recovery"):
        assert r[check]["status"] == PASS, (check, r[check]["detail"])
    assert "not needed" in r["realtime_kernel"]["value"]  # controller.realtime: ignore in this config
    assert r["state"]["measured"]["reads"] > 5 and len(r["state"]["measured"]["q"]) == 7
    assert r["motion"]["status"] == SKIP and "no terminal to confirm motion" in r["motion"]["detail"]
    assert r["motion_commands"]["value"] == "0"
    assert code == 0 and report["exit_code"] == 0
    assert "no terminal to confirm motion" in capsys.readouterr().out
    assert np.linalg.norm(after - before) < 0.001  # the hand did not move (1 mm: simulator noise)


@pytest.mark.timeout(120)
def test_allowed_motion_moves_the_hand_by_the_asked_distance_and_back_and_works_the_gripper(sim):
    before = hand_position(sim.host)
    report = smoke(FRANKY_CONFIG, [robot_ip_override(sim.host)], checks=("robots",), motion="allowed", timeout_s=15.0)
    r = rows(report, f"franka@{sim.host}")
    assert r["motion"].status == PASS, r["motion"].detail
    assert 0.010 < r["motion"].measured["moved_m"] < 0.02
    # how far one step's target is followed in one control period, commanded against measured (the MuJoCo arm:
    # 63 %; franky-sim at this config's relative_dynamics_factor 0.1: about 2 %, at 1.0: 33-62 %)
    m = r["motion"].measured
    assert m["step_commanded_m"] == pytest.approx(0.015) and 0 <= m["step_measured_m"] < m["step_commanded_m"]
    assert m["step_followed_share"] == pytest.approx(m["step_measured_m"] / m["step_commanded_m"], abs=1e-3)
    assert r["gripper"].status == PASS, r["gripper"].detail
    assert int(r["motion_commands"].value) > 0
    assert np.linalg.norm(hand_position(sim.host) - before) < 0.005


@pytest.mark.timeout(60)
def test_an_unreachable_robot_fails_within_seconds_with_the_cable_and_fci_hint():
    host = free_loopback_host()  # nothing listens there
    t = time.monotonic()
    report = smoke(FRANKY_CONFIG, [robot_ip_override(host)], checks=("robots",), timeout_s=5.0)
    elapsed = time.monotonic() - t
    r = rows(report, f"franka@{host}")
    assert r["reachable"].status == FAIL and r["reachable"].hint == ROBOT_UNREACHABLE
    assert r["fci_connect"].status == FAIL
    assert r["state"].status == SKIP and r["motion"].status == SKIP
    assert report.exit_code == 1 and elapsed < 15


@pytest.mark.timeout(120)
def test_killing_franky_sim_mid_check_fails_the_state_check_within_the_timeout(sim):
    """Last in this file on purpose: it kills the module's simulator (saves starting another)."""
    from drivers.franka import FrankaArm

    result = {}

    def run():
        result["report"] = smoke(
            FRANKY_CONFIG, [robot_ip_override(sim.host)], checks=("robots",), window_s=8.0, timeout_s=6.0
        )

    worker = threading.Thread(target=run, daemon=True)
    worker.start()

    # wait until the smoke test's driver is connected, then until its state check reads, then pull the plug
    def connected_driver():
        owner = FrankaArm.controlling(sim.host)
        return owner if owner is not None and owner.connected and owner.info else None

    owner = wait_until(connected_driver, timeout_s=60, period_s=0.05)
    assert owner is not None, "the smoke test never connected"
    reading, read = threading.Event(), owner.state

    def state(*args, **kwargs):
        reading.set()
        return read(*args, **kwargs)

    owner.state = state  # the state check reads through MotionGuard's getattr, so through this
    assert reading.wait(30), "the state check never read the state"
    sim.kill()
    killed_at = time.monotonic()
    worker.join(30)
    finished = time.monotonic() - killed_at
    assert not worker.is_alive()
    r = rows(result["report"], f"franka@{sim.host}")
    assert r["fci_connect"].status == PASS
    assert r["state"].status == FAIL, r["state"].detail
    assert "state read failed" in r["state"].detail and "good reads" in r["state"].detail
    assert r["state"].hint  # names what to check
    assert r["error_flags"].status == SKIP and r["recovery"].status == SKIP
    assert finished < 6.0 + 10  # within the check's timeout (plus closing the dead driver)
    assert result["report"].exit_code == 1
