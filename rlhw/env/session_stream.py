"""The client end of one Session stream, with a deadline on every answer.

Why a watcher thread: grpc's blocking stream iterator has no per-message timeout, and a step must
not wait forever for an answer. One thread per client cancels a stream whose answer is late. It
sleeps until the earliest armed deadline, and a step wakes it only when it arms an earlier one than
that (the first step, a shorter timeout): arming is a dict entry and a comparison, and a client that
steps, or idles, costs the thread one wake-up per timeout, not a poll every few milliseconds (a poll
every 20 ms cost an idle client 6 CPU ms a second, and a learner that steps slowly about as much).
"""

from __future__ import annotations

import math
import queue
import threading
import time


class SessionStream:
    """One Session stream. Requests (serialised SessionRequests) go through a queue; a shared
    `DeadlineWatcher` cancels the call when an answer is late, and ``timed_out`` says so."""

    def __init__(self, session_method, metadata, watcher: DeadlineWatcher):
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._call = session_method(iter(self._requests.get, None), metadata=metadata)
        self._watcher = watcher
        self.timed_out = False

    def send(self, message: bytes) -> None:
        self._requests.put(message)

    def receive(self, timeout_s: float) -> bytes:
        """The next answer; raises grpc.RpcError (cancelled when late) or StopIteration (closed)."""
        watcher = self._watcher
        watcher.arm(self, time.monotonic() + timeout_s)  # arm and disarm inline: this runs every step
        try:
            return next(self._call)
        finally:
            watcher.deadlines.pop(self, None)

    def expire(self) -> None:
        self.timed_out = True
        self._call.cancel()

    def close(self) -> None:
        self._requests.put(None)
        self._call.cancel()


class DeadlineWatcher:
    """A single thread that cancels overdue stream reads (cheaper than a timer per step).

    ``deadlines`` maps each armed stream to its deadline (`time.monotonic`); `arm` sets one, and a
    reader disarms its own by popping it."""

    def __init__(self):
        self.deadlines: dict[SessionStream, float] = {}
        self._wake = threading.Event()
        self._closed = False
        self._next = math.inf  # when the thread looks next; inf while it looks (every arm wakes it then)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def arm(self, stream: SessionStream, deadline: float) -> None:
        """Cancel ``stream``'s call at ``deadline`` unless it is disarmed first; starts the thread on first use."""
        self.deadlines[stream] = deadline
        if deadline < self._next:  # earlier than the thread will look: wake it to sleep less
            if self._thread is None:
                self._start()
            self._wake.set()

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="rlhw-env-deadlines", daemon=True)
                self._thread.start()

    def _run(self) -> None:
        while not self._closed:
            self._wake.clear()
            self._next = math.inf  # an arm from here on wakes the next wait at once
            now = time.monotonic()
            earliest = math.inf
            for stream, deadline in list(self.deadlines.items()):
                if now > deadline:
                    self.deadlines.pop(stream, None)
                    stream.expire()
                else:
                    earliest = min(earliest, deadline)
            self._next = earliest
            self._wake.wait(None if earliest == math.inf else earliest - now)

    def close(self) -> None:
        self._closed = True
        self._wake.set()
