"""`EnvHost`: one RobotEnv behind the single-controller rule, with timings, faults and status.

Both wire protocols (rlhw.env.v1 and dm_env_rpc) go through the host, so control, watchdog and
validation are the same whichever protocol a client speaks. Env calls are serialised by a lock
(envs are not thread-safe); `stop` deliberately is not, so an emergency stop never waits behind a
slow reset.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from time import perf_counter

import numpy as np

from rlhw.env.control import ControlLease
from rlhw.env.validate import ActionChecker
from rlhw.robot.step import EnvContract, Reset, Step

log = logging.getLogger("rlhw.env")


def _json_default(obj):
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    return str(obj)


def _server_timing(env_s: float, phases: dict[str, float]) -> dict[str, float]:
    """The wire's timing of an env call: ``env`` (the whole call), then each of the env's phases as ``env.<phase>``."""
    timing = {"env": env_s}
    for k, v in phases.items():
        timing["env." + k] = v
    return timing


class EnvHost:
    """Owns the env for the server's lifetime."""

    def __init__(self, env: EnvContract, watchdog_s: float = 2.0, timing_window: int = 2000):
        self.env = env
        self.spec = env.spec
        self.num_envs = int(self.spec.num_envs)
        self.checker = ActionChecker(self.spec.action, self.num_envs)
        self._env_lock = threading.Lock()
        self.started = time.time()
        self.steps = 0
        self.resets = 0
        self.stopped = True  # nothing has commanded the arm yet
        self.faults: deque[str] = deque(maxlen=50)
        self._timings: deque[dict[str, float]] = deque(maxlen=timing_window)  # per step: phase -> seconds
        self.control = ControlLease(watchdog_s, self._on_silence, self._on_overrun)
        self._closed = False

    # -- control ------------------------------------------------------------------------------
    def _on_silence(self, session: str, silent_s: float) -> None:
        self.stop_arm(f"watchdog: controller {session} silent for {silent_s:.1f} s")
        self.faults.append(
            f"{time.time():.3f} watchdog: stopped the arm and released control of {session} "
            f"after {silent_s:.1f} s without a call"
        )

    def _on_overrun(self, session: str, running_s: float) -> None:
        self.faults.append(
            f"{time.time():.3f} overrun: a call by {session} has run {running_s:.1f} s, past its "
            f"limit; stopped the arm (is a driver hung?)"
        )
        self.stop_arm(f"call by {session} running for {running_s:.1f} s")

    def release(self, session: str, reason: str) -> bool:
        """Release control held by ``session`` and stop the arm (nobody is steering it any more)."""
        if self.control.controller != session:
            return False
        self.stop_arm(f"control released by {session}: {reason}")
        return self.control.release(session)

    def stop_arm(self, reason: str) -> None:
        log.info("stopping the arm (%s)", reason)
        try:
            self.env.stop()
        except Exception as e:  # a failed stop is a fault to report, not a reason to crash the server
            self.faults.append(f"{time.time():.3f} stop failed: {e!r}")
            log.exception("env.stop() failed")
            raise
        finally:
            self.stopped = True

    # -- env calls (caller holds control) -------------------------------------------------------
    def reset(self, seed: int | None) -> tuple[Reset, dict[str, float]]:
        """The env's reset and the server's timings of it (``env``, and the env's phases as ``env.<phase>``)."""
        t0 = perf_counter()
        with self._env_lock:
            first = self.env.reset(seed=seed)
        dt = perf_counter() - t0
        self.stopped = False
        self.resets += 1
        return first, _server_timing(dt, first.timing)

    def step(self, action: np.ndarray) -> tuple[Step, dict[str, float]]:
        """The env's step and the server's timings of it (as `reset`); each fault is kept for GetStatus."""
        t0 = perf_counter()
        with self._env_lock:
            step = self.env.step(action)
        dt = perf_counter() - t0
        self.stopped = False
        self.steps += 1
        for kind, message in zip(step.fault, step.fault_message):
            if kind:
                self.faults.append(f"{time.time():.3f} {kind}: {message}")
        return step, _server_timing(dt, step.timing)

    # -- timings and status ------------------------------------------------------------------------
    def record(self, timing: dict[str, float]) -> None:
        """Keep a step's phase timings (the last ``timing_window`` steps) for `timing_summary`.

        The dict is kept as it is (the caller does not touch it again): one append per step; the
        per-phase arrays are built only when someone asks for the summary.
        """
        self._timings.append(timing)

    def timing_summary(self) -> dict[str, dict[str, float]]:
        phases: dict[str, list[float]] = {}
        for timing in list(self._timings):
            for k, v in timing.items():
                phases.setdefault(k, []).append(v)
        out = {}
        for k, q in phases.items():
            a = np.asarray(q, dtype=np.float64)
            out[k] = {
                "mean_s": float(a.mean()),
                "p50_s": float(np.percentile(a, 50)),
                "p99_s": float(np.percentile(a, 99)),
                "max_s": float(a.max()),
                "count": int(a.size),
            }
        return out

    def env_status_json(self) -> str:
        try:
            return json.dumps(self.env.status(), default=_json_default)
        except Exception as e:
            return json.dumps({"error": f"env.status() failed: {e!r}"})

    def close(self) -> None:
        """Stop the arm first, then release the hardware. Safe to call twice."""
        if self._closed:
            return
        self._closed = True
        self.control.close()
        try:
            self.stop_arm("server shutting down")
        except Exception:
            pass
        self.control.release(None)
        try:
            self.env.close()
        except Exception:
            log.exception("env.close() failed")
