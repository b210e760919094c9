"""Soft Actor-Critic, in three layers that import one way: `obs_layout` (which observation entries the
agent reads) <- `networks` (encoder, actor, critic ensemble) <- `algorithm` (`SAC`: optimizers and `update`).

    from rlhw.rl.sac import SAC, ObsLayout, obs_to_tensors, build_actor, resolve_device

A rollout worker needs only `obs_layout` and `networks` (`build_actor`); the learner needs `SAC`.
"""

from __future__ import annotations

from rlhw.rl.sac.algorithm import SAC
from rlhw.rl.sac.device import resolve_device
from rlhw.rl.sac.networks import (
    IMAGE_ENCODER_FIELD,
    LOG_STD_MAX,
    LOG_STD_MIN,
    Actor,
    CriticEnsemble,
    Encoder,
    EnsembleLayerNorm,
    EnsembleLinear,
    build_actor,
    mlp,
)
from rlhw.rl.sac.obs_layout import ObsLayout, obs_to_tensors

__all__ = [
    "IMAGE_ENCODER_FIELD",
    "LOG_STD_MAX",
    "LOG_STD_MIN",
    "SAC",
    "Actor",
    "CriticEnsemble",
    "Encoder",
    "EnsembleLayerNorm",
    "EnsembleLinear",
    "ObsLayout",
    "build_actor",
    "mlp",
    "obs_to_tensors",
    "resolve_device",
]
