"""Robot layer: arms, cameras, the safety layer, tasks and the env that ties them together.

``make_env(config, robot_rank=0)`` -> `RobotEnv`; ``make_batched_env(config, robot_rank=0)`` ->
`BatchedEnv` of ``env.num_envs`` instances. Imported lazily so ``import rlhw.robot`` stays cheap.
"""

from __future__ import annotations

from rlhw._lazy import lazy_getattr

_LAZY = {
    "make_env": "rlhw.robot.factory",
    "make_batched_env": "rlhw.robot.factory",
    "plan_env": "rlhw.robot.factory",
    "RobotEnv": "rlhw.robot.env",
    "BatchedEnv": "rlhw.robot.batch",
    "SafetyLayer": "rlhw.robot.safety",
    "GymRobotEnv": "rlhw.robot.gym",
    "register_arm": "rlhw.robot.registry",
    "register_camera": "rlhw.robot.registry",
    "register_teleop": "rlhw.robot.registry",
    "make_arm": "rlhw.robot.registry",
    "make_camera": "rlhw.robot.registry",
    "Pose": "rlhw.robot.pose",
    "ArmCapability": "rlhw.robot.arm",
}

__all__ = list(_LAZY)

__getattr__ = lazy_getattr(__name__, _LAZY)
