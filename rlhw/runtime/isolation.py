"""Apply a node's robot-loop isolation (``loop_cpus``, ``loop_priority``, ``learner_threads``) and keep
garbage-collection pauses out of the loop's steps.

Linux applies CPU affinity, scheduling policy and nice value per thread when given pid 0, so
`apply_loop_isolation` is called from the thread that runs the robot loop: the env worker's loop thread
(Ray's own threads in that process and the learner in the learner worker keep the OS defaults). What took
effect is returned as a record for run.json; a priority the OS refuses (EPERM: no CAP_SYS_NICE and no
rtprio limit) is a fallback with one warning per process, not an error, because the loop still runs
correctly, only with weaker timing, and loop health (late steps) shows the cost; the record and the warning
name the setting and the fix. Once: the real-arm configs ask for SCHED_FIFO 80 by default, so on a machine
that refuses it every loop (re)start would otherwise repeat the same warning. A CPU
the node does not have is an error: the config is wrong for this node and nothing sensible can be pinned.
"""

from __future__ import annotations

import gc
import os
import threading
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from rlhw.config.isolation import LoopIsolation
from rlhw.errors import ConfigError
from rlhw.runtime.heap import keep_freed_memory

T = TypeVar("T")

_SETTING = "cluster.node_groups[].env_configs[]"
_FIX = (
    "run as root, give the Python binary CAP_SYS_NICE (setcap cap_sys_nice+ep), or raise the user's "
    "rtprio/nice limit in /etc/security/limits.conf; or remove loop_priority"
)


_said: set[str] = set()  # the refusals this process has already warned about


@dataclass(frozen=True)
class OsScheduling:
    """The OS calls isolation needs, injectable so a test can play an OS that refuses (PermissionError)."""

    sched_getaffinity: Callable = os.sched_getaffinity
    sched_setaffinity: Callable = os.sched_setaffinity
    sched_setscheduler: Callable = os.sched_setscheduler
    sched_getscheduler: Callable = os.sched_getscheduler
    sched_getparam: Callable = os.sched_getparam
    setpriority: Callable = os.setpriority
    getpriority: Callable = os.getpriority
    node_cpus: Callable = lambda: set(range(os.cpu_count() or 1))  # noqa: E731 - the CPUs the node has


def apply_loop_isolation(iso: LoopIsolation, oscalls: OsScheduling = OsScheduling()) -> dict:
    """Pin and prioritise the CALLING thread as ``iso`` says; returns what took effect (read back from the
    OS) and any refusal, e.g. ``{"affinity": [2, 3], "policy": "SCHED_FIFO", "priority": 80}``."""
    record: dict = {}
    if iso.loop_cpus is not None:
        missing = sorted(set(iso.loop_cpus) - set(oscalls.node_cpus()))
        if missing:
            raise ConfigError(
                f"{_SETTING}.loop_cpus",
                f"this node has no CPU {missing} (it has {sorted(oscalls.node_cpus())}); list CPUs of this node",
            )
        oscalls.sched_setaffinity(0, set(iso.loop_cpus))
    record["affinity"] = sorted(oscalls.sched_getaffinity(0))
    if iso.loop_priority is not None:
        try:
            _set_priority(iso, oscalls)
        except PermissionError as e:
            record["refused"] = (
                f"{_SETTING}.loop_priority {_priority_text(iso)} refused by the OS ({e}); "
                f"falling back: the loop runs at the default priority. Fix: {_FIX}"
            )
            if record["refused"] not in _said:
                _said.add(record["refused"])
                warnings.warn(record["refused"], RuntimeWarning, stacklevel=2)
    record.update(_read_priority(oscalls))
    return record


def call_with_loop_isolation(iso: LoopIsolation, fn: Callable[[], T]) -> T:
    """``fn()`` on a short-lived thread under the robot loop's isolation, its result or its exception back here.

    Why: a thread Linux creates takes its creator's scheduling, so the threads ``fn`` starts keep the loop's.
    An env worker opens its served arm's client this way: grpc's threads (its event engine, and the Session
    stream's request feeder), started by the first channel, carry every step to the arm and back, and started
    from the Ray actor's own thread they ran at its nice 15 beside the learner, the fleet's late steps were
    mostly ``transport`` (docs/fleet.md). A refused priority is warned about once, as for the loop itself."""
    box: dict = {}

    def run() -> None:
        try:
            apply_loop_isolation(iso)
            box["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - raised again on the calling thread
            box["error"] = e

    opener = threading.Thread(target=run, name="rlhw-loop-scheduled-open", daemon=True)
    opener.start()
    opener.join()
    if "error" in box:
        raise box["error"]
    return box["value"]


def _priority_text(iso: LoopIsolation) -> str:
    p = iso.loop_priority
    return f"{{realtime: {p.realtime}}}" if p.realtime is not None else f"{{nice: {p.nice}}}"


def _set_priority(iso: LoopIsolation, oscalls: OsScheduling) -> None:
    p = iso.loop_priority
    if p.realtime is not None:
        oscalls.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(p.realtime))
    else:
        oscalls.setpriority(os.PRIO_PROCESS, 0, p.nice)


def _read_priority(oscalls: OsScheduling) -> dict:
    policy = oscalls.sched_getscheduler(0)
    if policy == os.SCHED_FIFO:
        return {"policy": "SCHED_FIFO", "priority": oscalls.sched_getparam(0).sched_priority}
    return {
        "policy": "SCHED_OTHER" if policy == os.SCHED_OTHER else str(policy),
        "nice": oscalls.getpriority(os.PRIO_PROCESS, 0),
    }


def apply_learner_threads(iso: LoopIsolation, default: int = 1) -> int:
    """torch's intra-op threads for a learner on this node (``learner_threads``, else ``default``); the
    process also keeps freed memory for reuse (`rlhw.runtime.heap`: an image update's tensors would
    page-fault in anew at every update otherwise)."""
    import torch

    keep_freed_memory()

    threads = iso.learner_threads or default
    torch.set_num_threads(threads)
    return torch.get_num_threads()


class GcGuard:
    """Keeps full (generation-2) collections out of the robot loop's steps.

    ``start()`` (once the loop is set up) moves everything alive into the permanent generation
    (`gc.freeze`), so later full collections do not walk the start-up heap, and raises the generation-2
    threshold so that the interpreter never starts one on its own. ``idle()`` runs the full collection the
    loop owes, called where the loop has time: between episodes, never inside a step. Young collections
    (gen 0/1) still run automatically: they only walk recent objects."""

    def __init__(self, collector=gc):
        self.gc = collector
        self.saved: tuple[int, int, int] | None = None
        self.full_collections = 0

    def start(self) -> None:
        self.gc.collect()
        self.gc.freeze()
        t0, t1, t2 = self.gc.get_threshold()
        self.saved = (t0, t1, t2)
        self.gc.set_threshold(t0, t1, 1 << 30)

    def idle(self) -> None:
        """A full collection now (between episodes)."""
        self.gc.collect(2)
        self.full_collections += 1

    def if_due(self) -> None:
        """The full collection the interpreter would have started by now (its own generation-2 schedule),
        for loops whose episodes never all end at once (batched simulators in async mode): called right
        after an observation is sent, while the policy computes the action."""
        if self.saved is not None and self.gc.get_count()[2] >= self.saved[2]:
            self.idle()

    def stop(self) -> None:
        """Back to the interpreter's own schedule (a process that goes on, e.g. a test, is left as it was)."""
        if self.saved is not None:
            self.gc.set_threshold(*self.saved)
            self.gc.unfreeze()
            self.saved = None
