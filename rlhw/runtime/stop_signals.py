"""SIGTERM ends a run the way Ctrl-C does.

systemd, job schedulers (Slurm, Kubernetes) and `kill PID` stop a process with SIGTERM, and Python's default
for it is to die on the spot: no stop sent to the arm by the runner, no checkpoint, no run.json. Within
`sigterm_interrupts()` SIGTERM raises `Terminated` in the main thread instead. It is a KeyboardInterrupt, so
every path that already ends a run cleanly on Ctrl-C (stop the robots, save a checkpoint, write run.json as
``interrupted``) ends it on SIGTERM too, with no second implementation; `interrupt_cause` names which one it
was for run.json and the exit status (128 + the signal number: 130 for Ctrl-C, 143 for SIGTERM).

``ray.init`` installs its own SIGTERM handler (``sys.exit``, which would end the run as "failed" without
stopping the robots first); `caller_sigterm_kept` around it puts back a handler the caller chose.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Terminated(KeyboardInterrupt):
    """Raised in the main thread by SIGTERM within `sigterm_interrupts`."""

    def __init__(self, signum: int = signal.SIGTERM):
        self.signal = signal.Signals(signum)
        super().__init__(self.signal.name)


def interrupt_cause(e: KeyboardInterrupt) -> signal.Signals:
    """The signal behind an interrupt: SIGTERM for `Terminated`, else SIGINT (Ctrl-C)."""
    return e.signal if isinstance(e, Terminated) else signal.SIGINT


def cause_text(cause: signal.Signals) -> str:
    return "Ctrl-C" if cause is signal.SIGINT else cause.name


def _raise_terminated(signum: int, _frame) -> None:
    raise Terminated(signum)


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextmanager
def sigterm_interrupts() -> Iterator[None]:
    """Within: SIGTERM raises `Terminated` in the main thread. Called off the main thread (where Python
    cannot install a handler) it changes nothing."""
    if not _in_main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def caller_sigterm_kept() -> Iterator[None]:
    """Around a call that replaces the SIGTERM handler (``ray.init``): afterwards, the handler the caller had
    installed is back. The OS default or an ignored SIGTERM is left to the call, as Ray intends."""
    previous = signal.getsignal(signal.SIGTERM) if _in_main_thread() else None
    try:
        yield
    finally:
        if callable(previous):
            signal.signal(signal.SIGTERM, previous)
