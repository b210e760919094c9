"""The `env` section of an rlhw config (placeholder: its owner fills it in)."""

from __future__ import annotations

from rlhw.config.base import StrictModel


class EnvConfig(StrictModel):
    pass
