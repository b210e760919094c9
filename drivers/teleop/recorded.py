"""A HID handle that plays recorded SpaceMouse reports: easyhid.HIDDevice's interface, no USB.

pyspacemouse's ``SpaceMouseDevice`` talks to its HID handle through ``open``, ``read(size)``,
``set_nonblocking``, ``write`` (LED), ``close`` and four string attributes. `RecordedHid` offers exactly
those, so the real decoding path runs on recorded bytes. ``unplug()`` makes the next read fail the way
easyhid fails when the kernel drops the device (``HIDException("Failed to read from HID device: -1")``).

Report files (``*.hex``): one report per line as hex bytes; ``#`` starts a comment.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable
from pathlib import Path


def load_reports(path: str | Path) -> list[bytes]:
    """The reports of a ``.hex`` file, in order."""
    reports = []
    for line in Path(path).read_text().splitlines():
        text = line.split("#", 1)[0].strip()
        if text:
            reports.append(bytes.fromhex(text))
    return reports


class RecordedHid:
    """Feeds queued reports to pyspacemouse, one per ``read``; empty reads when none is queued."""

    product_string = "recorded SpaceMouse"
    manufacturer_string = "3Dconnexion (recorded)"
    release_number = 0
    serial_number = ""

    def __init__(self, reports: Iterable[bytes] = ()):
        self._queue: deque[bytes] = deque(bytes(r) for r in reports)
        self._lock = threading.Lock()
        self._unplugged = False
        self._open = False
        self.nonblocking = False
        self.delivered = 0  # reports handed to the reader so far

    # -- what the test or benchmark does -------------------------------------------------------
    def push(self, report: bytes) -> None:
        with self._lock:
            self._queue.append(bytes(report))

    def unplug(self) -> None:
        self._unplugged = True

    def plug(self) -> None:
        """The device is back (a fresh handle: the queue is dropped)."""
        with self._lock:
            self._queue.clear()
        self._unplugged = False

    # -- easyhid.HIDDevice's interface, as pyspacemouse uses it --------------------------------
    def open(self) -> None:
        if self._unplugged:
            from easyhid import HIDException

            raise HIDException("Failed to open device")
        self._open = True

    def close(self) -> None:
        self._open = False

    def set_nonblocking(self, enable: bool) -> None:
        self.nonblocking = bool(enable)

    def write(self, data) -> int:
        return len(data)

    def read(self, size: int = 64, timeout=None) -> bytearray:
        from easyhid import HIDException

        if not self._open:
            raise HIDException("HIDDevice not open")
        if self._unplugged:
            raise HIDException("Failed to read from HID device: -1")
        with self._lock:
            if not self._queue:
                return bytearray()
            report = self._queue.popleft()
            self.delivered += 1
        return bytearray(report[:size])
