"""Which torch device a learner or worker runs on, from ``train.device``: refused with the fix when cuda is
asked for and this process sees no GPU, rather than failing deep inside the first tensor copy."""

from __future__ import annotations

import torch

from rlhw.errors import ConfigError


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("train.device", "cuda requested but this process sees no GPU; use auto or cpu")
    return torch.device(name)
