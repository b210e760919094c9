"""Waiting for something another thread or process does, instead of sleeping a guessed time.

`wait_until` polls a predicate until it holds or a deadline passes and returns its last value,
so a test asserts on it (``assert wait_until(...)``): the wait ends as soon as the thing happens,
and a thing that never happens fails the test with the deadline, not with a race.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout_s: float = 5.0, period_s: float = 0.01) -> T:
    """``predicate()`` once it is truthy, else its value at the deadline (``timeout_s`` from now)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(period_s)  # a polling interval, not a settle: the deadline bounds the wait
    return predicate()


def process_gone(pid: int) -> bool:
    """Whether process ``pid`` (on this machine) has exited: no such process, or a zombie whose
    exit only waits to be reaped."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] == "Z"
    except OSError:
        return True
