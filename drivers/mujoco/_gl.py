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


def headless_ready() -> tuple[bool, str]:
    """Whether the imported bindings can render offscreen, and a fix when they cannot."""
    backend = os.environ.get("MUJOCO_GL", "").strip().lower()
    if backend in ("egl", "osmesa"):
        return True, CHOICE
    if backend in ("glfw", "glx") and os.environ.get("DISPLAY"):
        return True, CHOICE
    return False, (
        f"no offscreen OpenGL backend for MuJoCo ({CHOICE or 'MUJOCO_GL unset'}). Fix: install "
        "libegl1 (or libosmesa6) and set MUJOCO_GL=egl (or osmesa) before Python imports mujoco, "
        "or import drivers.mujoco before mujoco"
    )
