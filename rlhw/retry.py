"""Retry with exponential backoff, for the waits that gRPC's own retry policy cannot cover.

Unary gRPC calls retry through the channel's service config (rlhw.env.grpc_channel); what is left
is a stream being reopened after a server restart (RemoteEnv.reset over the Session stream) and a
named Ray actor that its creator has not made yet (Channel.connect). Both wait for something to
come up within a bound, then give up with the last error.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def retry(
    call: Callable[[], T],
    *,
    retry_on: type[BaseException] | tuple[type[BaseException], ...],
    within_s: float,
    first_delay_s: float = 0.05,
    max_delay_s: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """``call()``, again after a doubling delay (``first_delay_s`` up to ``max_delay_s``) while it
    raises ``retry_on``; once ``within_s`` has passed, the last such error propagates.

    The last wait is cut to the time left, so the final try happens at the bound, not before it.
    Anything else ``call`` raises propagates at once: only the named failures mean "not up yet".
    """
    give_up = clock() + within_s
    delay = first_delay_s
    while True:
        try:
            return call()
        except retry_on:
            left = give_up - clock()
            if left <= 0:
                raise
            sleep(min(delay, left))
            delay = min(delay * 2, max_delay_s)
