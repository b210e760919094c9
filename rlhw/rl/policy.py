"""How a policy answers a batch of observations: one rule for every process that acts, the local runner
(`rlhw.rl.local.agent_policy`), the rollout workers and the env workers next to their arms
(`rlhw.rl.acting.ActingPolicy`) and `rlhw eval`, so that warm-up, exploration and evaluation cannot drift apart.

- Warm-up (``explore_at_random``, or no weights yet: ``version`` -1): uniform random actions within the action
  bounds, version -1. Deterministic (eval) rows still act on the weights' mean once there are weights.
- After it: SAC's stochastic action, its mean for the deterministic rows; one forward pass gives both.
- Each row's version is the number of updates behind the weights that chose it (-1: a random action); the
  episode recorder stores it with the step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True, slots=True)
class Actions:
    """A policy's answer to k observations, one row each, in their order (on the pipeline: the answer to one
    `rlhw.rl.pipeline.messages.EnvStep` with k > 0, in the order of its ``rows``).

    ``actions``: float32 (k, ...), within the action bounds.
    ``versions``: int64 (k,), the version of the policy weights that chose each action (the number of SAC
    updates behind them; -1 for a uniform random action). The recorder stores it with the step.
    """

    actions: np.ndarray
    versions: np.ndarray


@dataclass(frozen=True, slots=True)
class PolicyWeights:
    """The policy network's weights (`SAC.policy_state`, numpy), and their version (updates behind them)."""

    version: int
    state: dict[str, np.ndarray]


#: One forward pass of the policy network for the whole batch: (SAC's sample, its mean), float32 (k, ...).
Forward = Callable[[], tuple[np.ndarray, np.ndarray]]


def choose_actions(
    forward: Forward,
    deterministic: np.ndarray,
    version: int,
    explore_at_random: bool,
    rng: np.random.Generator,
    low: np.ndarray,
    high: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """(actions, versions) for a batch of ``len(deterministic)`` rows; ``forward`` runs only when an action needs
    the network. ``rng`` draws the warm-up actions (within ``low``..``high``)."""
    deterministic = np.asarray(deterministic, bool)
    k = len(deterministic)
    versions = np.full(k, version, np.int64)
    if explore_at_random or version < 0:
        actions = rng.uniform(low, high, size=(k, *np.shape(low))).astype(np.float32)
        versions[~deterministic] = -1
        if deterministic.any() and version >= 0:
            actions[deterministic] = forward()[1][deterministic]
        return actions, versions
    sample, mean = forward()
    if deterministic.any():
        sample = np.where(deterministic.reshape(-1, *[1] * (sample.ndim - 1)), mean, sample)
    return sample, versions
