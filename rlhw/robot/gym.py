"""`GymRobotEnv`: a local `RobotEnv` as a `gymnasium.Env`, for tools that expect one (checkers,
wrappers, other RL libraries) without going through the env server.

Spaces come from the env's spec: a Dict of Boxes (bounds from the spec; unbounded where it has
none) and a Box action. ``info`` is the RobotEnv's. Safety behaviour is unchanged: a step after
the episode ended raises `SafetyViolation` instead of silently continuing.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from rlhw.robot.env import RobotEnv
from rlhw.robot.spec import TensorSpec


def box(spec: TensorSpec) -> gym.spaces.Box:
    dtype = np.dtype(spec.dtype)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        default_low, default_high = info.min, info.max
    else:
        default_low, default_high = -np.inf, np.inf
    low = np.broadcast_to(np.asarray(default_low if spec.low is None else spec.low, dtype=dtype), spec.shape)
    high = np.broadcast_to(np.asarray(default_high if spec.high is None else spec.high, dtype=dtype), spec.shape)
    return gym.spaces.Box(low=low.copy(), high=high.copy(), shape=spec.shape, dtype=dtype)


class GymRobotEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, env: RobotEnv):
        self.env = env
        self.observation_space = gym.spaces.Dict({k: box(s) for k, s in env.spec.observations.items()})
        self.action_space = box(env.spec.action)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        return self.env.reset(seed=seed)

    def step(self, action):
        return self.env.step(action)

    def close(self) -> None:
        self.env.close()
