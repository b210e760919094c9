"""Base for every config model: unknown keys are errors (the loader turns them into suggestions).

`StrictModel` and `as_text` are defined in `rlhw.schema`, below both the config and the hardware types, so
that the hardware types need not import the config; they are re-exported here for the config's modules."""

from __future__ import annotations

from rlhw.schema import StrictModel, as_text

__all__ = ["StrictModel", "as_text"]
