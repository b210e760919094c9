"""From an env's `EnvSpec` to what the agent is built from: the observation layout and the action bounds.

One implementation for every place that builds a policy or a learner (the local runner, the rollout and
learner workers) or needs a neutral action (the env worker's idle instances), so that they cannot disagree
about the default bounds or the order of the observation entries.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlhw.rl.sac import ObsLayout
from rlhw.robot.spec import EnvSpec, TensorSpec


def action_bounds(action: TensorSpec) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) float32 arrays of the action's shape; a missing bound is -1 or 1 (the policy's tanh range)."""
    shape = tuple(action.shape)
    low = np.array(np.broadcast_to(np.asarray(-1.0 if action.low is None else action.low, np.float32), shape))
    high = np.array(np.broadcast_to(np.asarray(1.0 if action.high is None else action.high, np.float32), shape))
    return low, high


def neutral_actions(action: TensorSpec, batch: int) -> np.ndarray:
    """float32 (batch, ...): zero, moved inside the bounds where zero is outside them (what an idle instance of
    a batched simulator gets while the others step)."""
    low, high = action_bounds(action)
    return np.broadcast_to(np.clip(np.zeros(action.shape, np.float32), low, high), (batch, *action.shape)).copy()


def observation_shapes(spec: EnvSpec) -> dict[str, tuple[int, ...]]:
    """Every observation's shape per env instance (what demos are checked against)."""
    return {k: tuple(int(s) for s in v.shape) for k, v in spec.observations.items()}


def zero_observations(spec: EnvSpec, batch: int = 1) -> dict[str, np.ndarray]:
    """A batch of all-zero observations in the spec's shapes and dtypes (to warm up a network)."""
    return {k: np.zeros((batch, *v.shape), dtype=v.dtype) for k, v in spec.observations.items()}


@dataclass(frozen=True)
class AgentSpace:
    """What SAC's networks are built from, per env instance.

    ``layout``: the observation entries the agent reads (`ObsLayout`); ``low``/``high``: float32 action bounds
    of the action's shape (`action_bounds`); ``observation_shapes``: every observation's shape (demos are
    checked against these); ``action_shape``.
    """

    layout: ObsLayout
    low: np.ndarray
    high: np.ndarray
    observation_shapes: dict[str, tuple[int, ...]]
    action_shape: tuple[int, ...]

    @classmethod
    def from_spec(cls, spec: EnvSpec) -> AgentSpace:
        low, high = action_bounds(spec.action)
        return cls(
            ObsLayout.from_spec(spec), low, high, observation_shapes(spec), tuple(int(s) for s in spec.action.shape)
        )
