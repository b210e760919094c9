"""Keep freed memory in the process's heap, so a learner's batch-sized tensors do not page-fault anew at
every update.

Why: glibc serves an allocation of 128 KiB or more with a fresh ``mmap`` and returns it to the OS on free
(and trims the heap's top above a 128 KiB threshold), so every such tensor's pages fault in again the next
time it is allocated. An image update allocates many of them (a 64 px batch of 128 is 1.5 MB as uint8
and 6 MB as float; the first conv's output is 7.9 MB), and the faults are kernel time: measured with
tools/bench_sac_vision.py on the 2-core VM (one thread, cnn, batch 128), a median 57 ms of CPU per
update with glibc's defaults against 42 ms with freed memory kept (docs/learning.md, "What an image
update costs"). A learner's working set is the same at every update, so the memory kept is memory
it will use again.

How: ``mallopt`` (glibc only; elsewhere nothing changes): allocations up to 32 MiB (glibc's ceiling for
this setting on 64-bit) come from the heap, and the heap is never trimmed. Larger blocks (a replay
buffer) are still mapped and unmapped on their own.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import platform

M_TRIM_THRESHOLD = -1  # glibc's mallopt parameter numbers (malloc.h)
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 32 * 1024 * 1024  # DEFAULT_MMAP_THRESHOLD_MAX on 64-bit: the largest value glibc accepts
TRIM_THRESHOLD = 2**31 - 1  # an int: never trim the heap's top


def keep_freed_memory() -> bool:
    """Make glibc keep freed blocks up to 32 MiB for reuse instead of returning them to the OS; True when
    both settings took effect, False on a C library other than glibc (nothing is changed there)."""
    if platform.libc_ver()[0] != "glibc":
        return False
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    return bool(libc.mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
