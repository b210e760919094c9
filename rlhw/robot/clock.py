"""The clock a `RobotEnv` paces its steps on: ``now()`` and sleeping, behind a small protocol.

Why a protocol instead of calling `time` directly: the pacing logic (sleep to the end of the control
period, resynchronise after a late step instead of bursting) is what a real arm depends on, and it
can only be tested exactly when time is under the test's control. With `SystemClock` (the default)
nothing changes: it is ``time.monotonic`` and ``time.sleep``. A test passes a clock whose time
moves only when the env sleeps, and asserts the paced times to the float.

Wall-clock timestamps (``time.time()``, what arms and cameras stamp their readings with) are not
this clock's business: they label data, they do not pace anything.
"""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    """Monotonic seconds and sleeping on the same time base."""

    def now(self) -> float:
        """Monotonic seconds (arbitrary origin); only differences mean something."""
        ...

    def sleep(self, seconds: float) -> None:
        """Block for ``seconds`` (>= 0)."""
        ...

    def sleep_until(self, deadline: float) -> None:
        """Block until ``now() >= deadline`` (return at once when it already is)."""
        ...


class SystemClock:
    """The process's monotonic clock: what a real arm is paced on."""

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def sleep_until(self, deadline: float) -> None:
        remaining = deadline - time.monotonic()
        if remaining > 0:
            time.sleep(remaining)


SYSTEM_CLOCK = SystemClock()
