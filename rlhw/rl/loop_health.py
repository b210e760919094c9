"""Robot-loop health of one env worker: observation-to-action latency, observation age, step lateness and
period.

Counted per env-worker step: with ``env.num_envs`` > 1 one step (and one latency) covers all instances.
Kept apart from the env worker so that the figures a benchmark reports have one definition.
"""

from __future__ import annotations

import logging
import math
import time
from collections import Counter, deque

import numpy as np

_KEEP = 20_000  # steps of history (a long run keeps its recent figures, in bounded memory)
_KEEP_LATE = 20  # late steps listed with their phases in the summary (all are counted by phase)

log = logging.getLogger(__name__)


def _env_phase(timing: dict, name: str) -> float | None:
    """An env phase's seconds: RobotEnv's key in-process, ``env.<key>`` through the env server."""
    value = timing.get(name, timing.get("env." + name))
    return float(value) if value is not None and math.isfinite(value) else None


def late_step_phases(latency: float, step_call: float, timing: dict, prev_observe: float) -> dict[str, float]:
    """Where the time went between the deadline before a late step and that step's command (s).

    A real-time env is late when, counted from its previous period's end, the previous step's observation
    (``observe``), the env worker's bookkeeping, observation send and the policy's answer
    (``obs_to_action``), the transport of the step call and the env's ``command`` phase exceed the period."""
    command = _env_phase(timing, "command") or 0.0
    inside = command + (_env_phase(timing, "wait") or 0.0) + (_env_phase(timing, "observe") or 0.0)
    return {
        "observe": prev_observe,
        "obs_to_action": latency,
        "transport": max(step_call - inside, 0.0),
        "command": command,
    }


class LoopTimer:
    """The env worker calls `episode_started` after it sent an episode's first observation, `actions_received`
    when the answer to an observation arrives, and `stepped` after each env step."""

    def __init__(self, clock=time.perf_counter):
        self.clock = clock
        self.latencies: deque[float] = deque(maxlen=_KEEP)  # observation sent -> action received (s)
        self.lateness: deque[float] = deque(maxlen=_KEEP)  # RobotEnv's info["timing"]["late"] (s)
        self.periods: deque[float] = deque(maxlen=_KEEP)  # time between consecutive steps of an episode (s)
        self.obs_ages: deque[float] = deque(maxlen=_KEEP)  # RobotEnv's info["timing"]["obs_age"] (s; real time)
        self._t_obs = self._t_action = self._prev_observe = 0.0
        self._t_step: float | None = None
        self.late_by_phase: Counter[str] = Counter()  # late steps counted by the phase that made them late
        self.late_recent: deque[dict] = deque(maxlen=_KEEP_LATE)
        self.deadlines = self.missed = 0  # every timed step and every late one, since the start (not bounded)

    def episode_started(self) -> None:
        self._t_obs, self._t_step, self._prev_observe = self.clock(), None, 0.0

    def actions_received(self) -> None:
        self._t_action = self.clock()
        self.latencies.append(self._t_action - self._t_obs)

    def stepped(self, timing: dict[str, float]) -> None:
        """After an env step, with its phase timings (`Step.timing`): its period (from the episode's previous step),
        and its lateness where the env is real-time (simulators advance simulated time and report none)."""
        now = self.clock()
        if self._t_step is not None:
            self.periods.append(now - self._t_step)
        self._t_obs = self._t_step = now
        age = _env_phase(timing, "obs_age")
        if age is not None:
            self.obs_ages.append(age)
        late = _env_phase(timing, "late")
        if late is not None:
            self.lateness.append(late)
            self.deadlines += 1
            self.missed += late > 0
            if late > 0 and self.latencies:
                self._late_step(late, now - self._t_action, timing)
        self._prev_observe = _env_phase(timing, "observe") or 0.0

    def _late_step(self, late: float, step_call: float, timing: dict) -> None:
        """Count and log a late step under the phase that took longest (the one that made it late)."""
        phases = late_step_phases(self.latencies[-1], step_call, timing, self._prev_observe)
        phase = max(phases, key=phases.get)
        self.late_by_phase[phase] += 1
        entry = {"late_ms": late * 1e3, "phase": phase, "phases_ms": {k: v * 1e3 for k, v in phases.items()}}
        self.late_recent.append(entry)
        log.warning(
            "robot loop step late by %.1f ms, mostly %s (%s)",
            entry["late_ms"],
            phase,
            ", ".join(f"{k} {v:.1f} ms" for k, v in entry["phases_ms"].items()),
        )

    def summary(self, num_envs: int) -> dict:
        """Percentiles in milliseconds of the last steps (up to 20,000; None where nothing was measured).

        May be called while the loop runs: each history is copied first."""
        lat = np.array(list(self.latencies)) if self.latencies else np.zeros(1)
        out = {
            "steps": len(self.latencies),
            "latency_p50_ms": float(np.percentile(lat, 50) * 1e3),
            "latency_p99_ms": float(np.percentile(lat, 99) * 1e3),
            "latency_max_ms": float(lat.max() * 1e3),
            "timed_steps": len(self.lateness),
            "late_steps": None,
            "lateness_p99_ms": None,
            "period_p50_ms": None,
            "period_p99_ms": None,
            "obs_age_p50_ms": None,
            "obs_age_p99_ms": None,
            "num_envs": num_envs,
            "deadlines": self.deadlines,
            "missed_deadlines": self.missed,
        }
        if self.obs_ages:
            age = np.array(list(self.obs_ages))
            out.update(
                obs_age_p50_ms=float(np.percentile(age, 50) * 1e3), obs_age_p99_ms=float(np.percentile(age, 99) * 1e3)
            )
        if self.lateness:
            late = np.array(list(self.lateness))
            out.update(
                late_steps=int((late > 0).sum()),
                lateness_p99_ms=float(np.percentile(late, 99) * 1e3),
                late_by_phase=dict(self.late_by_phase),
                late_recent=list(self.late_recent),
            )
        if self.periods:
            per = np.array(list(self.periods))
            out.update(
                period_p50_ms=float(np.percentile(per, 50) * 1e3), period_p99_ms=float(np.percentile(per, 99) * 1e3)
            )
        return out


def loop_metrics(summaries: list[dict]) -> dict[str, float]:
    """The metrics row's robot-loop columns: the worst env worker's figures (one robot's bad tail is the
    news), and late steps summed; NaN where no env worker measured a figure."""

    def worst(key: str) -> float:
        values = [s[key] for s in summaries if s.get(key) is not None]
        return max(values) if values else float("nan")

    late = [s["late_steps"] for s in summaries if s.get("late_steps") is not None]
    timed = sum(s["timed_steps"] for s in summaries)
    return {
        "loop/obs_to_action_p50_ms": worst("latency_p50_ms"),
        "loop/obs_to_action_p99_ms": worst("latency_p99_ms"),
        "loop/obs_age_p99_ms": worst("obs_age_p99_ms"),
        "loop/late_step_share": sum(late) / timed if late and timed else float("nan"),
    }
