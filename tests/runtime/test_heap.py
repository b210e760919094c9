"""`keep_freed_memory`: a learner re-allocates the same batch-sized tensors at every update; with glibc's
defaults each one is a fresh mapping whose pages fault in again, with freed memory kept they do not.
Each case runs in its own interpreter (the setting is process-wide and cannot be undone)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the setting is glibc's")

# 20 rounds of an update's pattern: three 8 MB buffers alive together (an image update's first conv output is
# 7.9 MB), filled, then all freed; prints the minor page faults of the last 10 rounds.
_PROBE = """
import resource, sys
import torch
from rlhw.runtime.heap import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
else:  # glibc's starting threshold, pinned: glibc raises it by itself after some frees, depending on history
    import ctypes, ctypes.util
    assert ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt(-3, 128 * 1024)
for i in range(20):
    if i == 10:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    alive = [torch.empty(2 * 1024 * 1024).fill_(1.0) for _ in range(3)]
    del alive
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    out = subprocess.run([sys.executable, "-c", _PROBE, mode], capture_output=True, text=True, timeout=120, check=True)
    return int(out.stdout.strip().splitlines()[-1])


def test_a_reallocated_tensor_faults_its_pages_in_again_unless_freed_memory_is_kept():
    pages = 8 * 1024 * 1024 // 4096
    assert _faults("default") >= 10 * pages, "glibc's 128 KiB threshold: every round faults at least 8 MB in anew"
    assert _faults("keep") < pages // 4, "kept: the rounds reuse the same heap memory"
