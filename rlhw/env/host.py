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
from rlhw.errors import FaultKind

log = logging.getLogger("rlhw.env")


def _json_default(obj):
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if isinstance(obj, np.generic):
        return obj.item()
    return str(obj)


class StepResult:
    """An env step normalised to per-instance arrays (length num_envs)."""

    __slots__ = (
        "obs", "stamps", "reward", "terminated", "truncated", "success", "fault", "fault_message",
        "timing", "final_obs", "final_mask", "executed_action", "intervened",
    )

    def __init__(self, obs, stamps, reward, terminated, truncated, success, fault, fault_message, timing,
                 final_obs=None, final_mask=None, executed_action=None, intervened=None):
        self.obs = obs
        self.stamps = stamps
        self.reward = reward
        self.terminated = terminated
        self.truncated = truncated
        self.success = success
        self.fault = fault
        self.fault_message = fault_message
        self.timing = timing
        self.final_obs = final_obs
        self.final_mask = final_mask
        self.executed_action = executed_action  # float32, the action's shape; None = not reported
        self.intervened = intervened  # list of bools per instance; None = not reported


def _per_instance(value, n: int, dtype) -> list:
    if n == 1 and isinstance(value, (bool, float, int, np.bool_, np.floating, np.integer)):
        return [float(value)] if dtype is np.float32 else [bool(value)]
    arr = np.asarray(value if value is not None else 0, dtype=dtype).reshape(-1)
    if arr.size == 1 and n > 1:
        arr = np.repeat(arr, n)
    return arr.tolist()


_NO_FAULT = (None,)  # shared and immutable: one instance, no fault
_NO_MESSAGE = ("",)


def instance_faults(info: dict, n: int) -> tuple[list[FaultKind | None], list[str]]:
    """Per instance: the fault kind (None = none) and its message. The env's ``info["fault"]`` is
    typed here, where it enters the wire: a kind that is no FaultKind is a bug of the env (ValueError)."""
    fault = info.get("fault")
    message = info.get("fault_message")
    if n == 1 or fault is None or isinstance(fault, str):
        kinds = [FaultKind(fault) if fault else None] * n
        msgs = [str(message or "") if fault else ""] * n
        return kinds, msgs
    kinds = [FaultKind(f) if f else None for f in fault]
    msgs = list(message) if isinstance(message, (list, tuple)) else [str(message or "") if f else "" for f in fault]
    return kinds, [str(m or "") for m in msgs]


def _stamps(value) -> dict:
    """Capture times as name -> float (single env) or name -> float64[N] (BatchedEnv's list of dicts)."""
    if not value:
        return {}
    if isinstance(value, dict):
        return value
    names = {k for d in value if d for k in d}
    return {k: np.array([(d or {}).get(k, np.nan) for d in value], dtype=np.float64) for k in names}


def merged_timing(value) -> dict[str, float]:
    """The env's phase timings; for a batch, the slowest instance per phase."""
    if not value:
        return {}
    if isinstance(value, dict):
        return {"env." + k: float(v) for k, v in value.items()}
    out: dict[str, float] = {}
    for d in value:
        for k, v in (d or {}).items():
            out[f"env.{k}"] = max(out.get(f"env.{k}", 0.0), float(v))
    return out


def executed_per_instance(info: dict, action: np.ndarray, n: int):
    """(executed action or None, intervened per instance or None) from the env's info.

    ``info["executed_action"]`` is the action the arm really executed (a human's command instead
    of the client's); in a batch a row the env did not report is the requested action's row.
    """
    executed = info.get("executed_action")
    flags = info.get("intervened")
    if executed is not None:
        if n > 1 and isinstance(executed, (list, tuple)):
            executed = np.stack([action[i] if row is None else np.asarray(row, np.float32).reshape(action.shape[1:])
                                 for i, row in enumerate(executed)])
        executed = np.ascontiguousarray(executed, dtype=np.float32).reshape(action.shape)
    if flags is not None:
        if n > 1 and isinstance(flags, (list, tuple)):
            flags = [bool(f) if f is not None else False for f in flags]
        flags = _per_instance(flags, n, bool)
    return executed, flags


def final_observation_rows(value, obs: dict, n: int):
    """Same-step autoreset: (name -> batched final observation, mask) or (None, None)."""
    if n == 1 or value is None:
        return None, None
    if isinstance(value, dict):
        return value, None
    mask = [v is not None for v in value]
    if not any(mask):
        return None, [False] * n
    out = {}
    for name, current in obs.items():
        rows = np.zeros_like(current)
        for i, v in enumerate(value):
            if v is not None:
                rows[i] = v[name]
        out[name] = rows
    return out, mask


class EnvHost:
    """Owns the env for the server's lifetime."""

    def __init__(self, env, watchdog_s: float = 2.0, timing_window: int = 2000):
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
        self.faults.append(f"{time.time():.3f} watchdog: stopped the arm and released control of {session} "
                           f"after {silent_s:.1f} s without a call")

    def _on_overrun(self, session: str, running_s: float) -> None:
        self.faults.append(f"{time.time():.3f} overrun: a call by {session} has run {running_s:.1f} s, past its "
                           f"limit; stopped the arm (is a driver hung?)")
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
    def reset(self, seed: int | None) -> StepResult:
        t0 = time.perf_counter()
        with self._env_lock:
            obs, info = self.env.reset(seed=seed)
        self.stopped = False
        self.resets += 1
        timing = {"env": time.perf_counter() - t0}
        timing.update(merged_timing(info.get("timing")))
        n = self.num_envs
        fault, fmsg = instance_faults(info, n)
        return StepResult(obs, _stamps(info.get("timestamps")), None, None, None,
                          _per_instance(info.get("success", False), n, bool), fault, fmsg, timing)

    def step(self, action: np.ndarray) -> StepResult:
        out = self.step_fast(action)
        if type(out) is tuple:
            obs, stamps, reward, terminated, truncated, success, timing = out
            return StepResult(obs, stamps, [reward], [terminated], [truncated], [success], _NO_FAULT, _NO_MESSAGE, timing)
        return out

    def step_fast(self, action: np.ndarray):
        """`step`, with the common case (one instance, no fault) as a plain tuple ``(obs, stamps,
        reward, terminated, truncated, success, timing)``; other steps give their StepResult."""
        t0 = perf_counter()
        with self._env_lock:
            obs, reward, terminated, truncated, info = self.env.step(action)
        dt = perf_counter() - t0
        self.stopped = False
        self.steps += 1
        n = self.num_envs
        if n == 1 and info.get("fault") is None and "intervened" not in info and "executed_action" not in info:
            # the common case, without the general normalisation
            timing = {"env": dt}
            phases = info.get("timing")
            if phases:
                if type(phases) is dict:
                    for k, v in phases.items():
                        timing["env." + k] = float(v)
                else:
                    timing.update(merged_timing(phases))
            stamps = info.get("timestamps")
            return (obs, stamps if type(stamps) is dict else _stamps(stamps), float(reward), bool(terminated),
                    bool(truncated), bool(info.get("success", False)), timing)
        timing = {"env": dt}
        timing.update(merged_timing(info.get("timing")))
        fault, fmsg = instance_faults(info, n)
        for kind, msg in zip(fault, fmsg):
            if kind:
                self.faults.append(f"{time.time():.3f} {kind}: {msg}")
        final_obs, final_mask = final_observation_rows(info.get("final_observation"), obs, n)
        if final_obs is not None and final_mask is None:
            mask = info.get("_final_observation")
            if mask is None:
                mask = np.logical_or(terminated, truncated)
            final_mask = np.asarray(mask, dtype=bool).reshape(-1).tolist()
        executed, intervened = executed_per_instance(info, action, n)
        return StepResult(
            obs, _stamps(info.get("timestamps")), _per_instance(reward, n, np.float32),
            _per_instance(terminated, n, bool), _per_instance(truncated, n, bool),
            _per_instance(info.get("success", False), n, bool), fault, fmsg, timing, final_obs, final_mask,
            executed, intervened,
        )

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
            out[k] = {"mean_s": float(a.mean()), "p50_s": float(np.percentile(a, 50)),
                      "p99_s": float(np.percentile(a, 99)), "max_s": float(a.max()), "count": int(a.size)}
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
