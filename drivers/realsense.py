"""The `realsense` camera driver (pyrealsense2): one pipeline per serial, background capture.

A capture thread waits on the pipeline (bounded waits) and keeps only the newest frame, so the
control loop never waits for the sensor: `latest()` returns at once and refuses a stale frame;
`wait_frame()` waits, bounded, for a newer one. After ``reconnect_after`` consecutive failed waits
the thread restarts the pipeline, hardware-resetting a live camera first (the usual cure for a
RealSense that stopped streaming); after ``max_reconnects`` failed restarts in a row it gives up
and every read raises ``RobotFault(FaultKind.CAMERA_STALL)`` with the reason.

The frame source is a live camera (``serial``) or a recording (``playback_file``, the ``.db3``
files pyrealsense2 2.59's recorder writes): the same pipeline code path either way. Without a
camera, `drivers.realsense_recording.write_synthetic_recording` makes such a file from pyrealsense2's own software_device and
recorder, which is how the tests run this driver.

``Frame.index`` follows the device's frame numbers, so a gap is a dropped frame, and it keeps
increasing across reconnects. ``Frame.timestamp`` is the device's host-synced capture time when it
has one (system/global time domain) and the arrival time otherwise (hardware clock, playback).
"""

from __future__ import annotations

import collections
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

from drivers.probe_report import ProbeReport
from rlhw.errors import ConfigError, FaultKind, RobotFault
from rlhw.hardware.types.realsense import RealSenseOptions
from rlhw.robot.build import CameraBuild
from rlhw.robot.camera import Camera, Frame, Intrinsics
from rlhw.robot.registry import register_camera


def _rs():
    try:
        import pyrealsense2 as rs
    except ImportError as e:  # libusb missing is the usual cause (FIELD-NOTES)
        raise RobotFault(
            FaultKind.NOT_CONNECTED,
            f"pyrealsense2 cannot be imported ({e}); install pyrealsense2 and the system libusb (Debian: libusb-1.0-0)",
        ) from None
    return rs


#: serials of live cameras open in this process: one pipeline per camera.
_open_serials: set[str] = set()
_open_lock = threading.Lock()


def list_serials(context: Any = None) -> list[str]:
    """Serial numbers of the RealSense cameras attached to this machine (empty without one)."""
    rs = _rs()
    ctx = context or rs.context()
    return sorted(d.get_info(rs.camera_info.serial_number) for d in ctx.query_devices())


@register_camera("realsense")
class RealSenseCamera(Camera):
    """One RealSense camera (or recording). Color is RGB8; ``depth=True`` adds depth aligned to color (mm)."""

    def __init__(
        self,
        serial: str = "",
        options: RealSenseOptions | None = None,
        *,
        playback_file: str | Path | None = None,
        real_time: bool = True,
        loop: bool = False,
        context: Any = None,
    ):
        """``options``: the validated stream settings (`RealSenseOptions`; a RealSense hardware entry is one),
        defaults without. The frame source is the live camera ``serial`` or the recording ``playback_file``
        (``real_time``: paced as recorded; ``loop``: from the start again at its end)."""
        if playback_file is None and not str(serial).strip():
            raise ConfigError(
                "serial", "a RealSense camera needs its serial number (see list_serials()) or a playback_file"
            )
        if playback_file is not None and not Path(playback_file).is_file():
            raise ConfigError("playback_file", f"{playback_file} does not exist (pyrealsense2 2.59 records .db3 files)")
        self.options = RealSenseOptions() if options is None else options
        self.serial = str(serial).strip()
        self._fps = self.options.fps  # what the stream delivers, once it has started
        self.playback_file = str(playback_file) if playback_file is not None else None
        self.real_time = real_time
        self.loop = loop
        self._context = context
        self._init_capture_state()

    @classmethod
    def from_plan(cls, build: CameraBuild) -> RealSenseCamera:
        """The camera ``build.name`` (its serial) with the options of the hardware entry that declares it,
        the defaults when none does."""
        options = build.hardware if isinstance(build.hardware, RealSenseOptions) else None
        return cls(build.name, options, playback_file=build.playback_file)

    def _init_capture_state(self) -> None:
        """What the capture thread shares with the readers (under ``_cond``) and its pipeline."""
        self._cond = threading.Condition()
        self._latest: Frame | None = None
        self._last_returned = -1
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._started = threading.Event()
        self._fault: str | None = None
        self._pipe = None
        self._profile = None
        self._intrinsics: Intrinsics | None = None
        self._last_fn: int | None = None
        self._claimed = False
        self._arrivals: collections.deque[float] = collections.deque(maxlen=120)
        self.stats = {"frames": 0, "dropped": 0, "failed_waits": 0, "reconnects": 0, "hardware_resets": 0}

    # -- lifecycle -------------------------------------------------------------------------------
    def open(self, timeout_s: float = 10.0) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        if not self.playback_file:
            with _open_lock:
                if self.serial in _open_serials:
                    raise ConfigError(
                        "serial",
                        f"camera {self.serial} is already open in this process (one pipeline per camera); close the other RealSenseCamera first",
                    )
                _open_serials.add(self.serial)
            self._claimed = True
        self._stopping.clear()
        self._started.clear()
        self._fault = None
        self._thread = threading.Thread(target=self._run, name=f"realsense-{self.serial or 'playback'}", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        if not self._started.wait(timeout_s):
            self.close()
            raise RobotFault(FaultKind.NOT_CONNECTED, f"camera {self.name}: pipeline did not start within {timeout_s}s")
        if self._fault is not None:
            fault = self._fault
            self.close()
            raise RobotFault(FaultKind.NOT_CONNECTED, fault)
        with self._cond:
            ok = self._cond.wait_for(
                lambda: self.stats["frames"] >= max(1, self.options.warmup_frames) or self._fault is not None,
                max(0.0, deadline - time.monotonic()),
            )
        if not ok or self._fault is not None:
            got, fault = self.stats["frames"], self._fault
            self.close()
            raise RobotFault(
                FaultKind.CAMERA_STALL,
                f"camera {self.name}: {got} of {max(1, self.options.warmup_frames)} warm-up frames within {timeout_s}s"
                + (f" ({fault})" if fault else "; check the USB cable/port (USB3) and that no other process uses it"),
            )

    def close(self) -> None:
        self._stopping.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self.options.wait_timeout_s + 1.0)  # a try_wait_for_frames() at most
        self._thread = None
        self._stop_pipeline()
        if self._claimed:
            with _open_lock:
                _open_serials.discard(self.serial)
            self._claimed = False

    @property
    def name(self) -> str:
        return self.serial or Path(self.playback_file or "?").name

    # -- capture thread ------------------------------------------------------------------------------
    def _config(self, rs):
        cfg = rs.config()
        if self.playback_file:
            cfg.enable_device_from_file(self.playback_file, repeat_playback=self.loop)
            cfg.enable_stream(rs.stream.color)
            if self.options.depth:
                cfg.enable_stream(rs.stream.depth)
        else:
            cfg.enable_device(self.serial)
            cfg.enable_stream(rs.stream.color, self.options.width, self.options.height, rs.format.rgb8, self._fps)
            if self.options.depth:
                cfg.enable_stream(rs.stream.depth, self.options.width, self.options.height, rs.format.z16, self._fps)
        return cfg

    def _start_pipeline(self, rs) -> None:
        ctx = self._context or rs.context()
        if not self.playback_file:
            attached = list_serials(ctx)
            if self.serial not in attached:  # fail fast: pipeline.start() would retry for ~15 s
                raise RuntimeError(
                    f"no RealSense with serial {self.serial} is attached; connected serials: {attached or 'none'}"
                )
        pipe = rs.pipeline(ctx)
        try:
            profile = pipe.start(self._config(rs))
        except RuntimeError as e:
            if self.playback_file:
                raise RuntimeError(f"cannot play {self.playback_file}: {e}") from None
            raise RuntimeError(
                f"no RealSense with serial {self.serial} can stream {self.options.width}x{self.options.height}@{self._fps} "
                f"({e}); connected serials: {list_serials(ctx) or 'none'}"
            ) from None
        device = profile.get_device()
        if self.playback_file:
            device.as_playback().set_real_time(self.real_time)
            file_serial = device.get_info(rs.camera_info.serial_number)
            if self.serial and self.serial != file_serial:
                pipe.stop()
                raise RuntimeError(f"{self.playback_file} was recorded from camera {file_serial}, not {self.serial}")
            self.serial = self.serial or file_serial
        color = profile.get_stream(rs.stream.color).as_video_stream_profile()
        i = color.get_intrinsics()
        self._intrinsics = Intrinsics(width=i.width, height=i.height, fx=i.fx, fy=i.fy, cx=i.ppx, cy=i.ppy)
        self._fps = color.fps()
        self._depth_scale_mm = device.first_depth_sensor().get_depth_scale() * 1000.0 if self.options.depth else 1.0
        self._align = rs.align(rs.stream.color) if self.options.depth else None
        self._pipe, self._profile = pipe, profile

    def _stop_pipeline(self) -> None:
        pipe, self._pipe = self._pipe, None
        if pipe is not None:
            try:
                pipe.stop()
            except RuntimeError:
                pass

    def _run(self) -> None:
        rs = _rs()
        try:
            self._start_pipeline(rs)
        except Exception as e:
            self._fault = str(e)
            self._started.set()
            return
        self._started.set()
        if self._stopping.is_set():  # open() gave up while the pipeline was starting
            self._stop_pipeline()
            return
        failures = reconnects_in_a_row = 0
        timeout_ms = int(self.options.wait_timeout_s * 1000)
        while not self._stopping.is_set():
            try:
                ok, frames = self._pipe.try_wait_for_frames(timeout_ms)
            except RuntimeError:
                ok, frames = False, None
            if not ok:
                failures += 1
                self.stats["failed_waits"] += 1
                if (
                    self.options.reconnect_after
                    and failures >= self.options.reconnect_after
                    and not self._stopping.is_set()
                ):
                    if reconnects_in_a_row >= self.options.max_reconnects:
                        self._give_up(
                            f"no frames after {reconnects_in_a_row} reconnects; last: {failures} waits of {self.options.wait_timeout_s}s failed"
                        )
                        return
                    reconnects_in_a_row += 1
                    failures = 0
                    try:
                        self._reconnect(rs)
                    except Exception as e:
                        self._give_up(f"reconnect failed: {e}")
                        return
                continue
            failures = reconnects_in_a_row = 0
            self._publish(frames)
        self._stop_pipeline()

    def _publish(self, frames) -> None:
        arrival = time.time()
        if self._align is not None:
            frames = self._align.process(frames)
        color = frames.get_color_frame()
        if not color:
            return
        image = np.asanyarray(color.get_data()).copy()
        depth = None
        if self.options.depth:
            d = frames.get_depth_frame()
            if d:
                depth = np.asanyarray(d.get_data())
                depth = (
                    depth.copy()
                    if abs(self._depth_scale_mm - 1.0) < 1e-6
                    else np.clip(np.rint(depth * self._depth_scale_mm), 0, 65535).astype(np.uint16)
                )
        fn = int(color.get_frame_number())
        with self._cond:
            if self._latest is None:
                index = 0
            elif self._last_fn is not None and fn > self._last_fn:
                gap = fn - self._last_fn
                self.stats["dropped"] += gap - 1
                index = self._latest.index + gap
            else:  # counter restarted (reconnect, looped playback)
                index = self._latest.index + 1
            self._last_fn = fn
            self._latest = Frame(color=image, timestamp=self._capture_time(color, arrival), index=index, depth=depth)
            self.stats["frames"] += 1
            self._arrivals.append(arrival)
            self._cond.notify_all()

    def _capture_time(self, frame, arrival: float) -> float:
        if self.playback_file:
            return arrival
        rs = _rs()
        domain = frame.get_frame_timestamp_domain()
        if domain in (rs.timestamp_domain.system_time, rs.timestamp_domain.global_time):
            ts = frame.get_timestamp() / 1000.0
            if abs(ts - arrival) < 5.0:
                return ts
        return arrival

    def _reconnect(self, rs) -> None:
        self.stats["reconnects"] += 1
        self._stop_pipeline()
        if not self.playback_file:
            ctx = self._context or rs.context()
            for dev in ctx.query_devices():
                if dev.get_info(rs.camera_info.serial_number) == self.serial:
                    dev.hardware_reset()
                    self.stats["hardware_resets"] += 1
                    break
            deadline = time.monotonic() + self.options.reset_timeout_s
            time.sleep(1.0)  # the camera drops off the bus, then re-enumerates
            while self.serial not in list_serials(ctx):
                if time.monotonic() > deadline or self._stopping.is_set():
                    raise RuntimeError(
                        f"camera {self.serial} did not come back within {self.options.reset_timeout_s}s of a hardware reset"
                    )
                time.sleep(0.2)
        self._start_pipeline(rs)

    def _give_up(self, reason: str) -> None:
        with self._cond:
            self._fault = f"camera {self.name}: {reason}"
            self._cond.notify_all()
        self._stop_pipeline()

    # -- reading ------------------------------------------------------------------------------------
    def latest(self, max_age_s: float | None = None) -> Frame:
        limit = self.options.max_age_s if max_age_s is None else max_age_s
        with self._cond:
            frame, fault = self._latest, self._fault
        if fault is not None:
            raise RobotFault(FaultKind.CAMERA_STALL, fault)
        if frame is None:
            raise RobotFault(FaultKind.CAMERA_STALL, f"camera {self.name}: no frame yet (open() first?)")
        age = time.time() - frame.timestamp
        if limit is not None and age > limit:
            raise RobotFault(
                FaultKind.CAMERA_STALL,
                f"camera {self.name}: newest frame is {age * 1e3:.0f} ms old (limit {limit * 1e3:.0f} ms)",
            )
        self._last_returned = max(self._last_returned, frame.index)
        return frame

    def wait_frame(self, timeout_s: float = 1.0) -> Frame:
        with self._cond:
            ok = self._cond.wait_for(
                lambda: (
                    self._fault is not None or (self._latest is not None and self._latest.index > self._last_returned)
                ),
                timeout_s,
            )
            frame, fault = self._latest, self._fault
        if fault is not None:
            raise RobotFault(FaultKind.CAMERA_STALL, fault)
        if not ok or frame is None:
            raise RobotFault(
                FaultKind.CAMERA_STALL, f"camera {self.name}: no new frame within {timeout_s * 1e3:.0f} ms"
            )
        self._last_returned = frame.index
        return frame

    @property
    def intrinsics(self) -> Intrinsics:
        if self._intrinsics is None:
            raise RobotFault(
                FaultKind.NOT_CONNECTED, f"camera {self.name}: intrinsics come from the stream profile; open() first"
            )
        return self._intrinsics

    @property
    def fps(self) -> float:
        return float(self._fps)

    def measured_fps(self) -> float:
        """Frame rate over the recent arrivals (0 with fewer than two)."""
        with self._cond:
            a = list(self._arrivals)
        return (len(a) - 1) / (a[-1] - a[0]) if len(a) > 1 and a[-1] > a[0] else 0.0

    def usb_type(self) -> str | None:
        """USB type of a live camera ("3.2", "2.1", ...), None for playback or when unknown."""
        if self._profile is None or self.playback_file:
            return None
        rs = _rs()
        dev = self._profile.get_device()
        if dev.supports(rs.camera_info.usb_type_descriptor):
            return dev.get_info(rs.camera_info.usb_type_descriptor)
        return None


def probe_camera(
    serial: str = "",
    seconds: float = 3.0,
    options: RealSenseOptions | None = None,
    playback_file: str | None = None,
    timeout_s: float = 10.0,
) -> ProbeReport:
    """Smoke-test one camera: opens, resolution/intrinsics, measured vs configured fps, frame age,
    dropped frames over ``seconds``, USB type (a USB2 link cannot carry 640x480@30 color+depth).

    The camera streams with ``options`` (defaults without), but warms up on 5 frames and never restarts its
    pipeline: a probe reports a stall rather than recovering from it."""
    report = ProbeReport(serial or str(playback_file))
    options = (options or RealSenseOptions()).model_copy(update={"warmup_frames": 5, "reconnect_after": 0})
    cam = _open_for_probe(report, serial, options, playback_file, timeout_s)
    if cam is None:
        return report
    try:
        i = cam.intrinsics
        report.add("resolution", True, f"{i.width}x{i.height} fx={i.fx:.1f} fy={i.fy:.1f} cx={i.cx:.1f} cy={i.cy:.1f}")
        _probe_stream(report, cam, seconds)
        _probe_usb(report, cam)
    finally:
        cam.close()
    return report


def _open_for_probe(
    report: ProbeReport, serial: str, options: RealSenseOptions, playback_file: str | None, timeout_s: float
) -> RealSenseCamera | None:
    """The camera, open and streaming, with an ``open`` row; None (and a failed row) when it does not open."""
    try:
        cam = RealSenseCamera(serial, options, playback_file=playback_file)
    except ConfigError as e:
        report.add("open", False, str(e))
        return None
    t = time.perf_counter()
    try:
        cam.open(timeout_s=timeout_s)
    except RobotFault as e:
        report.add(
            "open",
            False,
            str(e),
            "check list_serials(), the USB cable (USB3 port), and that no other process holds the camera",
        )
        return None
    report.add("open", True, f"streaming after {time.perf_counter() - t:.2f} s")
    return cam


def _probe_stream(report: ProbeReport, cam: RealSenseCamera, seconds: float) -> None:
    """Rows ``fps``, ``dropped`` and ``frame_age`` from ``seconds`` of streaming."""
    start = dict(cam.stats)
    time.sleep(seconds)
    n = cam.stats["frames"] - start["frames"]
    dropped = cam.stats["dropped"] - start["dropped"]
    measured = n / seconds
    ok_fps = measured >= 0.9 * cam.fps
    report.add(
        "fps",
        ok_fps,
        f"{measured:.1f} measured vs {cam.fps:.0f} configured over {seconds:.1f} s",
        "" if ok_fps else "low frame rate: check USB3, lighting (auto-exposure lowers fps in the dark), CPU load",
    )
    report.add("dropped", dropped == 0, f"{dropped} dropped of {n + dropped}")
    try:
        age = time.time() - cam.latest(max_age_s=None).timestamp
        report.add("frame_age", age < 0.1, f"{age * 1e3:.0f} ms")
    except RobotFault as e:
        report.add("frame_age", False, str(e))


def _probe_usb(report: ProbeReport, cam: RealSenseCamera) -> None:
    """Row ``usb``: a live camera's link type (skipped for a recording or when the device does not say)."""
    usb = cam.usb_type()
    if usb is None:
        report.add("usb", None, "n/a (playback or not reported)")
        return
    usb2 = usb.startswith("2")
    report.add("usb", not usb2, f"USB {usb}", "camera is on a USB2 link: use a USB3 port/cable" if usb2 else "")
