"""Who may move the arm: one controlling session at a time, and a watchdog for silent controllers.

A controller that crashes or loses its network leaves the arm tracking its last target. The
watchdog notices the silence (no call for ``watchdog_s``), stops the arm and frees control so that
an operator can take over. Calls in progress (a 15 s reset) do not count as silence.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

from rlhw.errors import RlhwError


class ControlConflict(RlhwError):
    """Another session controls the arm."""


@dataclass
class ControlState:
    session: str = ""
    since: float = 0.0
    last_seen: float = 0.0
    busy: int = 0


def _clock_time(t: float) -> str:
    return datetime.fromtimestamp(t, tz=timezone.utc).strftime("%H:%M:%S UTC")


class ControlLease:
    """The single-controller rule, plus the watchdog thread that enforces ``watchdog_s``."""

    def __init__(self, watchdog_s: float, on_silence: Callable[[str, float], None]):
        self.watchdog_s = float(watchdog_s)
        self._on_silence = on_silence
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
            return ControlState(s.session, s.since, s.last_seen, s.busy)

    # -- the rule -----------------------------------------------------------------------------
    def acquire(self, session: str) -> None:
        """Take control for ``session`` (or confirm it has it) and mark it busy until `done`."""
        now = time.time()
        with self._lock:
            s = self._state
            if s.session and s.session != session:
                raise ControlConflict(
                    f"arm is controlled by session {s.session} since {_clock_time(s.since)} "
                    f"(last call {now - s.last_seen:.1f} s ago); call Stop(release=true) from that session, "
                    f"or wait: the watchdog releases control after {self.watchdog_s:g} s of silence"
                )
            if not s.session:
                self._state = s = ControlState(session=session, since=now, last_seen=now)
            s.busy += 1
            s.last_seen = now

    def done(self, session: str) -> None:
        with self._lock:
            s = self._state
            if s.session == session:
                s.busy = max(0, s.busy - 1)
                s.last_seen = time.time()

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
            with self._lock:
                s = self._state
                silent = time.time() - s.last_seen
                if not s.session or s.busy or silent < self.watchdog_s:
                    continue
                session = s.session
                self._state = ControlState()
            try:
                self._on_silence(session, silent)
            except Exception:  # the watchdog must outlive a failing stop; the callback logs it
                pass
