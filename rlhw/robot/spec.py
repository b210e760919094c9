"""Specs of an environment's observations and actions, shared by the env server and its clients."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class TensorSpec:
    """Name, dtype and shape of one tensor, with optional elementwise bounds (scalars broadcast)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    low: float | np.ndarray | None = None
    high: float | np.ndarray | None = None


@dataclass(frozen=True)
class EnvSpec:
    """What a client needs to know before stepping.

    Shapes are per env instance; with ``num_envs > 1`` every observation, action, reward and flag
    gets a leading batch dimension of ``num_envs``.
    """

    observations: dict[str, TensorSpec]
    action: TensorSpec
    control_hz: float
    num_envs: int = 1
    robot: str = ""
    cameras: tuple[str, ...] = field(default_factory=tuple)
    description: str = ""
