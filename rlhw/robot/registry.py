"""Drivers by name: `rlhw.drivers_registry`, re-exported under the name the drivers import it by.

The registry itself sits below ``rlhw.config`` (the config checks ``env.teleop.device`` against it), so it
lives outside the robot package, which imports the config.
"""

from __future__ import annotations

from rlhw.drivers_registry import (
    DRIVER_MODULES,
    TELEOP_MODULES,
    arm_class,
    camera_class,
    known_drivers,
    make_arm,
    make_camera,
    register_arm,
    register_camera,
    register_teleop,
    teleop_class,
    teleop_devices,
)

__all__ = [
    "DRIVER_MODULES",
    "TELEOP_MODULES",
    "arm_class",
    "camera_class",
    "known_drivers",
    "make_arm",
    "make_camera",
    "register_arm",
    "register_camera",
    "register_teleop",
    "teleop_class",
    "teleop_devices",
]
