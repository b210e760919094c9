"""A verdict asked of a person's device on another thread, as the env's step asks it, for tests to answer."""

from __future__ import annotations

import threading
from collections.abc import Callable

from drivers.teleop.base import ReaderThreadDevice

UNANSWERED = "still waiting"


class Asked:
    """``ask()`` (default: ``device.verdict(timeout_s)``) running on its own thread; built once the device has put the
    question (an event, `ReaderThreadDevice.wait_asked`), so a key sent after it is an answer."""

    def __init__(self, device: ReaderThreadDevice, timeout_s: float = 10.0, ask: Callable[[], object] | None = None):
        self.result: object = UNANSWERED
        asked = device.questions + 1
        self._ask = ask or (lambda: device.verdict(timeout_s))
        self._thread = threading.Thread(target=self._run, name="asks-a-verdict", daemon=True)
        self._thread.start()
        assert device.wait_asked(asked, 5.0), "the device was not asked"

    def _run(self) -> None:
        self.result = self._ask()

    def returned(self) -> object:
        """What the asking call returned, once it has (a liveness bound, not a timing: it returns at its event)."""
        self._thread.join(5.0)
        assert not self._thread.is_alive(), "the verdict is still awaited"
        return self.result
