"""Registry of hardware types: each type is one module in ``rlhw/hardware/types/``.

A hardware type declares its ``name`` (what users write as ``hardware.type``), the pydantic schema
of one ``hardware.configs`` entry, how its entries are enumerated on a node, and how a live node is
probed for them. Adding a robot or sensor type takes one new module in ``rlhw/hardware/types/``
whose class is decorated with ``@register_hardware``; the registry imports every module of that
package the first time a type is looked up, so nothing else has to change. Code outside the package
(a plugin) can use the same decorator, as long as its module is imported before the config loads.
"""

from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Sequence
from typing import ClassVar

from pydantic import Field

from rlhw.errors import ConfigError
from rlhw.schema import StrictModel


class HardwareEntry(StrictModel):
    """One declared device. Every type has the node it is attached to."""

    node_rank: int = Field(ge=0, description="global rank of the node the device is attached to")
    #: The field that names this device uniquely in a cluster ("robot_ip", "serial"); subclasses set it.
    identity_field: ClassVar[str] = ""

    def identity(self) -> str:
        """This device's name in the cluster: the value of its ``identity_field``."""
        return str(getattr(self, self.identity_field))


class HardwareType:
    """Base of every hardware type. Subclasses set ``name`` and ``entry_model``."""

    name: ClassVar[str]
    entry_model: ClassVar[type[HardwareEntry] | None] = None
    #: False for types that are detected, never declared under ``hardware:`` (accelerators).
    declarable: ClassVar[bool] = True

    @classmethod
    def enumerate(cls, node_rank: int, entries: Sequence[HardwareEntry]) -> list[HardwareEntry]:
        """The declared devices attached to ``node_rank``, in config (= hardware rank) order."""
        return [e for e in entries if e.node_rank == node_rank]

    @classmethod
    def probe(cls, entries: Sequence[HardwareEntry], timeout_s: float) -> dict[str, str | None]:
        """Look for each entry on this (live) node: identity -> None when found, else the problem.

        Every blocking step is bounded by ``timeout_s``."""
        raise NotImplementedError


_REGISTRY: dict[str, type[HardwareType]] = {}
_LOADED = False
#: The package whose modules are the built-in types. Named, not imported: the types import this registry,
#: and it finds them as plugins, the way `rlhw.robot.registry` finds drivers.
TYPES_PACKAGE = "rlhw.hardware.types"


def register_hardware(cls: type[HardwareType]) -> type[HardwareType]:
    """Class decorator: make a hardware type known under ``cls.name``."""
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise TypeError(f"{cls.__qualname__} must set a non-empty class attribute 'name'")
    other = _REGISTRY.get(name)
    if other is not None and other is not cls and other.__qualname__ != cls.__qualname__:
        raise TypeError(f"hardware type {name!r} is registered twice ({other.__module__} and {cls.__module__})")
    if cls.declarable and cls.entry_model is None:
        raise TypeError(f"hardware type {name!r} must set entry_model (its config schema)")
    _REGISTRY[name] = cls
    return cls


def _load_builtin_types() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    package = importlib.import_module(TYPES_PACKAGE)
    for info in pkgutil.iter_modules(package.__path__):
        if not info.name.startswith("_"):
            importlib.import_module(f"{TYPES_PACKAGE}.{info.name}")


def hardware_types() -> dict[str, type[HardwareType]]:
    """Every known hardware type by name (built-in modules are imported on first use)."""
    _load_builtin_types()
    return dict(_REGISTRY)


def declarable_types() -> list[str]:
    return sorted(n for n, t in hardware_types().items() if t.declarable)


def get_hardware_type(name: object) -> type[HardwareType]:
    """Look up a type a user may declare under ``hardware.type``; ConfigError lists the known ones."""
    types = hardware_types()
    known = declarable_types()
    if not isinstance(name, str):
        raise ConfigError("", f"hardware type must be a name such as {', '.join(map(repr, known))}, got {name!r}")
    t = types.get(name)
    if t is not None and t.declarable:
        return t
    if t is not None:
        raise ConfigError(
            "",
            f"{name} hardware is detected on each node, not declared; remove this hardware section "
            "(for a dry run, set accelerators_per_node on the node group instead)",
        )
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    if not close:
        close = [k for k in known if k.lower() == name.lower()]
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ConfigError("", f"unknown hardware type {name!r}{hint} (known types: {', '.join(known)})")
