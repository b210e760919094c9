"""What the SpaceMouse and the terminal keyboard share: a background reader thread that keeps the newest
state, so the env's once-per-step ``read`` never waits on the device, and a typed death.

Why a thread: a human's device reports at its own rate (a SpaceMouse about every 8 ms while deflected,
nothing at rest; a terminal when a key is pressed). Reading it inside the env step would either block
the control loop or miss reports. The thread drains reports as they come; ``read`` takes a snapshot
under a lock, waiting at most its bound for the lock.

Death: when the thread's ``_poll`` raises (the HID layer's read error on unplug, EOF/EIO on a closed
terminal) the thread stores the error and ends; every later ``read`` raises ``RobotFault(FaultKind.TELEOP)``
naming the cause, so the env stops the arm instead of replaying the operator's last command.
"""

from __future__ import annotations

import abc
import threading
import time

from rlhw.errors import FaultKind, RobotFault
from rlhw.robot.teleop import TeleopDevice, TeleopEvent, TeleopReading


class ReaderThreadDevice(TeleopDevice):
    """A `TeleopDevice` whose reports are drained by one daemon thread calling ``_poll`` in a loop."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: str | None = None
        self._events: set[TeleopEvent] = set()
        self._changed = threading.Condition(self._lock)
        self.reports = 0  # reports (key batches, HID reports) taken in since open

    # -- subclass hooks ------------------------------------------------------------------------
    @abc.abstractmethod
    def _start(self, timeout_s: float) -> None:
        """Open the underlying handle (raise RobotFault(FaultKind.TELEOP) when absent)."""

    @abc.abstractmethod
    def _poll(self) -> None:
        """Take in whatever the device reported (waiting at most a few ms); raise when it is gone."""

    @abc.abstractmethod
    def _release(self) -> None:
        """Close the underlying handle; never raises."""

    @abc.abstractmethod
    def _snapshot(self) -> TeleopReading:
        """The current reading (called under the lock; events are added by ``read``)."""

    # -- the interface -------------------------------------------------------------------------
    def open(self, timeout_s: float = 5.0) -> None:
        if self._thread is not None and self._thread.is_alive():
            return
        self._stop.clear()
        self._error = None
        self._events = set()
        self.reports = 0
        self._start(timeout_s)
        self._thread = threading.Thread(target=self._run, name=f"teleop-{self.name}", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=1.0)
        self._release()

    def read(self, timeout_s: float = 0.05) -> TeleopReading:
        thread = self._thread
        if thread is None:
            raise RobotFault(FaultKind.TELEOP, f"{self.name} is not open (call open())")
        if not self._lock.acquire(timeout=timeout_s):
            raise RobotFault(
                FaultKind.TELEOP, f"{self.name}: no reading within {timeout_s:.3f} s (reader thread stuck)"
            )
        try:
            if self._error is not None or not thread.is_alive():
                why = self._error or "its reader thread ended"
                raise RobotFault(FaultKind.TELEOP, f"{self.name} is gone: {why}; the arm was stopped")
            reading = self._snapshot()
            events, self._events = frozenset(self._events), set()
        finally:
            self._lock.release()
        return TeleopReading(reading.twist, reading.gripper, reading.buttons, events, reading.active, reading.timestamp)

    def wait_reports(self, count: int, timeout_s: float) -> bool:
        """Wait until ``count`` reports were taken in (or the device died); False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: self.reports >= count or self._error is not None, timeout_s)

    def _note_report(self) -> None:
        """One report taken in (call under the lock): wakes ``wait_reports``."""
        self.reports += 1
        self._changed.notify_all()

    def _emit(self, event: TeleopEvent) -> None:
        """Queue an event for the next ``read`` (call under the lock)."""
        self._events.add(event)

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self._poll()
        except Exception as e:  # noqa: BLE001 - any read error means the device is gone; read() reports it
            with self._lock:
                self._error = f"{type(e).__name__}: {e}"
                self._changed.notify_all()

    @staticmethod
    def now() -> float:
        return time.time()
