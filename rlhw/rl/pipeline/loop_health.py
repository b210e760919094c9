"""Robot-loop health of one env worker: observation-to-action latency, step lateness, step period.

Counted per env-worker step: with ``env.num_envs`` > 1 one step (and one latency) covers all instances.
Kept apart from the env worker so that the figures a benchmark reports have one definition.
"""

from __future__ import annotations

import math
import time
from collections import deque

import numpy as np

_KEEP = 20_000  # steps of history (a long run keeps its recent figures, in bounded memory)


class LoopTimer:
    """The env worker calls `episode_started` after it sent an episode's first observation, `actions_received`
    when the answer to an observation arrives, and `stepped` after each env step."""

    def __init__(self, clock=time.perf_counter):
        self.clock = clock
        self.latencies: deque[float] = deque(maxlen=_KEEP)  # observation sent -> action received (s)
        self.lateness: deque[float] = deque(maxlen=_KEEP)  # RobotEnv's info["timing"]["late"] (s)
        self.periods: deque[float] = deque(maxlen=_KEEP)  # time between consecutive steps of an episode (s)
        self._t_obs = 0.0
        self._t_step: float | None = None

    def episode_started(self) -> None:
        self._t_obs, self._t_step = self.clock(), None

    def actions_received(self) -> None:
        self.latencies.append(self.clock() - self._t_obs)

    def stepped(self, info: dict) -> None:
        """After an env step: its period (from the episode's previous step), and its lateness where the env is
        real-time (simulators advance simulated time and report none)."""
        now = self.clock()
        if self._t_step is not None:
            self.periods.append(now - self._t_step)
        self._t_obs = self._t_step = now
        timing = info.get("timing", {})
        late = timing.get("late", timing.get("env.late"))  # the env server prefixes env phases "env."
        if late is not None and math.isfinite(late):
            self.lateness.append(float(late))

    def summary(self, num_envs: int) -> dict:
        """Percentiles in milliseconds of every step so far (None where nothing was measured)."""
        lat = np.array(self.latencies) if self.latencies else np.zeros(1)
        out = {"steps": len(self.latencies), "latency_p50_ms": float(np.percentile(lat, 50) * 1e3),
               "latency_p99_ms": float(np.percentile(lat, 99) * 1e3), "latency_max_ms": float(lat.max() * 1e3),
               "timed_steps": len(self.lateness), "late_steps": None, "lateness_p99_ms": None,
               "period_p50_ms": None, "period_p99_ms": None, "num_envs": num_envs}
        if self.lateness:
            late = np.array(self.lateness)
            out.update(late_steps=int((late > 0).sum()), lateness_p99_ms=float(np.percentile(late, 99) * 1e3))
        if self.periods:
            per = np.array(self.periods)
            out.update(period_p50_ms=float(np.percentile(per, 50) * 1e3),
                       period_p99_ms=float(np.percentile(per, 99) * 1e3))
        return out
