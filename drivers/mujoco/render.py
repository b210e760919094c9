"""One thread owns each offscreen GL context: it creates the `mujoco.Renderer`, does every render and closes it.

Why a thread: an OpenGL context is current on one thread at a time. `mujoco.Renderer` makes its
context current on the thread that constructs it and never releases it, so with EGL a render from
any other thread fails (``EGL_BAD_ACCESS`` from eglMakeCurrent). OSMesa does not refuse, but its
current context is per thread too, and binding one context on two threads is undefined. The threads
that read a camera differ by where the env runs: the caller's own thread in process, a pool thread
per gRPC call behind `rlhw serve-env`, a Ray actor's loop thread in the pipeline, another thread for
the constructor. So the context gets a thread of its own and every caller hands it the work: the
caller's thread never touches GL, and whichever thread asks, the same thread renders.

The hand-off costs two thread switches per frame (tens of microseconds, against milliseconds for a
software render: tools/bench_sim_cameras.py measures it). Every wait is bounded: context creation by
the camera's ``open(timeout_s)``, a render by ``RENDER_TIMEOUT_S``, shutdown by ``CLOSE_TIMEOUT_S``.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout

import mujoco
import numpy as np

from rlhw.errors import FaultKind, RobotFault

log = logging.getLogger(__name__)

#: The longest one frame may take. A software-rendered 128 px frame takes 5-90 ms here; a frame that
#: takes seconds means the render thread is stuck, which a caller must hear about, not wait out.
RENDER_TIMEOUT_S = 10.0
#: How long `close` waits for the render thread to free its context and end.
CLOSE_TIMEOUT_S = 5.0

_STOP = None  # the job that ends the render thread

#: The process that created this interpreter's first GL context. Mesa cannot create a context in a
#: process forked from it: its software rasteriser's threads were not copied, and the creation hangs
#: inside MuJoCo's C code with the GIL held, beyond any timeout. So a forked child is refused.
_gl_process: int | None = None


def refuse_forked_child(name: str) -> None:
    """RobotFault(NOT_CONNECTED) in a process forked from one that created GL contexts."""
    if _gl_process is not None and _gl_process != os.getpid():
        raise RobotFault(
            FaultKind.NOT_CONNECTED,
            f"sim camera renderer {name}: this process ({os.getpid()}) was forked from process {_gl_process}, "
            "which had created GL contexts; Mesa cannot create one in a forked child (it hangs). Start "
            "processes that render with spawn (multiprocessing's 'spawn' context, subprocess), not fork",
        )


class RenderThread:
    """A `mujoco.Renderer` of ``model`` at ``width`` x ``height`` that lives on its own thread.

    The constructor starts the thread and waits (at most ``start_timeout_s``) until the thread has
    created the GL context; a creation error is raised here, from the caller's thread. `render`
    draws one scene camera of an MjData on that thread and returns the pixels.
    """

    def __init__(self, model: mujoco.MjModel, width: int, height: int, *, name: str, start_timeout_s: float):
        global _gl_process
        refuse_forked_child(name)
        self.name = name
        _gl_process = os.getpid()
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        started: Future = Future()
        self._thread = threading.Thread(
            target=self._run, args=(model, width, height, started), name=f"rlhw-render-{name}", daemon=True
        )
        self._thread.start()
        try:
            started.result(timeout=start_timeout_s)
        except FutureTimeout:
            self._jobs.put(_STOP)  # it may still finish creating; then it frees the context and ends
            raise TimeoutError(f"creating the GL context took over {start_timeout_s} s") from None

    def _run(self, model: mujoco.MjModel, width: int, height: int, started: Future) -> None:
        started.set_running_or_notify_cancel()
        try:
            renderer = mujoco.Renderer(model, height, width)  # its GL context is current on this thread
        except BaseException as e:  # noqa: BLE001 - reported to the caller that waits in __init__
            started.set_exception(e)
            return
        started.set_result(None)
        try:
            while (job := self._jobs.get()) is not _STOP:
                work, done = job
                if not done.set_running_or_notify_cancel():
                    continue  # its caller stopped waiting before it started
                try:
                    done.set_result(work(renderer))
                except BaseException as e:  # noqa: BLE001 - the caller re-raises it
                    done.set_exception(e)
        finally:
            renderer.close()  # frees the MjrContext with its context current, on the thread that owns it

    def call(self, work: Callable[[mujoco.Renderer], np.ndarray], timeout_s: float = RENDER_TIMEOUT_S) -> np.ndarray:
        """Run ``work(renderer)`` on the render thread and return its result (its exception is raised here)."""
        refuse_forked_child(self.name)  # its render thread exists in the parent only
        if not self._thread.is_alive():
            raise RobotFault(FaultKind.NOT_CONNECTED, f"sim camera renderer {self.name} is closed")
        done: Future = Future()
        self._jobs.put((work, done))
        try:
            return done.result(timeout=timeout_s)
        except FutureTimeout:
            done.cancel()  # not started yet: it never will; running: its result is dropped
            raise RobotFault(
                FaultKind.CAMERA_STALL,
                f"sim camera renderer {self.name}: a frame took over {timeout_s} s to render "
                f"(the render thread is stuck or the machine is overloaded)",
            ) from None

    def render(self, data: mujoco.MjData, camera_id: int, option: mujoco.MjvOption) -> np.ndarray:
        """A fresh HxWx3 uint8 frame of scene camera ``camera_id`` in ``data`` (the caller keeps ``data``
        unchanged until this returns: it waits)."""

        def draw(renderer: mujoco.Renderer) -> np.ndarray:
            renderer.update_scene(data, camera=camera_id, scene_option=option)
            return renderer.render()

        return self.call(draw)

    def close(self, timeout_s: float = CLOSE_TIMEOUT_S) -> None:
        """Free the context on its thread and end the thread (bounded: a stuck thread is left, as a daemon)."""
        if _gl_process != os.getpid() or not self._thread.is_alive():
            return
        self._jobs.put(_STOP)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout_s)
            if self._thread.is_alive():
                log.warning("sim camera renderer %s: its render thread did not end within %s s", self.name, timeout_s)

    @property
    def thread(self) -> threading.Thread:
        """The thread that owns the context (tests check that every render ran there)."""
        return self._thread
