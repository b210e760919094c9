"""Who may move the arm: one controlling session at a time, and a watchdog for silent controllers.

A controller that crashes or loses its network leaves the arm tracking its last target. The
watchdog notices the silence (no call for ``watchdog_s``), stops the arm and frees control so that
an operator can take over. Calls in progress (a 15 s reset) do not count as silence.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone

from rlhw.errors import RlhwError


class ControlConflict(RlhwError):
    """Another session controls the arm."""


@dataclass
class ControlState:
    session: str = ""
    since: float = 0.0
    last_seen: float = 0.0
    busy: int = 0
    busy_since: float = 0.0  # start of the oldest call in progress
    limit_s: float | None = None  # how long that call may take before the arm is stopped
    overrun_reported: bool = False


def _clock_time(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%H:%M:%S UTC")


class ControlLease:
    """The single-controller rule, plus the watchdog thread that enforces ``watchdog_s``."""

    def __init__(
        self,
        watchdog_s: float,
        on_silence: Callable[[str, float], None],
        on_overrun: Callable[[str, float], None] | None = None,
    ):
        self.watchdog_s = float(watchdog_s)
        self._on_silence = on_silence
        self._on_overrun = on_overrun
        self._lock = threading.Lock()
        self._state = ControlState()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="rlhw-env-watchdog", daemon=True)
        self._thread.start()

    # -- queries ------------------------------------------------------------------------------
    @property
    def controller(self) -> str:
        return self._state.session

    def snapshot(self) -> ControlState:
        with self._lock:
            s = self._state
            return ControlState(s.session, s.since, s.last_seen, s.busy, s.busy_since, s.limit_s, s.overrun_reported)

    # -- the rule -----------------------------------------------------------------------------
    def acquire(self, session: str, limit_s: float | None = None) -> None:
        """Take control for ``session`` (or confirm it has it) and mark it busy until `done`.

        ``limit_s`` bounds the call: if it is still running after that long (a hung driver), the
        watchdog stops the arm (control stays with the session, whose call has not returned).
        """
        now = time.time()
        with self._lock:
            s = self._state
            if s.session and s.session != session:
                raise self._conflict(s, now)
            if not s.session:
                self._state = s = ControlState(session=session, since=now, last_seen=now)
            if not s.busy:
                s.busy_since, s.limit_s, s.overrun_reported = now, limit_s, False
            s.busy += 1
            s.last_seen = now

    def check(self, session: str) -> None:
        """Raise ControlConflict if another session controls the arm (takes nothing)."""
        with self._lock:
            s = self._state
            if s.session and s.session != session:
                raise self._conflict(s, time.time())

    def _conflict(self, s: ControlState, now: float) -> ControlConflict:
        return ControlConflict(
            f"arm is controlled by session {s.session} since {_clock_time(s.since)} "
            f"(last call {now - s.last_seen:.1f} s ago); call Stop(release=true) from that session, "
            f"or wait: the watchdog releases control after {self.watchdog_s:g} s of silence"
        )

    def done(self, session: str) -> None:
        now = time.time()
        with self._lock:
            s = self._state
            if s.session == session:
                if s.busy:
                    s.busy -= 1
                s.last_seen = now

    def release(self, session: str | None = None) -> bool:
        """Give up control (only the holder's own ``session`` releases; None releases anyone)."""
        with self._lock:
            if not self._state.session or (session is not None and self._state.session != session):
                return False
            self._state = ControlState()
            return True

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=2.0)

    # -- watchdog -----------------------------------------------------------------------------
    def _watch(self) -> None:
        period = min(0.25, self.watchdog_s / 4)
        while not self._closed.wait(period):
            callback = None
            with self._lock:
                s = self._state
                now = time.time()
                if s.session and s.busy:
                    running = now - s.busy_since
                    if s.limit_s is not None and running > s.limit_s and not s.overrun_reported:
                        s.overrun_reported = True
                        callback, args = self._on_overrun, (s.session, running)
                elif s.session and now - s.last_seen >= self.watchdog_s:
                    callback, args = self._on_silence, (s.session, now - s.last_seen)
                    self._state = ControlState()
            if callback is not None:
                try:
                    callback(*args)
                except Exception:  # the watchdog must outlive a failing stop; the callback logs it
                    pass
