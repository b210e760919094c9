"""`MujocoCamera`: an offscreen-rendered camera of a `MujocoArm`'s scene behind the `Camera` interface.

A simulated camera has no sensor clock: the scene only changes when the arm's physics advances. So
frames render lazily, when `latest`/`wait_frame` is called after the arm advanced (never twice for
one simulated instant), and cost nothing while nobody reads them. A frame's ``timestamp`` is the
arm's clock (``epoch + sim_time``, see MujocoArm), so it matches the state it was rendered from.

Camera names: in sim-only mode a config's camera serials become simulated camera names. A name that
is a scene camera (``front``, ``wrist``, ``side``) renders that camera; any other name takes the
scene camera at its position in the config's list (``index``), in that order.

Rendering needs an offscreen OpenGL backend: `drivers.mujoco` picks EGL or OSMesa at import (see
drivers/mujoco/_gl.py). On a CPU-only machine the arm's detailed visual meshes (about 240,000
triangles) make a frame cost 30-80 ms whatever its size; ``meshes="collision"`` draws the arm's
collision shapes instead (about 3,200 triangles, 5-10 ms). The table, the cube, the peg and the hole
look the same either way; the arm is drawn coarser and darker.
"""

from __future__ import annotations

import threading
import time

import mujoco
import numpy as np

from drivers.mujoco import _gl
from drivers.mujoco import scene as _scene
from drivers.mujoco.arm import MujocoArm
from drivers.mujoco.render import RenderThread, refuse_forked_child
from rlhw.errors import FaultKind, RobotFault
from rlhw.robot.camera import Camera, Frame, Intrinsics

#: Geom groups of the FR3 model (franky-sim's assets): its detailed visual meshes and its collision shapes.
#: The scene's own geoms (table, cube, peg, hole, markers) are in group 0 and always drawn.
VISUAL_GROUP, COLLISION_GROUP = 2, 3
MESH_CHOICES = ("visual", "collision")


def scene_option(meshes: str) -> mujoco.MjvOption:
    """What a camera draws of the arm: ``visual`` (MuJoCo's default groups) or ``collision`` shapes only."""
    if meshes not in MESH_CHOICES:
        raise ValueError(f"meshes: {meshes!r} is not one of {list(MESH_CHOICES)}")
    option = mujoco.MjvOption()
    if meshes == "collision":
        option.geomgroup[VISUAL_GROUP] = 0
        option.geomgroup[COLLISION_GROUP] = 1
    return option


class _SharedRenderer:
    """One offscreen GL context per (model, image size), shared by every camera that renders it.

    A context holds the scene's meshes and textures (about 100 MiB with software GL), and any
    camera of any arm of the same model can be drawn with it: cameras only differ in which MjData
    and which scene camera they draw. So N simulated arms with cameras in one process cost one
    context, not N. The context lives on a render thread of its own (drivers/mujoco/render.py), which
    also serialises renders asked for by several threads.
    """

    _pool: dict[tuple[int, int, int], _SharedRenderer] = {}
    _pool_lock = threading.Lock()

    def __init__(self, key: tuple[int, int, int], thread: RenderThread):
        self.key = key
        self.thread = thread
        self.users = 0

    @classmethod
    def acquire(cls, model: mujoco.MjModel, width: int, height: int, timeout_s: float) -> _SharedRenderer:
        key = (id(model), width, height)
        refuse_forked_child(f"{width}x{height}")  # the pool may hold the parent's renderers
        with cls._pool_lock:
            shared = cls._pool.get(key)
            if shared is None:
                thread = RenderThread(model, width, height, name=f"{width}x{height}", start_timeout_s=timeout_s)
                shared = cls._pool[key] = cls(key, thread)
            shared.users += 1
            return shared

    def release(self) -> None:
        with self._pool_lock:
            self.users -= 1
            if self.users > 0:
                return
            if self._pool.get(self.key) is self:
                del self._pool[self.key]
        self.thread.close()

    def render(self, data: mujoco.MjData, camera_id: int, option: mujoco.MjvOption) -> np.ndarray:
        return self.thread.render(data, camera_id, option)  # a fresh HxWx3 uint8 array per call


def scene_camera_for(serial: str, index: int = 0) -> str:
    """Which scene camera renders the simulated camera named ``serial`` (the ``index``-th in its config list)."""
    if serial in _scene.CAMERA_NAMES:
        return serial
    if 0 <= index < len(_scene.CAMERA_NAMES):
        return _scene.CAMERA_NAMES[index]
    raise ValueError(
        f"camera {serial!r} (position {index} in the camera list): the sim scene has only "
        f"{len(_scene.CAMERA_NAMES)} cameras {list(_scene.CAMERA_NAMES)}; name it after one of them "
        "or list at most that many cameras"
    )


class MujocoCamera(Camera):
    """Renders scene camera ``scene_camera`` (default: chosen from ``serial``/``index``) of ``arm``."""

    def __init__(
        self,
        serial: str,
        arm: MujocoArm,
        *,
        width: int = 128,
        height: int = 128,
        index: int = 0,
        scene_camera: str | None = None,
        fps: float = 30.0,
        name: str | None = None,
        meshes: str = "visual",
    ):
        if not isinstance(arm, MujocoArm):
            raise ValueError(
                f"arm: a MujocoCamera renders a MujocoArm's scene, got {type(arm).__name__}; "
                "use the same simulator for arm and cameras"
            )
        if not (8 <= width <= 4096 and 8 <= height <= 4096):
            raise ValueError(f"width x height = {width}x{height}: each must be between 8 and 4096 pixels")
        if fps <= 0:
            raise ValueError(f"fps: must be > 0, got {fps}")
        self.serial = serial
        self.name = name or serial
        self.arm = arm
        self.width, self.height = int(width), int(height)
        self.scene_camera = scene_camera or scene_camera_for(serial, index)
        if self.scene_camera not in _scene.CAMERA_NAMES:
            raise ValueError(
                f"scene_camera: {self.scene_camera!r} is not a scene camera; choose one of {list(_scene.CAMERA_NAMES)}"
            )
        self._camera_id = arm.model.camera(self.scene_camera).id
        self.meshes = meshes
        self._option = scene_option(meshes)
        self._fps = float(fps)
        self._renderer: _SharedRenderer | None = None
        self._last: Frame | None = None
        self._last_key: tuple[float, int] | None = None  # (sim time, arm.state_changes) of the last frame
        self._returned_index = -1
        self._index = -1

    # ------------------------------------------------------------------ lifecycle
    def open(self, timeout_s: float = 10.0) -> None:
        if self._renderer is not None:
            return
        ok, why = _gl.headless_ready()
        if not ok:
            raise RobotFault(FaultKind.NOT_CONNECTED, f"sim camera {self.serial!r}: {why}")
        model = self.arm.model
        # The offscreen buffer is sized by the model; grow it (shared model, only ever grows).
        model.vis.global_.offwidth = max(model.vis.global_.offwidth, self.width)
        model.vis.global_.offheight = max(model.vis.global_.offheight, self.height)
        try:
            self._renderer = _SharedRenderer.acquire(model, self.width, self.height, timeout_s)
        except RobotFault:
            raise
        except Exception as e:  # GL context creation failed: say which backend and how to fix it
            raise RobotFault(
                FaultKind.NOT_CONNECTED,
                f"sim camera {self.serial!r}: cannot create an offscreen GL context "
                f"({_gl.CHOICE}): {e}. Try MUJOCO_GL=osmesa (apt libosmesa6) or MUJOCO_GL=egl (apt libegl1)",
            ) from e
        self._index = -1
        self._returned_index = -1
        self._last = None
        self._last_key = None

    def close(self) -> None:
        renderer, self._renderer = self._renderer, None
        if renderer is not None:
            renderer.release()

    # ------------------------------------------------------------------ frames
    def _check_open(self) -> _SharedRenderer:
        if self._renderer is None:
            raise RobotFault(FaultKind.NOT_CONNECTED, f"sim camera {self.serial!r} is not open; call open() first")
        if not self.arm.connected:
            raise RobotFault(
                FaultKind.NOT_CONNECTED, f"sim camera {self.serial!r}: its arm {self.arm.name!r} is not connected"
            )
        return self._renderer

    def _render(self) -> Frame:
        renderer = self._check_open()
        data = self.arm.sync(cameras=True)
        color = renderer.render(data, self._camera_id, self._option)
        self._index += 1
        self._last_key = (data.time, self.arm.state_changes)
        self._last = Frame(color=color, timestamp=self.arm.to_wall_clock(data.time), index=self._index)
        return self._last

    def _fresh(self) -> bool:
        # Same simulated time and no change by hand (a teleported cube, a restored state) since.
        return self._last is not None and self._last_key == (self.arm.sim_time, self.arm.state_changes)

    def latest(self, max_age_s: float | None = None) -> Frame:
        """The scene as it is now (rendered if the sim advanced since the last frame); never stale."""
        self._check_open()
        frame = self._last if self._fresh() else self._render()
        self._returned_index = frame.index
        return frame

    def wait_frame(self, timeout_s: float = 1.0) -> Frame:
        """A frame newer than the last one returned: rendered now if the sim advanced since then,
        else waits (bounded) for another thread to advance it, then RobotFault(FaultKind.CAMERA_STALL)."""
        self._check_open()
        deadline = time.monotonic() + timeout_s
        while True:
            if not self._fresh():
                frame = self._render()
                break
            if self._last.index > self._returned_index:
                frame = self._last
                break
            if time.monotonic() >= deadline:
                raise RobotFault(
                    FaultKind.CAMERA_STALL,
                    f"sim camera {self.serial!r}: simulated time stood still for {timeout_s} s "
                    f"after frame {self._last.index}; advance the arm (env.step) before waiting for a new frame",
                )
            time.sleep(0.001)
        self._returned_index = frame.index
        return frame

    # ------------------------------------------------------------------ properties
    @property
    def render_thread(self) -> RenderThread | None:
        """The render thread that holds this camera's GL context (None while closed). It is one per model and
        image size, shared by every camera that draws them: N arms with cameras cost one context, not N."""
        return None if self._renderer is None else self._renderer.thread

    @property
    def intrinsics(self) -> Intrinsics:
        """Pinhole intrinsics from the scene camera's vertical field of view (square pixels)."""
        fovy = np.deg2rad(self.arm.model.cam_fovy[self._camera_id])
        f = 0.5 * self.height / np.tan(fovy / 2)
        return Intrinsics(self.width, self.height, float(f), float(f), self.width / 2, self.height / 2)

    @property
    def fps(self) -> float:
        """Nominal rate; frames actually render on demand, at most once per simulated instant."""
        return self._fps
