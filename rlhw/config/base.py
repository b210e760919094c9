"""Base for every config model: unknown keys are errors (the loader turns them into suggestions)."""

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
