"""A clock for pacing tests: time moves only when the code under test sleeps (or the test says so),
so paced times can be asserted exactly instead of within wall-clock bounds on a shared machine."""

from __future__ import annotations


class FakeClock:
    """Implements rlhw.robot.clock.Clock. ``wakeups`` lists the times every sleep ended at."""

    def __init__(self, start: float = 0.0):
        self.t = start
        self.wakeups: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0, f"slept a negative time: {seconds}"
        self.t += seconds
        self.wakeups.append(self.t)

    def sleep_until(self, deadline: float) -> None:
        self.t = max(self.t, deadline)
        self.wakeups.append(self.t)

    def advance(self, seconds: float) -> None:
        """Time passing outside the code under test (a slow policy, say)."""
        self.t += seconds
