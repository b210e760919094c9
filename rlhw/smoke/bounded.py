"""Run one check with a deadline, and a target's checks in order, skipping after a failure.

Why threads and not signals: a driver may block inside C++ (libfranka, librealsense, OpenGL) where
no Python signal lands. The check runs in a daemon thread; when it misses its deadline the row says
FAIL with the timeout, the target's remaining checks are skipped (its driver may still be stuck),
and the smoke test moves on. Drivers that can really hang (franky) also bound themselves and kill
their driver process, so nothing is left running past the command.
"""

from __future__ import annotations

import queue
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rlhw.errors import RlhwError
from rlhw.smoke.hints import hint_for
from rlhw.smoke.results import FAIL, PASS, SKIP, CheckResult


@dataclass
class Outcome:
    """What a check function returns: the status and what it measured."""

    status: str
    value: str = ""
    detail: str = ""
    hint: str = ""
    measured: dict[str, Any] = field(default_factory=dict)
    #: Data for later checks of the same target (not reported).
    data: Any = None


def passed(value: str = "", detail: str = "", data: Any = None, **measured: Any) -> Outcome:
    return Outcome(PASS, value, detail, "", measured, data)


def failed(detail: str, value: str = "", hint: str | None = None, data: Any = None, **measured: Any) -> Outcome:
    return Outcome(FAIL, value, detail, hint_for(detail) if hint is None else hint, measured, data)


def skipped(detail: str, value: str = "", **measured: Any) -> Outcome:
    return Outcome(SKIP, value, detail, "", measured)


class Hung(Exception):
    pass


def call_bounded(fn: Callable[[], Any], timeout_s: float, name: str = "check") -> Any:
    """``fn()`` in a fresh daemon thread; its result, its exception, or `Hung` after ``timeout_s``."""
    return _Worker(name).call(fn, timeout_s, close=True)


class _Worker:
    """One daemon thread that runs calls in order. A target's checks share one, because some
    drivers are bound to the thread that opened them (an OpenGL context is current per thread)."""

    def __init__(self, name: str):
        self._jobs: queue.SimpleQueue[tuple[Callable[[], Any], dict, threading.Event] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name=f"smoke-{name}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            fn, box, done = job
            try:
                box["value"] = fn()
            except BaseException as e:  # noqa: BLE001 - re-raised in the caller's thread
                box["error"] = e
            done.set()

    def call(self, fn: Callable[[], Any], timeout_s: float, close: bool = False) -> Any:
        box: dict[str, Any] = {}
        done = threading.Event()
        self._jobs.put((fn, box, done))
        if close:
            self._jobs.put(None)
        if not done.wait(timeout_s):
            self._jobs.put(None)  # the thread ends after the stuck call returns, if it ever does
            raise Hung(f"did not finish within {timeout_s:g} s")
        if "error" in box:
            raise box["error"]
        return box.get("value")

    def close(self) -> None:
        self._jobs.put(None)


def _one_line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


class TargetRun:
    """The checks of one target (a robot, a camera, a node, an env server), run in order.

    ``run`` records one row per check. After a required check fails, later checks that need it
    (``needs_ok=True``, the default) are recorded as SKIP naming the failure; after a check hangs,
    every later check of the target is skipped, since its driver may still be stuck.
    """

    def __init__(self, node_rank: int, target: str, timeout_s: float):
        self.node_rank = node_rank
        self.target = target
        self.timeout_s = float(timeout_s)
        self.rows: list[CheckResult] = []
        self.blocked: str | None = None
        self.hung: str | None = None
        self._worker: _Worker | None = None

    def call(self, fn: Callable[[], Any], timeout_s: float | None = None) -> Any:
        """Run ``fn`` on this target's worker thread (for cleanup that must happen there)."""
        if self._worker is None:
            self._worker = _Worker(self.target)
        return self._worker.call(fn, self.timeout_s if timeout_s is None else timeout_s)

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None

    def run(
        self,
        check: str,
        fn: Callable[[], Outcome],
        *,
        required: bool = True,
        timeout_s: float | None = None,
        needs_ok: bool = True,
        uses_driver: bool = True,
    ) -> Outcome:
        """``uses_driver=False``: the check does not touch the (possibly stuck) driver, so it runs
        even after a hang, on a fresh thread."""
        if (self.hung is not None and uses_driver) or (needs_ok and self.blocked is not None):
            out = skipped(f"skipped: {self.hung or self.blocked}")
            self._record(check, out, required, 0.0)
            return out
        limit = self.timeout_s if timeout_s is None else timeout_s
        t0 = time.perf_counter()
        try:
            out = self.call(fn, limit) if uses_driver else call_bounded(fn, limit, check)
            if not isinstance(out, Outcome):
                raise TypeError(f"check {check!r} returned {type(out).__name__}, not an Outcome")
        except Hung as e:
            out = failed(f"{check} {e}; the device stopped answering")
            self.hung = f"{check} did not finish within {limit:g} s"
            self._worker = None  # stuck in the call; it exits by itself if the call ever returns
        except RlhwError as e:
            out = failed(_one_line(e))
        except Exception as e:  # a driver bug still makes a FAIL row, with where it happened
            where = traceback.extract_tb(e.__traceback__)[-1]
            out = failed(
                _one_line(f"{type(e).__name__}: {e}") + f" (at {where.filename.rsplit('/', 1)[-1]}:{where.lineno})"
            )
        duration = time.perf_counter() - t0
        if out.status == FAIL and required and self.blocked is None:
            self.blocked = f"{check} failed"
        self._record(check, out, required, duration)
        return out

    def note(self, check: str, out: Outcome, required: bool = False) -> None:
        """Record a row that needed no call (e.g. a motion the operator did not allow)."""
        self._record(check, out, required, 0.0)

    def _record(self, check: str, out: Outcome, required: bool, duration: float) -> None:
        self.rows.append(
            CheckResult(
                node_rank=self.node_rank,
                target=self.target,
                check=check,
                status=out.status,
                value=out.value,
                detail=out.detail,
                hint=out.hint,
                required=required,
                duration_s=round(duration, 4),
                measured=dict(out.measured),
            )
        )
