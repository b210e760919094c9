"""Drivers by name, so a config can say ``driver: franka`` and nothing imports franky until then.

A driver module registers its classes with ``@register_arm("name")`` / ``@register_camera("name")``,
a teleop device with ``@register_teleop("name")`` (the ``env.teleop.device`` it implements).
``make_arm(name, **kwargs)`` imports the module that provides ``name`` on first use (the maps below),
so importing rlhw never imports franky, pyrealsense2, mujoco or a HID library. An unknown name is a
ConfigError that lists the known names.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TypeVar

from rlhw.errors import ConfigError

T = TypeVar("T", bound=type)

#: name -> modules tried in order until one registers the name (the mujoco driver may live under
#: drivers.mujoco_sim if ``drivers.mujoco`` clashes with the ``mujoco`` package).
DRIVER_MODULES: dict[str, tuple[str, ...]] = {
    "franka": ("drivers.franka",),
    "realsense": ("drivers.realsense",),
    "mujoco": ("drivers.mujoco", "drivers.mujoco_sim"),
    "mock": ("drivers.mock",),
}

#: teleop device name (``env.teleop.device``) -> the module that registers it.
TELEOP_MODULES: dict[str, tuple[str, ...]] = {
    "spacemouse": ("drivers.teleop.spacemouse",),
    "keyboard": ("drivers.teleop.keyboard",),
    "scripted": ("drivers.teleop.scripted",),
}

_ARMS: dict[str, type] = {}
_CAMERAS: dict[str, type] = {}
_TELEOPS: dict[str, type] = {}


def register_arm(name: str) -> Callable[[T], T]:
    """Class decorator: make an `Arm` implementation available as ``make_arm(name)``."""
    return _register(_ARMS, name, "arm")


def register_camera(name: str) -> Callable[[T], T]:
    """Class decorator: make a `Camera` implementation available as ``make_camera(name)``."""
    return _register(_CAMERAS, name, "camera")


def register_teleop(name: str) -> Callable[[T], T]:
    """Class decorator: make a `TeleopDevice` (with its ``from_config``) available as ``env.teleop.device: name``."""
    return _register(_TELEOPS, name, "teleop")


def _register(table: dict[str, type], name: str, kind: str) -> Callable[[T], T]:
    def deco(cls: T) -> T:
        old = table.get(name)
        if old is not None and (old.__module__, old.__qualname__) != (cls.__module__, cls.__qualname__):
            raise ValueError(
                f"{kind} driver {name!r} registered twice: {old.__module__}.{old.__qualname__} and {cls.__module__}.{cls.__qualname__}"
            )
        table[name] = cls
        return cls

    return deco


def known_drivers() -> list[str]:
    return sorted(set(DRIVER_MODULES) | set(_ARMS) | set(_CAMERAS))


def teleop_devices() -> list[str]:
    """The teleop device names a config may give (their modules are not imported)."""
    return sorted(set(TELEOP_MODULES) | set(_TELEOPS))


def _lookup(
    table: dict[str, type], name: str, kind: str, path: str, modules: dict[str, tuple[str, ...]] = DRIVER_MODULES
) -> type:
    if name in table:
        return table[name]
    known = known_drivers() if modules is DRIVER_MODULES else teleop_devices()
    if name not in modules:
        raise ConfigError(path, f"unknown {kind} driver {name!r}; known drivers: {', '.join(known)}")
    errors = []
    for module in modules[name]:
        try:
            importlib.import_module(module)
        except ModuleNotFoundError as e:
            if e.name == module:  # the module itself is absent; try the next location
                errors.append(f"{module} not found")
                continue
            raise ConfigError(path, f"{kind} driver {name!r} needs a package that is not installed: {e}") from e
        except ImportError as e:
            raise ConfigError(path, f"{kind} driver {name!r} failed to import ({module}): {e}") from e
        if name in table:
            return table[name]
    listed = [n for n in known if n in table or n in modules]
    detail = "; ".join(errors) if errors else f"the module does not provide a {kind}"
    raise ConfigError(path, f"no {kind} driver named {name!r} ({detail}); known {kind} drivers: {', '.join(listed)}")


def arm_class(name: str, path: str = "env.driver") -> type:
    return _lookup(_ARMS, name, "arm", path)


def camera_class(name: str, path: str = "env.camera_driver") -> type:
    return _lookup(_CAMERAS, name, "camera", path)


def teleop_class(name: str, path: str = "env.teleop.device") -> type:
    return _lookup(_TELEOPS, name, "teleop", path, TELEOP_MODULES)


def make_arm(driver: str, /, **kwargs):
    """Construct (but do not connect) the arm driver registered as ``driver``."""
    return arm_class(driver)(**kwargs)


def make_camera(driver: str, /, **kwargs):
    """Construct (but do not open) the camera driver registered as ``driver``."""
    return camera_class(driver)(**kwargs)
