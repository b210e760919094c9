"""The `Camera` interface every camera driver implements (RealSense, MuJoCo, mock).

A camera captures in the background and keeps the latest frame, so reading never waits for the
sensor: `latest` is non-blocking and refuses a stale frame; `wait_frame` waits (bounded) for a
frame newer than the last one returned.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass

import numpy as np

from rlhw.robot.build import CameraBuild, scene_camera


@dataclass(frozen=True)
class Intrinsics:
    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float


@dataclass(frozen=True)
class Frame:
    """``color`` is HxWx3 uint8 RGB; ``depth`` (optional) is HxW uint16 millimetres aligned to color.
    ``timestamp`` is wall-clock capture time (``time.time()``); ``index`` counts frames since open,
    so a gap in indices is a dropped frame."""

    color: np.ndarray
    timestamp: float
    index: int
    depth: np.ndarray | None = None


class Camera(abc.ABC):
    serial: str = ""

    @classmethod
    def from_plan(cls, build: CameraBuild) -> Camera:
        """Build this driver for one camera of an env (`rlhw.robot.factory.build_cameras` calls it). The
        default is a simulated camera's (`rlhw.robot.build.scene_camera`); a driver with hardware overrides it
        and reads its validated hardware model, ``build.hardware``."""
        return scene_camera(cls, build)

    @abc.abstractmethod
    def open(self, timeout_s: float = 10.0) -> None:
        """Start capture and warm up. Raises RobotFault(FaultKind.CAMERA_STALL/"not_connected")."""

    @abc.abstractmethod
    def close(self) -> None:
        """Stop capture. Safe to call twice."""

    @abc.abstractmethod
    def latest(self, max_age_s: float | None = None) -> Frame:
        """The newest frame without waiting; RobotFault(FaultKind.CAMERA_STALL) if older than max_age_s."""

    @abc.abstractmethod
    def wait_frame(self, timeout_s: float = 1.0) -> Frame:
        """The next frame newer than the last one returned; RobotFault(FaultKind.CAMERA_STALL) on timeout."""

    @property
    @abc.abstractmethod
    def intrinsics(self) -> Intrinsics: ...

    @property
    @abc.abstractmethod
    def fps(self) -> float: ...

    def __enter__(self) -> Camera:
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()
