"""How many accelerators (CUDA GPUs) this process can use: what a live node reports in its inventory.

A module of the hardware layer, not a type plugin: the inventory counts accelerators on every node, and the
registered ``Accelerator`` type (rlhw/hardware/types/accelerator.py) answers with this same count.
"""

from __future__ import annotations

import os
import shutil
import subprocess

#: The variable that hides accelerators from a process; the planner's ``visible_accelerators``
#: is what the runtime writes into it.
VISIBLE_DEVICES_ENV = "CUDA_VISIBLE_DEVICES"


def count_accelerators(timeout_s: float = 5.0) -> int:
    """How many accelerators this process can use (honours CUDA_VISIBLE_DEVICES)."""
    physical = _count_with_nvidia_smi(timeout_s)
    if physical is None:
        # No nvidia-smi: without the NVIDIA kernel driver there is no CUDA device, and asking
        # torch would cost seconds of import for nothing.
        physical = _count_with_torch() if os.path.exists("/proc/driver/nvidia") else 0
    visible = os.environ.get(VISIBLE_DEVICES_ENV)
    if visible is None:
        return physical
    ids = []
    for part in visible.split(","):
        part = part.strip()
        if not part or part == "-1":
            break  # CUDA stops at the first invalid entry
        ids.append(part)
    return min(len(ids), physical)


def _count_with_nvidia_smi(timeout_s: float) -> int | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    try:
        out = subprocess.run([exe, "-L"], capture_output=True, text=True, timeout=timeout_s, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def _count_with_torch() -> int:
    """Fallback without nvidia-smi. torch already applies CUDA_VISIBLE_DEVICES, so the min() in
    detect() leaves its answer unchanged."""
    try:
        import torch  # imported here: a planner run must not pay for torch

        return int(torch.cuda.device_count())
    except Exception:
        return 0
