"""Which entries of the env's dict observation the agent reads, and how a batch of them becomes tensors.

`ObsLayout` is built from the env spec, so the networks never guess: proprio entries (vectors, flattened and
concatenated in sorted order) and camera images (HxWx3 uint8, fed to an image encoder). It travels with a
checkpoint as `ObsLayout.to_dict`, and it is what a rollout worker needs to turn observations into tensors
without building the learner's networks.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import torch


@dataclass(frozen=True)
class ObsLayout:
    """Names and shapes of the observation entries the agent uses.

    ``proprio``: (name, shape) of low-dimensional entries, concatenated in this (sorted) order.
    ``images``: (name, (H, W, C)) of uint8 camera entries.
    """

    proprio: tuple[tuple[str, tuple[int, ...]], ...]
    images: tuple[tuple[str, tuple[int, ...]], ...] = field(default_factory=tuple)

    @classmethod
    def from_shapes(cls, shapes: Mapping[str, tuple[int, ...]], dtypes: Mapping[str, str], use_images: bool = True):
        proprio, images = [], []
        for name in sorted(shapes):
            shape, dtype = tuple(int(s) for s in shapes[name]), str(np.dtype(dtypes[name]))
            if len(shape) == 3 and dtype == "uint8":
                if use_images:
                    images.append((name, shape))
            elif len(shape) <= 1:
                proprio.append((name, shape))
            else:
                raise ValueError(
                    f"observation {name!r} has shape {shape} and dtype {dtype}: the agent takes vectors or "
                    "HxWx3 uint8 images; flatten it in the task"
                )
        if not proprio and not images:
            raise ValueError("the env spec has no observations the agent can use")
        return cls(tuple(proprio), tuple(images))

    @classmethod
    def from_spec(cls, spec, use_images: bool = True) -> ObsLayout:
        """From an `rlhw.robot.spec.EnvSpec` (shapes per env instance)."""
        obs = spec.observations
        return cls.from_shapes({k: v.shape for k, v in obs.items()}, {k: v.dtype for k, v in obs.items()}, use_images)

    @property
    def proprio_dim(self) -> int:
        return int(sum(int(np.prod(s)) if s else 1 for _, s in self.proprio))

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.proprio) + tuple(n for n, _ in self.images)

    def to_dict(self) -> dict:
        return {"proprio": [[n, list(s)] for n, s in self.proprio], "images": [[n, list(s)] for n, s in self.images]}

    @classmethod
    def from_dict(cls, d: dict) -> ObsLayout:
        return cls(tuple((n, tuple(s)) for n, s in d["proprio"]), tuple((n, tuple(s)) for n, s in d.get("images", [])))


def obs_to_tensors(obs: Mapping[str, np.ndarray], layout: ObsLayout, device: torch.device) -> dict[str, torch.Tensor]:
    """Batch of numpy observations -> tensors on ``device``: proprio as one float32 [B, D], images uint8 [B,H,W,C]."""
    parts = [np.asarray(obs[n], dtype=np.float32).reshape(len(obs[n]), -1) for n, _ in layout.proprio]
    out = {"proprio": torch.as_tensor(np.concatenate(parts, axis=1) if parts else np.zeros((1, 0), np.float32))}
    for n, _ in layout.images:
        out[n] = torch.as_tensor(np.asarray(obs[n]))
    return {k: v.to(device, non_blocking=True) for k, v in out.items()}
