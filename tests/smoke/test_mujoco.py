"""Smoke test against the MuJoCo simulator: real offscreen-rendered cameras of a simulated FR3."""

from __future__ import annotations

import pytest

from rlhw.smoke import PASS
from tests.smoke.conftest import SIM_CONFIG, rows, smoke


@pytest.mark.timeout(120)
def test_mujoco_cameras_open_render_the_configured_resolution_and_drop_no_frames():
    report = smoke(
        SIM_CONFIG,
        ["env.sim=mujoco", "env.image_size=[48,64]", "env.sim_cameras=[wrist]"],
        checks=("robots", "cameras"),
        window_s=0.2,
        timeout_s=20.0,
    )
    for name in ("camera wrist",):
        r = rows(report, name)
        for check in ("open", "stream", "dropped_frames"):
            assert r[check].status == PASS, (name, check, r[check].detail)
        assert r["resolution"].status == PASS and r["resolution"].value == "64x48"
        assert r["dropped_frames"].measured["dropped"] == 0
        assert not r["fps"].required  # a software renderer's speed is reported, not judged
        assert r["fps"].measured["fps"] > 0
    arm = rows(report, "mujoco-sim0")
    assert arm["connect"].status == PASS and arm["motion_commands"].value == "0"
    assert report.exit_code == 0
