"""Accelerators (CUDA GPUs): detected on a live node, never declared under ``hardware:``.

In a dry run a node group states ``accelerators_per_node``; on a live cluster the detected count is
used and checked against that statement (``rlhw.hardware.check_inventory``).
"""

from __future__ import annotations

from typing import ClassVar

from rlhw.hardware.accelerators import VISIBLE_DEVICES_ENV, count_accelerators
from rlhw.hardware.registry import HardwareType, register_hardware

__all__ = ["VISIBLE_DEVICES_ENV", "Accelerator"]


@register_hardware
class Accelerator(HardwareType):
    name: ClassVar[str] = "Accelerator"
    declarable: ClassVar[bool] = False

    @classmethod
    def detect(cls, timeout_s: float = 5.0) -> int:
        """How many accelerators this process can use (honours CUDA_VISIBLE_DEVICES)."""
        return count_accelerators(timeout_s)
