"""`GymRobotEnv`: a local `RobotEnv` as a `gymnasium.Env`, for tools that expect one (checkers,
wrappers, other RL libraries) without going through the env server.

Spaces come from the env's spec: a Dict of Boxes (bounds from the spec; unbounded where it has
none) and a Box action. ``info`` is the RobotEnv's. Safety behaviour is unchanged: a step after
the episode ended raises `SafetyViolation` instead of silently continuing.

``measurements_in_info=False`` keeps the per-call measurements (``timestamps``: wall-clock capture
times, ``timing``: durations) out of ``info`` and in ``last_measurements`` instead. They differ on
every call by nature, so tools that compare infos of identical transitions (gymnasium's
``check_env``, replay comparisons) need them set apart; everything else in ``info`` stays.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from rlhw.robot.env import RobotEnv
from rlhw.robot.spec import EnvSpec, TensorSpec


def box(spec: TensorSpec, batch: tuple[int, ...] = ()) -> gym.spaces.Box:
    """The gymnasium space of one tensor of the spec, with ``batch`` dimensions in front.

    Bounds are the spec's; where it has none, the dtype's range for integers, unbounded for
    floats, False..True for bool. Why a bool Box and not MultiBinary: MultiBinary is int8, so its
    samples and its batched space would not have the dtype that the env sends and the server checks.
    """
    dtype = np.dtype(spec.dtype)
    if dtype == np.bool_:
        default_low, default_high = False, True
    elif np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        default_low, default_high = info.min, info.max
    else:
        default_low, default_high = -np.inf, np.inf
    shape = tuple(batch) + tuple(spec.shape)
    low = np.broadcast_to(np.asarray(default_low if spec.low is None else spec.low, dtype=dtype), shape)
    high = np.broadcast_to(np.asarray(default_high if spec.high is None else spec.high, dtype=dtype), shape)
    return gym.spaces.Box(low=low.copy(), high=high.copy(), shape=shape, dtype=dtype)


def spaces_from_spec(spec: EnvSpec, batched: bool | None = None) -> tuple[gym.spaces.Dict, gym.spaces.Box]:
    """(observation_space, action_space) of a spec. ``batched`` (default: when ``spec.num_envs > 1``)
    puts the batch dimension ``num_envs`` in front, as a batched env server sends its tensors."""
    batch = (spec.num_envs,) if (spec.num_envs > 1 if batched is None else batched) else ()
    observations = gym.spaces.Dict({name: box(s, batch) for name, s in spec.observations.items()})
    return observations, box(spec.action, batch)


#: The ``info`` keys that are measurements of the call itself rather than facts of the transition.
MEASUREMENT_KEYS = ("timestamps", "timing")


def set_measurements_apart(info: dict[str, Any]) -> dict[str, Any]:
    """Remove the `MEASUREMENT_KEYS` from ``info`` (in place) and return them."""
    return {k: info.pop(k) for k in MEASUREMENT_KEYS if k in info}


class GymRobotEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, env: RobotEnv, *, measurements_in_info: bool = True):
        self.env = env
        self.measurements_in_info = measurements_in_info
        self.last_measurements: dict[str, Any] = {}
        self.observation_space, self.action_space = spaces_from_spec(env.spec, batched=False)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        obs, info = self.env.reset(seed=seed)
        if not self.measurements_in_info:
            self.last_measurements = set_measurements_apart(info)
        return obs, info

    def step(self, action):
        out = self.env.step(action)
        if not self.measurements_in_info:
            self.last_measurements = set_measurements_apart(out[4])
        return out

    def close(self) -> None:
        self.env.close()
