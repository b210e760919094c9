"""Camera checks on the `realsense` driver's real pyrealsense2 pipeline: no camera is attached to
these machines, so a missing one must FAIL fast with the hint, and the stream checks run on a
recording made with pyrealsense2's own software_device + recorder (--camera-playback)."""

from __future__ import annotations

import time

import pytest

from rlhw.smoke import FAIL, PASS, SKIP
from rlhw.smoke.hints import CAMERA_MISSING
from tests.smoke.conftest import rows, smoke

CONFIG = """
cluster:
  num_nodes: 1
  node_groups:
    - label: cameras
      node_ranks: 0
      hardware:
        type: RealSense
        configs:
          - {serial: "000000000001", node_rank: 0, width: 64, height: 48, fps: 30}
"""


@pytest.fixture
def config_file(tmp_path):
    path = tmp_path / "cameras.yaml"
    path.write_text(CONFIG)
    return str(path)


@pytest.mark.timeout(60)
def test_a_camera_that_is_not_plugged_in_fails_within_seconds_with_the_usb_and_serial_hint(config_file):
    t = time.monotonic()
    report = smoke(config_file, checks=("cameras",), timeout_s=5.0)
    r = rows(report, "camera 000000000001")
    assert r["detected"].status == FAIL and "is not connected" in r["detected"].detail
    assert r["detected"].hint == CAMERA_MISSING
    assert r["open"].status == SKIP
    assert report.exit_code == 1 and time.monotonic() - t < 10


@pytest.mark.timeout(90)
def test_dropped_frames_in_a_recorded_stream_fail_the_drop_check_on_the_real_pipeline(config_file, tmp_path):
    from drivers.realsense_recording import write_synthetic_recording

    recording = write_synthetic_recording(
        tmp_path / "cam.db3",
        serial="000000000001",
        frames=75,
        width=64,
        height=48,
        fps=30,
        depth=False,
        skip=(30, 31, 32),
    )
    report = smoke(
        config_file,
        checks=("cameras",),
        window_s=1.0,
        timeout_s=5.0,
        camera_playback=(("000000000001", str(recording)),),
    )
    r = rows(report, "camera 000000000001")
    assert r["detected"].status == PASS and "recording" in r["detected"].value
    for check in ("open", "resolution", "stream"):
        assert r[check].status == PASS, (check, r[check].detail)
    assert r["resolution"].value == "64x48"
    assert 10 < r["fps"].measured["fps"] < 60 and r["fps"].measured["configured_fps"] == 30
    assert r["frame_age"].status in (PASS, FAIL) and r["frame_age"].measured["p50_ms"] >= 0
    dropped = r["dropped_frames"]
    # the recording lacks 3 frames; real-time playback on a loaded machine may drop one more
    assert dropped.status == FAIL and 3 <= dropped.measured["dropped"] <= 6, dropped.detail
    assert "USB 3" in dropped.hint
    assert report.exit_code == 1
