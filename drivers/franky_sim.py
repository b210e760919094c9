"""Launch franky-sim: a MuJoCo FR3 that speaks the real libfranka network protocol.

Tests, the RL pipeline and the smoke test use it to run the *real* `franka` driver (franky,
libfranka's UDP/TCP protocol, our driver process) on one machine without a robot::

    with FrankySim() as sim:                  # picks a free 127.0.0.X, waits until it accepts
        arm = FrankaArm(sim.host, FrankaController(realtime="ignore"))

Why a class and not a shell line: several simulators (and several test sessions) share one
machine, so the launcher must pick a loopback address whose ports 1337/1338 are free, retry when
another launcher wins the race for it, wait (bounded) until the robot port accepts, and never leave
the simulator running after the owner is gone (``close`` on exit, an ``atexit`` hook, a
finalizer, and a parent-death signal on Linux). ``kill()`` sends SIGKILL for fault-injection tests
("the link died mid-motion").
"""

from __future__ import annotations

import atexit
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from pathlib import Path

from rlhw.errors import HardwareError
from rlhw.network import FCI_PORT

#: libfranka's gripper port (TCP); robot commands go to rlhw.network.FCI_PORT.
GRIPPER_PORT = 1338

_live: weakref.WeakSet[FrankySim] = weakref.WeakSet()
_lock = threading.Lock()


def port_free(host: str, port: int) -> bool:
    """True when nothing is bound to TCP ``host:port`` (we can bind it ourselves)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind((host, port))
        return True
    except OSError:
        return False
    finally:
        s.close()


def free_loopback_host(exclude: set[str] | frozenset[str] = frozenset()) -> str:
    """A 127.0.0.X (X in 2..254) whose robot and gripper ports are free.

    The scan starts at a random X so that parallel test sessions rarely pick the same address;
    a lost race is still possible and `FrankySim.start` retries on it.
    """
    offset = random.randrange(253)
    for i in range(253):
        host = f"127.0.0.{2 + (offset + i) % 253}"
        if host not in exclude and port_free(host, FCI_PORT) and port_free(host, GRIPPER_PORT):
            return host
    raise HardwareError("no free loopback address 127.0.0.2-254 with ports 1337/1338 free for franky-sim")


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    """Linux: ask the kernel to SIGKILL the simulator when the process that started it dies."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:
        pass


class FrankySim:
    """One franky-sim process serving one simulated FR3 (with hand) on ``host``.

    ``host=None`` picks a free 127.0.0.X; an explicit host (e.g. "127.0.0.1" for
    configs/franky_sim.yaml) must have its ports free or `start` raises HardwareError.
    ``die_with_parent`` makes the kernel kill the simulator when the *thread* that started it
    exits (Linux PR_SET_PDEATHSIG): right for tests and scripts, wrong if you start it from a
    short-lived thread, so it can be turned off.
    """

    def __init__(
        self,
        host: str | None = None,
        start_timeout_s: float = 60.0,
        simulator: str = "mujoco",
        die_with_parent: bool = True,
        attempts: int = 4,
    ):
        if start_timeout_s <= 0:
            raise ValueError(f"start_timeout_s must be > 0, got {start_timeout_s}")
        self._requested_host = host
        self.host: str = host or ""
        self.start_timeout_s = float(start_timeout_s)
        self.simulator = simulator
        self.die_with_parent = die_with_parent
        self.attempts = max(1, attempts) if host is None else 1
        self._proc: subprocess.Popen | None = None
        self._log_path: Path | None = None
        self._finalizer: weakref.finalize | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> FrankySim:
        """Launch the simulator and wait until its robot port accepts (bounded by start_timeout_s)."""
        if self.running:
            return self
        deadline = time.monotonic() + self.start_timeout_s
        tried: set[str] = set()
        last_error = ""
        for _ in range(self.attempts):
            host = self._requested_host or free_loopback_host(tried)
            tried.add(host)
            if self._requested_host and not (port_free(host, FCI_PORT) and port_free(host, GRIPPER_PORT)):
                raise HardwareError(
                    f"franky-sim: {host}:{FCI_PORT}/{GRIPPER_PORT} is already in use (another simulator or robot "
                    "server?); stop it or pass host=None to pick a free 127.0.0.X"
                )
            self._launch(host)
            ok, last_error = self._wait_ready(deadline)
            if ok:
                return self
            self._terminate(signal.SIGKILL)
            if time.monotonic() >= deadline:
                break
        raise HardwareError(
            f"franky-sim did not start on {sorted(tried)} within {self.start_timeout_s:.0f}s: {last_error}"
        )

    def _launch(self, host: str) -> None:
        fd, log = tempfile.mkstemp(prefix=f"franky-sim-{host}-", suffix=".log")
        self._log_path = Path(log)
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        cmd = [
            sys.executable,
            "-c",
            "import sys; from franky_sim.run_server import main; sys.exit(main())",
            "-s",
            self.simulator,
            "--hostname",
            host,
        ]
        with os.fdopen(fd, "wb") as out:
            self._proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=_die_with_parent if self.die_with_parent else None,
            )
        self.host = host
        # (argv[0] is "-c"; argparse only reads argv[1:])
        with _lock:
            _live.add(self)
        # The finalizer holds the process, not self, so a forgotten simulator dies with its owner.
        self._finalizer = weakref.finalize(self, _reap, self._proc, self._log_path)

    def _wait_ready(self, deadline: float) -> tuple[bool, str]:
        """Ready = the robot port is bound and the simulator announced its address.

        Deliberately no TCP connect probe: franky-sim treats any connection as its client and
        stops accepting for several seconds after a probe closes (measured: 4-5 s).
        """
        assert self._proc is not None
        while time.monotonic() < deadline:
            code = self._proc.poll()
            if code is not None:
                return False, f"exited with code {code}: {self.log_tail()}"
            if not port_free(self.host, FCI_PORT) and "Connect to the server using" in self.log_tail(4000):
                time.sleep(0.1)  # the control loop starts right after the announcement
                if self._proc.poll() is None:
                    return True, ""
            time.sleep(0.1)
        return False, f"robot port {self.host}:{FCI_PORT} not bound in time; log: {self.log_tail()}"

    def stop(self, timeout_s: float = 5.0) -> None:
        """Shut down cleanly (SIGINT, as Ctrl+C), then SIGKILL after ``timeout_s``. Safe to call twice."""
        self._terminate(signal.SIGINT, timeout_s)

    def kill(self) -> None:
        """SIGKILL now: the link dies the way a pulled cable or crashed controller looks to libfranka."""
        self._terminate(signal.SIGKILL)

    close = stop

    def _terminate(self, sig: int, timeout_s: float = 5.0) -> None:
        proc = self._proc
        if proc is None:
            return
        if proc.poll() is None:
            try:
                proc.send_signal(sig)
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
            except ProcessLookupError:
                pass
        with _lock:
            _live.discard(self)

    # -- information ------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def log_tail(self, chars: int = 600) -> str:
        try:
            text = self._log_path.read_text(errors="replace") if self._log_path else ""
        except OSError:
            return ""
        return text[-chars:].strip().replace("\n", " | ")

    def __enter__(self) -> FrankySim:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"FrankySim(host={self.host!r}, pid={self.pid}, running={self.running})"


def _reap(proc: subprocess.Popen, log_path: Path | None) -> None:
    if proc.poll() is None:
        proc.kill()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    if log_path is not None:
        try:
            log_path.unlink()
        except OSError:
            pass


@atexit.register
def _stop_all() -> None:
    with _lock:
        sims = list(_live)
    for sim in sims:
        sim.kill()
