"""The client end of one Session stream, with a deadline on every answer.

Why a watcher thread: grpc's blocking stream iterator has no per-message timeout, and a step must
not wait forever for an answer. One thread per client checks the armed deadlines every 20 ms and
cancels a stream whose answer is late, which is far cheaper than a timer per step.
"""

from __future__ import annotations

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
        deadlines = self._watcher.deadlines()  # arm and disarm inline: this runs every step
        deadlines[self] = time.monotonic() + timeout_s
        try:
            return next(self._call)
        finally:
            deadlines.pop(self, None)

    def expire(self) -> None:
        self.timed_out = True
        self._call.cancel()

    def close(self) -> None:
        self._requests.put(None)
        self._call.cancel()


class DeadlineWatcher:
    """A single thread that cancels overdue stream reads (cheaper than a timer per step)."""

    def __init__(self):
        self._deadlines: dict[SessionStream, float] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def deadlines(self) -> dict[SessionStream, float]:
        """The stream -> deadline map to arm (set) and disarm (pop); starts the thread on first use."""
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="rlhw-env-deadlines", daemon=True)
                    self._thread.start()
        return self._deadlines

    def _run(self) -> None:
        while not self._closed.wait(0.02):
            now = time.monotonic()
            for stream, deadline in list(self._deadlines.items()):
                if now > deadline:
                    self._deadlines.pop(stream, None)
                    stream.expire()

    def close(self) -> None:
        self._closed.set()
