"""What the SpaceMouse and the terminal keyboard share: a background reader thread that keeps the newest
state, so the env's once-per-step ``read`` never waits on the device, and a typed death.

Why a thread: a human's device reports at its own rate (a SpaceMouse about every 8 ms while deflected,
nothing at rest; a terminal when a key is pressed). Reading it inside the env step would either block
the control loop or miss reports. The thread drains reports as they come; ``read`` takes a snapshot
under a lock, waiting at most its bound for the lock.

Death: when the thread's ``_poll`` raises (the HID layer's read error on unplug, EOF/EIO on a closed
terminal) the thread stores the error and ends; every later ``read`` raises ``RobotFault(FaultKind.TELEOP)``
naming the cause, so the env stops the arm instead of replaying the operator's last command.

The verdict: ``verdict(timeout_s)`` is the one prompt-with-timeout of a person's device. It tells the person
(`tell_operator`: the console, or a served arm's operator pipe, which its parent echoes on its console) what is
asked and which key or button answers, then waits for the reader thread to take an answer, at most
``timeout_s`` by the device's clock. While asked, a device's keys and buttons answer and do nothing else (the
keyboard ignores every other key, so no key pressed meanwhile moves the arm later). No answer in time, a device
that dies or is closed, or one with nothing to answer with: None, "not judged", which keeps the classifier's call.
The env asks after its step's command went out and commands nothing until the answer (rlhw/robot/env.py), so the
arm holds its last target meanwhile. Ctrl-C (SIGINT) interrupts the wait as any other; a Stop reaches the arm
without the env's step (rlhw/env/host.py ``stop_arm``).
"""

from __future__ import annotations

import abc
import threading
import time
from collections.abc import Callable

from rlhw.errors import FaultKind, RobotFault
from rlhw.robot.teleop import TeleopDevice, TeleopEvent, TeleopReading, tell_operator

#: how often a waiting verdict looks at its clock besides when a report wakes it: an injected clock's jump (a test)
#: is seen this soon, and a closed device ends the wait this soon
VERDICT_TICK_S = 0.05


class ReaderThreadDevice(TeleopDevice):
    """A `TeleopDevice` whose reports are drained by one daemon thread calling ``_poll`` in a loop.

    ``clock`` (seconds, monotonic) times the verdict's wait, and whatever a subclass times (the keyboard's held keys).
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: str | None = None
        self._events: set[TeleopEvent] = set()
        self._changed = threading.Condition(self._lock)
        self.reports = 0  # reports (key batches, HID reports) taken in since open
        self.questions = 0  # verdicts asked since construction
        self._asking = False
        self._answer: bool | None = None

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

    def _answer_keys(self) -> str | None:
        """How a person answers a verdict on this device, for the console (e.g. "y = yes, n = no"); None when it
        has nothing to answer with (then nobody is asked). A subclass's key or button handler calls `_give_verdict`."""
        return None

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

    def verdict(self, timeout_s: float) -> bool | None:
        """Ask the person whether the task is done, and wait at most ``timeout_s`` (``env.teleop.verdict_timeout_s``)
        for the answer: True, False, or None (no answer in time, or no live device: not judged). See the module
        docstring for what the device does meanwhile."""
        keys, deadline = self._answer_keys(), self.clock() + timeout_s
        with self._lock:
            if keys is None or not self._listening():
                return None
            self._asking, self._answer = True, None
        try:
            tell_operator(
                f"[{self.name}] The success classifier says the task is done. Is it? {keys}. The arm holds still; "
                f"no answer within {timeout_s:g} s keeps the classifier's call."
            )
            with self._changed:
                self.questions += 1  # asked and said: `wait_asked` returns
                self._changed.notify_all()
                while self._answer is None and self._listening() and (left := deadline - self.clock()) > 0:
                    self._changed.wait(min(left, VERDICT_TICK_S))
                answer = self._answer
        finally:
            with self._lock:
                self._asking, self._answer = False, None
        said = {
            True: "yes, done",
            False: "no, not done: the episode's frames become the classifier's negatives",
            None: "no answer: the classifier's call stands",
        }
        tell_operator(f"[{self.name}] verdict: {said[answer]}")
        return answer

    def wait_asked(self, count: int, timeout_s: float) -> bool:
        """Wait until ``count`` verdicts were asked for (a test's or a tool's event); False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: self.questions >= count, timeout_s)

    def _listening(self) -> bool:
        """The reader thread takes reports in (call under the lock)."""
        thread = self._thread
        return thread is not None and thread.is_alive() and self._error is None and not self._stop.is_set()

    def _give_verdict(self, done: bool) -> None:
        """A key or button meant yes (``done``) or no while a verdict is asked (call under the lock): the first
        answer counts."""
        if self._asking and self._answer is None:
            self._answer = done
            self._changed.notify_all()

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
