"""Simulated Franka FR3 (MuJoCo) and offscreen cameras, registered as arm and camera driver "mujoco".

- `MujocoArm` (drivers/mujoco/arm.py): franky-sim's shipped FR3 model in a table scene, Cartesian
  targets via per-control-step IK (ik.py) + the model's joint servos, simulated time (``advance``);
  its indices into the model (layout.py), contact forces (contact.py) and state views (state.py);
- `MujocoCamera` (drivers/mujoco/camera.py): renders a scene camera of one arm, lazily;
- the scene and its model cache (drivers/mujoco/scene.py).

Import order matters: MuJoCo reads ``MUJOCO_GL`` when first imported, so this package chooses an
offscreen backend (drivers/mujoco/_gl.py) before importing anything that imports mujoco.
"""

from __future__ import annotations

from drivers.mujoco._gl import choose_backend as _choose_backend

_choose_backend()  # before the first `import mujoco` of the process

from drivers.mujoco.arm import MujocoArm  # noqa: E402
from drivers.mujoco.camera import MujocoCamera, scene_camera_for  # noqa: E402
from drivers.mujoco.scene import CAMERA_NAMES, SceneOptions, scene_model  # noqa: E402
from rlhw.robot.registry import register_arm, register_camera  # noqa: E402

register_arm("mujoco")(MujocoArm)
register_camera("mujoco")(MujocoCamera)

__all__ = ["MujocoArm", "MujocoCamera", "SceneOptions", "scene_model", "scene_camera_for", "CAMERA_NAMES"]
