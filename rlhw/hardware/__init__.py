"""Hardware types (one module each in rlhw/hardware/types/) and live-node probing."""

from __future__ import annotations

from rlhw.hardware.inventory import Inventory, check_inventory, probe_local
from rlhw.hardware.registry import (
    HardwareEntry,
    HardwareType,
    declarable_types,
    get_hardware_type,
    hardware_types,
    register_hardware,
)

__all__ = [
    "HardwareEntry",
    "HardwareType",
    "Inventory",
    "check_inventory",
    "declarable_types",
    "get_hardware_type",
    "hardware_types",
    "probe_local",
    "register_hardware",
]
