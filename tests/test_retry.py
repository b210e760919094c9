"""rlhw.retry: the one backoff loop, for what gRPC's retry policy does not cover (streams, Ray actor lookup)."""

from __future__ import annotations

import pytest

from rlhw.retry import retry


class FakeClock:
    """A clock that only moves when the code under test sleeps."""

    def __init__(self):
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def failing(times: int, error=ConnectionError):
    calls = []

    def call():
        calls.append(1)
        if len(calls) <= times:
            raise error("not up yet")
        return "answer"

    return call, calls


def test_a_call_that_comes_up_late_is_answered_after_doubling_waits():
    clock = FakeClock()
    call, calls = failing(3)
    assert retry(call, retry_on=ConnectionError, within_s=10.0, clock=clock, sleep=clock.sleep) == "answer"
    assert len(calls) == 4 and clock.sleeps == [0.05, 0.1, 0.2]


def test_the_waits_stop_growing_at_the_maximum_delay():
    clock = FakeClock()
    call, _ = failing(6)
    retry(
        call,
        retry_on=ConnectionError,
        within_s=100.0,
        first_delay_s=0.1,
        max_delay_s=0.3,
        clock=clock,
        sleep=clock.sleep,
    )
    assert clock.sleeps == [0.1, 0.2, 0.3, 0.3, 0.3, 0.3]


def test_after_the_bound_the_last_error_propagates_and_the_last_try_is_at_the_bound():
    clock = FakeClock()
    call, calls = failing(1000)
    with pytest.raises(ConnectionError, match="not up yet"):
        retry(call, retry_on=ConnectionError, within_s=1.0, clock=clock, sleep=clock.sleep)
    assert clock.now == pytest.approx(1.0) and sum(clock.sleeps) == pytest.approx(1.0)
    assert len(calls) == len(clock.sleeps) + 1


def test_other_errors_are_not_retried():
    clock = FakeClock()
    call, calls = failing(1, error=PermissionError)
    with pytest.raises(PermissionError):
        retry(call, retry_on=ConnectionError, within_s=10.0, clock=clock, sleep=clock.sleep)
    assert len(calls) == 1 and clock.sleeps == []
