"""Lazy package exports: the public names of a package, imported on first use.

Why: `rlhw placement` must not pay for importing Ray, torch or MuJoCo, yet users want
`from rlhw import Cluster` and `from rlhw.robot import make_env`. A package lists its names and
their modules; this returns the module-level ``__getattr__`` (PEP 562) that imports them on demand.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable


def lazy_getattr(package: str, exports: dict[str, str]) -> Callable[[str], object]:
    def __getattr__(name: str) -> object:
        if name in exports:
            return getattr(importlib.import_module(exports[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
