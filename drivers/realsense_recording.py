"""Synthetic RealSense recordings: frames made by pyrealsense2's own software_device, written by its
recorder (.db3), so tests and demos play a known stream back through the real driver's pipeline
(drivers.realsense) on machines with no camera."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from drivers.realsense import _rs
from rlhw.errors import ConfigError


def write_synthetic_recording(
    path: str | Path,
    serial: str = "000000000001",
    frames: int = 30,
    width: int = 64,
    height: int = 48,
    fps: int = 30,
    depth: bool = True,
    skip: tuple[int, ...] = (),
) -> Path:
    """Record ``frames`` synthetic frames with pyrealsense2's software_device + recorder (.db3).

    Frame i is filled with color value ``i % 256`` and depth ``500 + i`` mm, so a reader can check
    order and identity; frame numbers are ``i + 1``. Indices in ``skip`` are left out, as a camera
    that dropped them would. Frames are injected at ``fps`` in wall-clock time because the recorder
    stamps what it writes with the arrival time: a burst plays back as a burst, and the pipeline's
    syncer then drops most of it.
    """
    rs = _rs()
    path = Path(path)
    if path.suffix != ".db3":
        raise ConfigError("path", f"pyrealsense2 2.59 records .db3 files; got {path.name}")
    dev, sensors = _software_device(rs, serial, width, height, fps, depth)
    recorder = rs.recorder(str(path), dev)
    rec_sensors = recorder.query_sensors()
    for s in rec_sensors:
        s.open(s.get_stream_profiles())
        s.start(rs.frame_queue(frames + 8))
    t0 = time.time()
    for i in range(frames):
        time.sleep(max(0.0, t0 + i / fps - time.time()))
        if i in skip:
            continue
        stamp = time.time() * 1000.0
        for sensor, profile, bpp in sensors:
            f = rs.software_video_frame()
            if bpp == 3:
                f.pixels = np.full((height, width, 3), i % 256, np.uint8)
            else:
                f.pixels = np.full((height, width), 500 + i, np.uint16)
                f.depth_units = 0.001
            f.bpp, f.stride = bpp, width * bpp
            f.timestamp, f.domain, f.frame_number = stamp, rs.timestamp_domain.system_time, i + 1
            f.profile = profile.as_video_stream_profile()
            sensor.on_video_frame(f)
    for s in rec_sensors:
        s.stop()
        s.close()
    del rec_sensors, recorder  # the recorder finishes the file when released
    return path


def _software_device(rs, serial: str, width: int, height: int, fps: int, depth: bool):
    """A software_device with a color stream (and an aligned depth stream): (device, [(sensor, profile, bpp)])."""
    dev = rs.software_device()
    dev.register_info(rs.camera_info.serial_number, serial)
    dev.register_info(rs.camera_info.name, "Synthetic RealSense (software_device)")
    intr = rs.intrinsics()
    intr.width, intr.height = width, height
    intr.fx = intr.fy = float(width)
    intr.ppx, intr.ppy = (width - 1) / 2.0, (height - 1) / 2.0
    intr.model = rs.distortion.none

    def stream(kind, uid, fmt, bpp):
        vs = rs.video_stream()
        vs.type, vs.index, vs.uid = kind, 0, uid
        vs.width, vs.height, vs.fps, vs.bpp, vs.fmt = width, height, fps, bpp, fmt
        vs.intrinsics = intr
        return vs

    color_sensor = dev.add_sensor("RGB Camera")
    color_profile = color_sensor.add_video_stream(stream(rs.stream.color, 1, rs.format.rgb8, 3))
    sensors = [(color_sensor, color_profile, 3)]
    if depth:
        depth_sensor = dev.add_sensor("Stereo Module")
        depth_profile = depth_sensor.add_video_stream(stream(rs.stream.depth, 2, rs.format.z16, 2))
        depth_sensor.add_read_only_option(rs.option.depth_units, 0.001)
        identity = rs.extrinsics()
        identity.rotation, identity.translation = [1, 0, 0, 0, 1, 0, 0, 0, 1], [0, 0, 0]
        depth_profile.register_extrinsics_to(color_profile, identity)
        sensors.append((depth_sensor, depth_profile, 2))
    return dev, sensors
