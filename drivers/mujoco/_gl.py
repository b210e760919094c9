"""Pick an offscreen OpenGL backend for MuJoCo before `mujoco` is first imported.

MuJoCo's Python bindings read ``MUJOCO_GL`` once, at ``import mujoco``; unset, they fall back to
GLFW, which needs a display and fails on a headless server. So `drivers.mujoco` sets it first:
EGL when ``libEGL`` is installed (hardware-accelerated with a GPU, Mesa's software rasterizer
without one), else OSMesa when ``libOSMesa`` is installed. A value the user already set wins,
e.g. ``MUJOCO_GL=osmesa`` on a machine whose EGL cannot create a context.
"""

from __future__ import annotations

import ctypes.util
import os
import sys

#: What was chosen and why, for error messages and docs.
CHOICE: str = ""


def choose_backend() -> str:
    """Set ``MUJOCO_GL`` (and return it) unless the user set it; '' if nothing usable is installed."""
    global CHOICE
    preset = os.environ.get("MUJOCO_GL", "").strip().lower()
    if preset:
        CHOICE = f"MUJOCO_GL={preset} (set by the user)"
        return preset
    if "mujoco" in sys.modules:
        # Too late: the bindings already chose GLFW. The camera reports this when it opens.
        CHOICE = "none (mujoco was imported before drivers.mujoco with MUJOCO_GL unset)"
        return ""
    for backend, library in (("egl", "EGL"), ("osmesa", "OSMesa")):
        if ctypes.util.find_library(library):
            os.environ["MUJOCO_GL"] = backend
            CHOICE = f"MUJOCO_GL={backend} (chosen automatically: lib{library} found)"
            return backend
    CHOICE = "none (neither libEGL nor libOSMesa is installed)"
    return ""


def _late_switch() -> bool:
    """mujoco was imported first with MUJOCO_GL unset (it chose GLFW). If PyOpenGL is not loaded
    yet, the backend can still be switched: point the bindings' GLContext at EGL or OSMesa."""
    global CHOICE
    if "OpenGL" in sys.modules:
        return False  # PyOpenGL already bound to a platform; switching now would break it
    try:
        from mujoco.rendering.classic import gl_context
    except ImportError:
        return False
    for backend, library in (("egl", "EGL"), ("osmesa", "OSMesa")):
        if not ctypes.util.find_library(library):
            continue
        try:
            os.environ["MUJOCO_GL"] = backend
            module = __import__(f"mujoco.{backend}", fromlist=["GLContext"])
        except Exception:  # noqa: BLE001 - try the next backend
            os.environ.pop("MUJOCO_GL", None)
            os.environ.pop("PYOPENGL_PLATFORM", None)
            continue
        gl_context.GLContext = module.GLContext
        CHOICE = f"MUJOCO_GL={backend} (switched after mujoco was imported first: lib{library} found)"
        return True
    return False


def headless_ready() -> tuple[bool, str]:
    """Whether the imported bindings can render offscreen (switching to EGL/OSMesa if mujoco was
    imported before drivers.mujoco and picked GLFW), and a fix when they cannot."""
    backend = os.environ.get("MUJOCO_GL", "").strip().lower()
    if backend in ("egl", "osmesa"):
        return True, CHOICE
    if not backend and not os.environ.get("DISPLAY") and _late_switch():
        return True, CHOICE
    if backend in ("glfw", "glx") and os.environ.get("DISPLAY"):
        return True, CHOICE
    return False, (
        f"no offscreen OpenGL backend for MuJoCo ({CHOICE or 'MUJOCO_GL unset'}). Fix: install "
        "libegl1 (or libosmesa6) and set MUJOCO_GL=egl (or osmesa) before Python imports mujoco, "
        "or import drivers.mujoco before mujoco"
    )
