"""Checks of one camera: found by serial (and on which USB link), opens, resolution, measured fps
against the configured fps, frame age (latency), and dropped or stalled frames over a window.

Real cameras run on their own clock: the check waits for each new frame and measures on the
sensor's timestamps. A simulated camera has no clock: frames exist only when the simulated arm
advances, so the check advances it by one frame period per frame (simulated time; the arm holds
its posture, no target is sent). For a simulated camera the render rate is reported, not judged:
its fps and latency rows are informational (optional), while stalls and dropped frames still fail.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from rlhw.config.env import EnvConfig
from rlhw.errors import FaultKind, RobotFault
from rlhw.smoke.bounded import Outcome, TargetRun, call_bounded, failed, passed, skipped
from rlhw.smoke.hints import CAMERA_MISSING, USB2_LINK
from rlhw.smoke.options import SmokeOptions
from rlhw.smoke.targets import CameraTarget

#: Real cameras must deliver at least this fraction of the configured fps.
MIN_FPS_FRACTION = 0.9
#: More dropped frames than this fraction of the expected ones fails the check.
MAX_DROP_FRACTION = 0.01


def realsense_link(serial: str, timeout_s: float) -> tuple[bool, str, str]:
    """(found, usb type, problem) for a RealSense serial on this node, bounded by ``timeout_s``."""

    def query():
        import pyrealsense2 as rs

        ctx = rs.context()
        found = []
        for dev in ctx.query_devices():
            sid = dev.get_info(rs.camera_info.serial_number)
            found.append(sid)
            if sid == serial:
                usb = ""
                if dev.supports(rs.camera_info.usb_type_descriptor):
                    usb = dev.get_info(rs.camera_info.usb_type_descriptor)
                return True, usb, ""
        listed = ", ".join(found) if found else "none"
        return False, "", f"camera {serial} is not connected (connected RealSense serials: {listed})"

    try:
        return call_bounded(query, timeout_s, "realsense-query")
    except ImportError as e:
        return False, "", f"pyrealsense2 is not usable on this node: {e}"


def check_camera(
    run: TargetRun,
    camera_factory: Callable[[], Any],
    target: CameraTarget,
    options: SmokeOptions,
    env_config: EnvConfig,
    advance: Callable[[float], None] | None = None,
) -> None:
    """Run the camera checks. ``advance(dt)`` steps the simulated arm a simulated camera renders."""
    timeout = options.timeout_s
    simulated = advance is not None
    _detection_checks(run, target, timeout)
    holder: dict[str, Any] = {}
    run.run("open", lambda: _open_check(holder, camera_factory, target, timeout, simulated))
    cam = holder.get("cam")
    fps_cfg = float(getattr(cam, "fps", target.fps) or target.fps) if cam is not None else target.fps
    next_frame = _frame_source(cam, advance, 1.0 / fps_cfg, timeout)
    run.run("resolution", lambda: _resolution_check(next_frame, target))
    stream: dict[str, Any] = {}
    run.run(
        "stream",
        lambda: _stream_check(stream, next_frame, target, options, fps_cfg, simulated),
        timeout_s=options.window_s + 2 * timeout,
    )
    # fps, frame age and drops each judge the same stream: one failing does not hide the others
    run.run("fps", lambda: _fps_check(stream, fps_cfg, simulated), required=not simulated, needs_ok=False)
    run.run(
        "frame_age",
        lambda: _frame_age_check(stream, cam, env_config, simulated),
        required=not simulated,
        needs_ok=False,
    )
    run.run("dropped_frames", lambda: _dropped_check(stream, options.window_s, simulated), needs_ok=False)
    if cam is not None and run.hung is None:
        try:
            run.call(cam.close, max(2.0, timeout))  # on the thread that opened it (GL contexts are per thread)
        except Exception:
            pass
    run.close()


def _detection_checks(run: TargetRun, target: CameraTarget, timeout: float) -> None:
    """A recording stands in for the device; a RealSense is looked up by serial, with its USB link."""
    if target.playback_file:
        run.note(
            "detected",
            passed("recording", f"no live device: checking the pipeline on {target.playback_file}"),
            required=True,
        )
    elif target.driver == "realsense":
        out = run.run("detected", lambda: _detected_check(target, timeout))
        usb = out.data or ""
        if out.status == "PASS":
            if usb.startswith("2"):
                run.note(
                    "usb_link",
                    failed(
                        f"USB {usb} link: expect dropped frames at {target.width}x{target.height}@{target.fps:g}",
                        f"USB {usb}",
                        hint=USB2_LINK,
                    ),
                )
            elif usb:
                run.note("usb_link", passed(f"USB {usb}", "USB 3 link"))


def _detected_check(target: CameraTarget, timeout: float) -> Outcome:
    found, usb, problem = realsense_link(target.serial, min(timeout, 5.0))
    if not found:
        return failed(problem, "not found", hint=None if "pyrealsense2" in problem else CAMERA_MISSING)
    return passed(f"USB {usb or '?'}", "found by serial", usb=usb, data=usb)


def _open_check(
    holder: dict[str, Any], camera_factory: Callable[[], Any], target: CameraTarget, timeout: float, simulated: bool
) -> Outcome:
    """Make and open the camera (kept in ``holder["cam"]`` even when opening fails, to close it)."""
    t = time.perf_counter()
    cam = camera_factory()
    holder["cam"] = cam
    cam.open(timeout_s=timeout)
    dt = time.perf_counter() - t
    what = f"opened by serial {target.serial}" if not simulated else f"simulated {target.driver} camera opened"
    if target.playback_file:
        what = "recording opened (pyrealsense2 playback)"
    return passed(f"{dt:.2f} s", what, open_s=round(dt, 4))


def _frame_source(cam, advance: Callable[[float], None] | None, period: float, timeout: float) -> Callable[[], Any]:
    """The next frame: a real camera's next one on its own clock, a simulated one's after advancing
    its arm by one frame period."""

    def next_frame():
        if advance is not None:
            advance(period)
            return cam.latest()
        return cam.wait_frame(timeout_s=min(timeout, max(1.0, 5 * period)))

    return next_frame


def _resolution_check(next_frame: Callable[[], Any], target: CameraTarget) -> Outcome:
    f = next_frame()
    h, w = f.color.shape[:2]
    want = (target.height, target.width)
    if (h, w) != want:
        return failed(
            f"frames are {w}x{h}, configured {target.width}x{target.height}",
            f"{w}x{h}",
            hint="set width/height to a mode the camera supports (rs-enumerate-devices lists them)",
        )
    depth = "" if f.depth is None else f" + depth {f.depth.shape[1]}x{f.depth.shape[0]}"
    return passed(f"{w}x{h}{depth}", f"configured {target.width}x{target.height}")


def _stream_check(
    stream: dict[str, Any],
    next_frame: Callable[[], Any],
    target: CameraTarget,
    options: SmokeOptions,
    fps_cfg: float,
    simulated: bool,
) -> Outcome:
    """Watch the stream for the window; leaves its frames and rates in ``stream`` for the checks
    that judge it (fps, frame age, drops)."""
    frames = _collect_frames(next_frame, target, options, fps_cfg, simulated)
    stream["frames"] = frames
    if len(frames) < 2:
        return failed(f"only {len(frames)} frame(s) in {options.window_s:g} s", f"{len(frames)} frames")
    wall = frames[-1][0] - frames[0][0]
    sensor = frames[-1][1] - frames[0][1]
    stream["wall_fps"] = (len(frames) - 1) / wall if wall > 0 else float("inf")
    stream["sensor_fps"] = (len(frames) - 1) / sensor if sensor > 0 else float("inf")
    expected = frames[-1][2] - frames[0][2] + 1
    span = "simulated " if simulated else ""
    return passed(
        f"{len(frames)} frames in {options.window_s:g} {span}s",
        f"frame indices {frames[0][2]}..{frames[-1][2]}",
        frames=len(frames),
        expected=expected,
    )


def _collect_frames(
    next_frame: Callable[[], Any], target: CameraTarget, options: SmokeOptions, fps_cfg: float, simulated: bool
) -> list[tuple[float, float, int]]:
    """(received, sensor timestamp, index) of each new frame; three reads without a new one is a stall."""
    frames = []
    # A real camera is watched for the window in wall time; a simulated one for the window in
    # simulated time (window * fps frames), bounded in wall time by the check's timeout.
    t_end = time.monotonic() + (options.window_s if not simulated else options.window_s + options.timeout_s)
    wanted = max(2, int(round(options.window_s * fps_cfg))) if simulated else None
    stale = 0
    last_index = None
    while time.monotonic() < t_end and (wanted is None or len(frames) < wanted):
        f = next_frame()
        now = time.time()
        if last_index is not None and f.index <= last_index:
            stale += 1
            if stale >= 3:
                raise RobotFault(
                    FaultKind.CAMERA_STALL,
                    f"camera {target.serial}: no new frame in {stale} reads after frame {last_index} (stalled)",
                )
            continue
        stale = 0
        last_index = f.index
        frames.append((now, f.timestamp, f.index))
    return frames


def _stream_missing(stream: dict[str, Any]) -> Outcome | None:
    return None if "frames" in stream else skipped("skipped: stream failed")


def _fps_check(stream: dict[str, Any], fps_cfg: float, simulated: bool) -> Outcome:
    missing = _stream_missing(stream)
    if missing:
        return missing
    if simulated:
        rate = stream["wall_fps"]
        value = f"{rate:.1f} fps rendered"
        detail = (
            f"simulated camera renders on demand (configured {fps_cfg:g} fps in simulated time); "
            f"{'keeps up with' if rate >= fps_cfg else 'slower than'} real time on this machine"
        )
        out = passed(value, detail, fps=round(rate, 2), configured_fps=fps_cfg)
        if rate < MIN_FPS_FRACTION * fps_cfg:
            out = failed(
                detail,
                value,
                hint="software rendering is slow: use a GPU (MUJOCO_GL=egl) or smaller images",
                fps=round(rate, 2),
            )
        return out
    rate = stream["sensor_fps"]
    value = f"{rate:.1f} / {fps_cfg:g} fps"
    if rate < MIN_FPS_FRACTION * fps_cfg:
        return failed(
            f"measured {rate:.1f} fps on the camera's clock, configured {fps_cfg:g} fps",
            value,
            fps=round(rate, 2),
            configured_fps=fps_cfg,
            hint=USB2_LINK + "; or lower fps/resolution, or fix auto-exposure in the dark",
        )
    return passed(value, "measured on the camera's timestamps", fps=round(rate, 2), configured_fps=fps_cfg)


def _frame_age_check(stream: dict[str, Any], cam, env_config: EnvConfig, simulated: bool) -> Outcome:
    missing = _stream_missing(stream)
    if missing:
        return missing
    ages = [(recv - stamp) * 1e3 for recv, stamp, _ in stream["frames"]]
    limit = env_config.safety.camera_max_age_s
    fresh = cam.latest(max_age_s=limit)  # raises camera_stall when the newest frame is too old
    p50, worst = statistics.median(ages), max(ages)
    value = f"p50 {p50:.1f} ms, max {worst:.1f} ms"
    if simulated:
        return passed(value, "simulated camera: frame time is simulated time (informational)", p50_ms=round(p50, 2))
    if worst > limit * 1e3:
        return failed(
            f"frame age up to {worst:.0f} ms, over env.safety.camera_max_age_s={limit:g} s",
            value,
            hint="the host is late reading frames: check CPU load and the USB link",
            p50_ms=round(p50, 2),
            max_ms=round(worst, 2),
        )
    return passed(
        value, f"newest frame #{fresh.index} within {limit:g} s", p50_ms=round(p50, 2), max_ms=round(worst, 2)
    )


def _dropped_check(stream: dict[str, Any], window_s: float, simulated: bool) -> Outcome:
    missing = _stream_missing(stream)
    if missing:
        return missing
    frames = stream["frames"]
    expected = frames[-1][2] - frames[0][2] + 1
    lost = expected - len(frames)
    fraction = lost / expected if expected else 0.0
    value = f"{lost} of {expected}"
    if lost > 0 and fraction > MAX_DROP_FRACTION:
        return failed(
            f"{lost} of {expected} frames dropped ({fraction:.1%}) in {window_s:g} s",
            value,
            hint=USB2_LINK if not simulated else "",
            dropped=lost,
            expected=expected,
        )
    return passed(value, f"{fraction:.1%} dropped", dropped=lost, expected=expected)


def skip_camera(run: TargetRun, reason: str) -> None:
    run.note("open", skipped(reason), required=True)
