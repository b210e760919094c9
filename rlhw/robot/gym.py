"""`GymRobotEnv`: a local `RobotEnv` as a `gymnasium.Env`, for tools that expect one (checkers,
wrappers, other RL libraries) without going through the env server.

Spaces come from the env's spec: a Dict of Boxes (bounds from the spec; unbounded where it has
none) and a Box action. ``reset`` and ``step`` give the RobotEnv's `Reset` and `Step` (rlhw/robot/step.py) as
gymnasium's tuples (`Reset.gym`, `Step.gym`); ``info`` holds their fields and notes. Safety behaviour is unchanged: a step after
the episode ended raises `SafetyViolation` instead of silently continuing.

``info`` holds the facts of the transition. The per-call measurements (``timestamps``: wall-clock
capture times, ``timing``: durations) are in ``last_measurements`` after every call, and by default
NOT in ``info``: they differ on every call by nature, and gymnasium's ``check_env`` (a user's first
act) steps twice from the same seed with the same action and requires equivalent infos; replay
comparisons need the same. ``measurements_in_info=True`` puts them in ``info`` as well, for loops that
read them per step (the training pipeline's loop health does); ``check_env`` then fails on them, and
only on them.
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


def take_measurements(info: dict[str, Any], keep_in_info: bool) -> dict[str, Any]:
    """The `MEASUREMENT_KEYS` of ``info``, removed from it (in place) unless ``keep_in_info``."""
    if keep_in_info:
        return {k: info[k] for k in MEASUREMENT_KEYS if k in info}
    return {k: info.pop(k) for k in MEASUREMENT_KEYS if k in info}


class GymRobotEnv(gym.Env):
    metadata = {"render_modes": []}

    def __init__(self, env: RobotEnv, *, measurements_in_info: bool = False):
        self.env = env
        self.measurements_in_info = measurements_in_info
        self.last_measurements: dict[str, Any] = {}
        self.observation_space, self.action_space = spaces_from_spec(env.spec, batched=False)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        obs, info = self.env.reset(seed=seed).gym()  # the Gymnasium edge: the env's `Reset` as (obs, info)
        self.last_measurements = take_measurements(info, self.measurements_in_info)
        return obs, info

    def step(self, action):
        out = self.env.step(action).gym()  # the Gymnasium edge: the env's `Step` as gymnasium's tuple
        self.last_measurements = take_measurements(out[4], self.measurements_in_info)
        return out

    def close(self) -> None:
        self.env.close()
