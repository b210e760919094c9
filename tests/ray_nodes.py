"""Real Ray clusters for the tests: several raylets on this machine (ray.cluster_utils.Cluster).

Every test module that needs its own Ray cluster starts it here, so that the one weakness of starting
Ray on a busy 2-core CI runner is handled once: Ray gives a new raylet a fixed 30 s to register with the
GCS (`raylet_start_wait_time_s` in ray/_private/node.py, not configurable) and raises a bare Exception
when it misses that window. Two CI runs of the suite each hit that once, in different modules, while the
same modules passed alone; so a raylet that did not come up is started again, and what Ray logged about
the miss is printed for the record.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterator
from contextlib import contextmanager

import psutil
import ray
from ray.cluster_utils import Cluster as RayTestCluster

#: Attempts per raylet. A real defect fails every attempt, so it still fails the test.
START_ATTEMPTS = 3


def add_raylet(rc: RayTestCluster, **node_args):
    """``rc.add_node(**node_args)``, started again when Ray's registration window was missed."""
    for attempt in range(1, START_ATTEMPTS + 1):
        head = rc.head_node is None
        before = _own_sessions()
        try:
            return rc.add_node(**node_args)
        except Exception as e:  # noqa: BLE001 - Ray raises a bare Exception when a raylet misses its window
            # A failed head's session is the one this process created in this attempt (other test
            # runs on the machine have sessions of their own, named after their pid); a failed raylet
            # belongs to the running head's session, which must stay.
            new = sorted(_own_sessions() - before)
            session = new[-1] if head and new else (rc.head_node.get_session_dir_path() if rc.head_node else "")
            print(
                f"\n[ray_nodes] {'head' if head else 'raylet'} start {attempt}/{START_ATTEMPTS} failed ({e}); "
                f"load average {os.getloadavg()}\n{_session_processes(session)}\n{_ray_log_tails(session)}",
                flush=True,
            )
            if head and new:
                _kill_session(session)  # a head that never came up leaves its GCS and dashboard running
            if attempt == START_ATTEMPTS:
                raise


@contextmanager
def ray_cluster(head: dict, *more: dict, connect: bool = True) -> Iterator[RayTestCluster]:
    """A head raylet with ``head``'s arguments and one more raylet per ``more``; the test driver is
    connected to it (namespace ``rlhw``) unless ``connect`` is false. Shut down on exit."""
    if ray.is_initialized():
        ray.shutdown()
    rc = RayTestCluster()
    try:
        add_raylet(rc, **{"include_dashboard": False, **head})
        for node_args in more:
            add_raylet(rc, **node_args)
        if connect:
            ray.init(address=rc.address, namespace="rlhw", log_to_driver=False)
        yield rc
    finally:
        if ray.is_initialized():
            ray.shutdown()
        rc.shutdown()


def _own_sessions() -> set[str]:
    """Ray session directories this process created (Ray names them session_<time>_<pid>)."""
    return set(glob.glob(f"/tmp/ray/session_*_{os.getpid()}"))


def _session_processes(session: str) -> str:
    """One line per live process of ``session``: which of Ray's processes did come up."""
    if not session:
        return "no session directory of this process"
    lines = []
    for p in psutil.process_iter(["pid", "name", "cmdline", "cpu_times"]):
        cmd = " ".join(p.info["cmdline"] or ())
        if session in cmd:
            cpu = sum(p.info["cpu_times"][:2]) if p.info["cpu_times"] else 0.0
            lines.append(f"  pid {p.info['pid']} {p.info['name']} cpu {cpu:.1f}s")
    return f"processes of {session}:\n" + ("\n".join(lines) or "  none")


def _kill_session(session: str) -> None:
    """Kill the processes of a head that never came up (GCS, dashboard, monitors)."""
    for p in psutil.process_iter(["cmdline"]):
        if session in " ".join(p.info["cmdline"] or ()):
            try:
                p.kill()
            except psutil.Error:
                pass


def _ray_log_tails(session: str, lines: int = 8) -> str:
    """The last lines of the session's GCS and raylet logs: why registration was slow."""
    out = []
    for pattern in ("gcs_server.out", "raylet*.out", "raylet*.err"):
        for path in sorted(glob.glob(f"{session}/logs/{pattern}"))[-2:]:
            try:
                with open(path, errors="replace") as f:
                    tail = f.readlines()[-lines:]
            except OSError:
                continue
            out.append(f"--- {path}\n" + "".join(tail))
    return "\n".join(out)
