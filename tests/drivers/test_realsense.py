"""The `realsense` driver without a camera: recordings made by pyrealsense2's own software_device and
recorder, played back through the same rs.pipeline code path a live camera uses.

Not covered here (needs a camera): USB enumeration, hardware_reset() and re-enumeration, live
auto-exposure warm-up, USB2 detection, the device's own timestamp domains. See docs/drivers.md.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from pydantic import ValidationError

from drivers.realsense import RealSenseCamera, list_serials, probe_camera
from drivers.realsense_recording import write_synthetic_recording
from rlhw.errors import ConfigError, RobotFault
from rlhw.hardware.types.realsense import RealSenseConfig, RealSenseOptions
from rlhw.robot.camera import Frame, Intrinsics
from rlhw.robot.registry import camera_class

W, H, FPS, N = 64, 48, 30, 30


@pytest.fixture(scope="module")
def recording(tmp_path_factory):
    return write_synthetic_recording(
        tmp_path_factory.mktemp("rs") / "cam.db3",
        serial="123456789012",
        frames=N,
        width=W,
        height=H,
        fps=FPS,
        depth=True,
    )


@pytest.fixture(scope="module")
def gappy_recording(tmp_path_factory):
    return write_synthetic_recording(
        tmp_path_factory.mktemp("rs") / "gaps.db3",
        serial="123456789013",
        frames=12,
        width=W,
        height=H,
        fps=FPS,
        depth=False,
        skip=(4, 5, 9),
    )


def camera(serial: str = "", *, playback_file=None, real_time: bool = True, **options) -> RealSenseCamera:
    """A camera streaming with these `RealSenseOptions` (validated as a config's RealSense entry is)."""
    return RealSenseCamera(serial, RealSenseOptions(**options), playback_file=playback_file, real_time=real_time)


def drain(cam: RealSenseCamera, timeout_s: float = 0.5) -> list[Frame]:
    frames = []
    while True:
        try:
            frames.append(cam.wait_frame(timeout_s))
        except RobotFault:
            return frames


def test_realsense_is_registered_under_its_config_name():
    assert camera_class("realsense") is RealSenseCamera


def test_list_serials_returns_the_attached_serials_as_strings():
    serials = list_serials()
    assert isinstance(serials, list) and all(isinstance(s, str) for s in serials)


@pytest.mark.parametrize(
    "kwargs, field",
    [({}, "serial"), ({"playback_file": "/nonexistent/cam.db3"}, "playback_file")],
)
def test_a_camera_without_a_source_is_refused_naming_the_argument(kwargs, field):
    with pytest.raises(ConfigError) as e:
        RealSenseCamera(**kwargs)
    assert e.value.path == field


@pytest.mark.parametrize(
    "field, value",
    [("width", 0), ("fps", 2.5), ("max_age_s", 0), ("wait_timeout_s", -1), ("reconnect_after", -1), ("speed", 1)],
)
def test_bad_stream_options_are_refused_by_the_one_schema_naming_the_field(field, value):
    with pytest.raises(ValidationError) as e:
        RealSenseOptions(**{field: value})
    assert e.value.errors()[0]["loc"] == (field,)


def test_the_driver_keeps_the_validated_options_it_was_given():
    options = RealSenseOptions(width=320, height=240, fps=15, depth=True)
    cam = RealSenseCamera("1", options)
    assert cam.options is options and cam.fps == 15.0
    assert RealSenseCamera("1").options == RealSenseOptions()


def test_from_plan_builds_the_camera_from_the_hardware_entry_that_declares_it():
    from rlhw.config import load_config
    from rlhw.robot.build import CameraBuild
    from rlhw.robot.factory import declared_entry

    cfg = load_config("configs/workstation_franka.yaml")
    entry = declared_entry(cfg, "000000000002")
    assert isinstance(entry, RealSenseConfig)
    build = CameraBuild(driver="realsense", name="000000000002", index=0, seed=0, env=cfg.env, hardware=entry)
    cam = RealSenseCamera.from_plan(build)
    assert cam.serial == "000000000002" and cam.options is entry
    undeclared = RealSenseCamera.from_plan(CameraBuild("realsense", "42", 0, 0, cfg.env))
    assert undeclared.serial == "42" and undeclared.options == RealSenseOptions()


def test_recordings_must_be_db3_files(tmp_path):
    with pytest.raises(ConfigError, match=r"\.db3"):
        write_synthetic_recording(tmp_path / "x.bag")


@pytest.mark.timeout(30)
def test_opening_an_absent_serial_raises_not_connected_and_lists_what_is_attached():
    cam = camera("999999999999", warmup_frames=1)
    with pytest.raises(RobotFault) as e:
        cam.open(timeout_s=5)
    assert e.value.kind == "not_connected"
    assert "999999999999" in str(e.value) and "connected serials" in str(e.value)


@pytest.mark.timeout(30)
def test_a_failed_open_releases_the_serial_so_a_retry_is_not_taken_for_a_second_camera():
    # (Refusing a second camera object while the first streams needs a live camera: not covered here.)
    first = camera("999999999997", warmup_frames=1)
    with pytest.raises(RobotFault):  # no such camera here; the serial was claimed while opening
        first.open(timeout_s=2)
    second = camera("999999999997", warmup_frames=1)
    with pytest.raises(RobotFault, match="not_connected|attached"):
        second.open(timeout_s=2)


@pytest.mark.timeout(30)
def test_playback_delivers_every_frame_in_order_with_indices_following_frame_numbers(recording):
    # real_time=False: the playback waits for the reader, so a loaded CI machine drops (almost) nothing.
    cam = camera(playback_file=recording, depth=False, warmup_frames=1, reconnect_after=0, real_time=False)
    cam.open(timeout_s=5)
    try:
        frames = [cam.latest(max_age_s=None)] + drain(cam, 2.0)  # generous: a loaded machine may pause
    finally:
        cam.close()
    indices = [f.index for f in frames]
    # latest() returns the newest frame, which on a loaded machine may already be a few frames in;
    # that indices count from open is checked below against the frame numbers in the pixels.
    assert 0 <= indices[0] < N
    assert indices == sorted(set(indices)), "indices must strictly increase"
    # Every recorded frame is delivered or counted as dropped (a gap in the index).
    assert cam.stats["frames"] + cam.stats["dropped"] >= N - 1, (cam.stats, indices)
    offset = int(frames[0].color[0, 0, 0]) - frames[0].index  # 0 unless the very first frame was lost
    assert offset in (0, 1), "frame indices must count from the first frame after open"
    for f in frames:
        assert f.color.shape == (H, W, 3) and f.color.dtype == np.uint8 and f.depth is None
        assert int(f.color[0, 0, 0]) - f.index == offset  # frame i was recorded with color value i
    assert cam.serial == "123456789012"


@pytest.mark.timeout(30)
def test_depth_is_aligned_to_color_in_millimetres(recording):
    with camera(playback_file=recording, depth=True, warmup_frames=1, reconnect_after=0, real_time=False) as cam:
        frames = [cam.latest(max_age_s=None)] + drain(cam, 2.0)
    assert len(frames) >= 5
    for f in frames:
        assert f.depth is not None and f.depth.shape == (H, W) and f.depth.dtype == np.uint16
        valid = f.depth[f.depth > 0]
        assert valid.size > 0.9 * f.depth.size  # rs.align leaves a few holes (0) where no pixel lands
        assert np.all(valid == valid[0])
        # Frame i has depth 500 + i mm. The pipeline's syncer pairs color and depth by timestamp and
        # under load may pair color i with depth i-1 (a camera's hardware sync avoids that).
        assert abs(int(valid[0]) - (500 + int(f.color[0, 0, 0]))) <= 1


@pytest.mark.timeout(30)
def test_color_only_camera_has_no_depth(recording):
    with camera(playback_file=recording, depth=False, warmup_frames=1, reconnect_after=0) as cam:
        f = cam.wait_frame(2.0)
    assert f.depth is None and f.color.shape == (H, W, 3)


@pytest.mark.timeout(30)
def test_intrinsics_and_fps_come_from_the_stream_profile(recording):
    cam = camera(playback_file=recording, warmup_frames=1, reconnect_after=0)
    with pytest.raises(RobotFault, match="open"):
        _ = cam.intrinsics
    with cam:
        assert cam.intrinsics == Intrinsics(width=W, height=H, fx=float(W), fy=float(W), cx=(W - 1) / 2, cy=(H - 1) / 2)
        assert cam.fps == FPS
        time.sleep(0.5)  # the window the camera's frame rate is measured over
        assert 0.5 * FPS < cam.measured_fps() < 1.5 * FPS


@pytest.mark.timeout(30)
def test_timestamps_are_wall_clock_capture_times(recording):
    with camera(playback_file=recording, warmup_frames=1, reconnect_after=0) as cam:
        a = cam.wait_frame(1.0)
        now = time.time()
        b = cam.wait_frame(1.0)
    assert abs(now - a.timestamp) < 60  # the wall clock's domain: a monotonic stamp would be off by the uptime
    assert b.timestamp > a.timestamp and b.index > a.index


@pytest.mark.timeout(30)
def test_latest_never_waits_and_refuses_a_stale_frame(recording):
    with camera(playback_file=recording, warmup_frames=1, max_age_s=0.2, reconnect_after=0) as cam:
        fresh = cam.latest()  # within max_age_s, or it would have raised
        drain(cam, 0.3)  # the recording ends: no more frames
        held = cam.latest(max_age_s=60)
        # No newer frame will come: a call that waited for one would hang here (the test's timeout), so
        # handing the held frame over again is what "never waits" looks like.
        assert cam.latest(max_age_s=60).index == held.index >= fresh.index
        time.sleep(0.3)  # the last frame ages past max_age_s: its staleness is what is under test
        with pytest.raises(RobotFault) as e:
            cam.latest()
        assert e.value.kind == "camera_stall" and "old" in str(e.value)
        assert cam.latest(max_age_s=60).index == held.index  # an explicit, larger limit accepts it


@pytest.mark.timeout(30)
def test_wait_frame_returns_only_newer_frames_and_times_out_as_camera_stall(recording):
    with camera(playback_file=recording, warmup_frames=1, reconnect_after=0) as cam:
        a = cam.wait_frame(1.0)
        b = cam.wait_frame(1.0)
        assert b.index > a.index
        drain(cam, 0.3)
        t = time.monotonic()
        with pytest.raises(RobotFault) as e:
            cam.wait_frame(0.4)
        waited = time.monotonic() - t
    assert e.value.kind == "camera_stall"
    assert 0.35 < waited < 0.4 + 5.0  # it waited its timeout, then gave up (room for a loaded machine)


@pytest.mark.timeout(30)
def test_dropped_frames_show_as_gaps_in_the_index(gappy_recording):
    with camera(playback_file=gappy_recording, warmup_frames=1, reconnect_after=0, real_time=True) as cam:
        frames = [cam.latest(max_age_s=None)] + drain(cam, 0.4)
    offset = int(frames[0].color[0, 0, 0]) - frames[0].index  # 0 unless the very first frame was lost
    assert offset in (0, 1), "frame indices must count from the first frame after open"
    assert all(int(f.color[0, 0, 0]) - f.index == offset for f in frames), "index must follow the frame number"
    seen = [f.index + offset for f in frames]
    for skipped in (4, 5, 9):
        assert skipped not in seen
    assert cam.stats["dropped"] >= 3


@pytest.mark.timeout(30)
def test_warm_up_that_never_completes_fails_open_within_its_timeout(gappy_recording):
    cam = camera(playback_file=gappy_recording, warmup_frames=500, reconnect_after=0)
    t = time.monotonic()
    with pytest.raises(RobotFault) as e:
        cam.open(timeout_s=1.5)
    assert e.value.kind == "camera_stall" and "warm-up" in str(e.value)
    assert time.monotonic() - t < 1.5 + 5.0  # gave up at its timeout (room for a loaded machine), never hung


@pytest.mark.timeout(60)
def test_failed_waits_trigger_a_reconnect_and_a_failed_reconnect_is_a_clear_stall(gappy_recording, tmp_path):
    source = tmp_path / "cam.db3"
    source.write_bytes(gappy_recording.read_bytes())
    cam = camera(playback_file=source, warmup_frames=1, wait_timeout_s=0.2, reconnect_after=2, max_reconnects=1)
    with cam:
        first_run = [cam.latest(max_age_s=None)] + drain(cam, 0.3)
        # The stream stopped; after 2 failed waits (0.4 s) the driver restarts the pipeline (the
        # playback starts over) and frames flow again, with indices still increasing.
        after = cam.wait_frame(2.0)
        assert cam.stats["reconnects"] == 1 and cam.stats["failed_waits"] >= 2
        assert after.index > first_run[-1].index
        # Now the source disappears: the next reconnect fails and every read says why.
        source.unlink()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                cam.wait_frame(0.5)
            except RobotFault as e:
                if "reconnect failed" in str(e):
                    break
        with pytest.raises(RobotFault) as e:
            cam.latest(max_age_s=60)
        assert e.value.kind == "camera_stall" and "reconnect failed" in str(e.value)


@pytest.mark.timeout(30)
def test_close_is_idempotent_and_the_camera_can_be_reopened(recording):
    cam = camera(playback_file=recording, warmup_frames=1, reconnect_after=0)
    cam.open(timeout_s=5)
    cam.close()
    cam.close()
    cam.open(timeout_s=5)
    assert cam.wait_frame(1.0).color.shape == (H, W, 3)
    cam.close()


@pytest.mark.timeout(30)
def test_probe_reports_resolution_fps_and_drops_of_a_recording(recording):
    report = probe_camera(playback_file=str(recording), seconds=0.5)
    by_name = {c.name: c for c in report.checks}
    assert by_name["open"].ok and by_name["fps"].ok, report.lines()
    assert f"{W}x{H}" in by_name["resolution"].detail
    assert by_name["usb"].ok is None  # not knowable for a recording


@pytest.mark.timeout(30)
def test_probe_of_an_absent_camera_fails_at_open_with_a_hint():
    report = probe_camera("999999999998", seconds=0.2, timeout_s=3)
    assert not report.ok
    assert report.checks[0].name == "open" and report.checks[0].ok is False
    assert "USB" in report.checks[0].hint
