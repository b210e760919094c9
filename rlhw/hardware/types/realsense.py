"""Intel RealSense depth cameras, named by serial number.

A type of its own so that a camera-only node group can be placed. The same serial may also appear
in a Franka entry's ``camera_serials``; this entry then states the stream settings.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import ClassVar

from pydantic import Field, field_validator

from rlhw.hardware.registry import HardwareEntry, HardwareType, register_hardware
from rlhw.schema import StrictModel, as_text


class RealSenseOptions(StrictModel):
    """How the realsense driver streams one camera: the ONE schema of its options.

    Validated here, at the config edge (a RealSense entry under ``hardware.configs`` is one, see
    `RealSenseConfig`); `drivers.realsense.RealSenseCamera` receives this object as it is and checks
    nothing again. A camera no entry declares streams with these defaults.
    """

    width: int = Field(640, gt=0, le=4096, description="color (and aligned depth) width in pixels")
    height: int = Field(480, gt=0, le=4096, description="color (and aligned depth) height in pixels")
    fps: int = Field(30, gt=0, le=300, description="frames per second the camera is asked for")
    depth: bool = Field(False, description="also stream depth aligned to color")
    warmup_frames: int = Field(15, ge=0, le=1000, description="frames to wait for when the camera opens")
    max_age_s: float | None = Field(
        0.5, gt=0, allow_inf_nan=False, description="a newer frame than this is required by reads (s); null: any age"
    )
    wait_timeout_s: float = Field(1.0, gt=0, le=60, allow_inf_nan=False, description="bound on one wait for frames")
    reconnect_after: int = Field(
        3, ge=0, le=1000, description="restart the pipeline after this many failed waits in a row; 0 never"
    )
    max_reconnects: int = Field(3, ge=0, le=1000, description="give up after this many failed restarts in a row")
    reset_timeout_s: float = Field(
        10.0, gt=0, le=120, allow_inf_nan=False, description="bound on a camera's return after a hardware reset"
    )


class RealSenseConfig(HardwareEntry, RealSenseOptions):
    """One declared camera: its node, its serial, and its `RealSenseOptions` (the entry is one: the
    driver receives the entry itself)."""

    identity_field: ClassVar[str] = "serial"
    serial: str = Field(description="the camera's serial number (quote it: it is not a number)")

    @field_validator("serial", mode="before")
    @classmethod
    def _serial(cls, value):
        return as_text(value)


@register_hardware
class RealSense(HardwareType):
    name: ClassVar[str] = "RealSense"
    entry_model: ClassVar[type[HardwareEntry]] = RealSenseConfig

    @classmethod
    def probe(cls, entries: Sequence[HardwareEntry], timeout_s: float) -> dict[str, str | None]:
        found, problem = connected_serials(timeout_s)
        out: dict[str, str | None] = {}
        for e in entries:
            sid = e.identity()
            if problem is not None:
                out[sid] = problem
            elif sid not in found:
                listed = ", ".join(found) if found else "none"
                out[sid] = f"camera {sid} is not connected (connected RealSense serials: {listed})"
            else:
                out[sid] = None
        return out


def connected_serials(timeout_s: float) -> tuple[list[str], str | None]:
    """Serials of the RealSense devices on this node, or a problem string (bounded by timeout_s)."""
    result: dict[str, object] = {}

    def query() -> None:
        try:
            import pyrealsense2 as rs  # optional on nodes without cameras
        except Exception as e:  # ImportError, or a missing libusb
            result["problem"] = f"pyrealsense2 is not usable on this node: {e}"
            return
        try:
            ctx = rs.context()
            result["serials"] = [d.get_info(rs.camera_info.serial_number) for d in ctx.query_devices()]
        except Exception as e:
            result["problem"] = f"listing RealSense devices failed: {e}"

    t = threading.Thread(target=query, name="realsense-query", daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        return [], f"listing RealSense devices took longer than {timeout_s:g} s (USB hub hung?)"
    if "problem" in result:
        return [], str(result["problem"])
    return list(result.get("serials", [])), None
