"""The base of every validated model (config sections, hardware entries, driver options): unknown keys are
errors (the config loader turns them into suggestions), and a validated object is frozen.

It lives below ``rlhw.config`` and ``rlhw.hardware`` so that both can build on it while the dependency
between them points one way: ``rlhw.config`` validates hardware sections through the hardware registry,
and nothing in ``rlhw.hardware`` imports the config.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)


def as_text(value: Any) -> Any:
    """YAML reads ``label: 4090`` as an int; labels and names are text."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value
