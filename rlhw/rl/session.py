"""Bookkeeping shared by both runners: counters, cadence (log / eval / checkpoint), stop rule, progress bar.

The runner decides how env steps and updates happen; the session decides when to log, evaluate, save and
stop, and writes the run directory's metrics, plot and status. Only the controller process holds one.
"""

from __future__ import annotations

import signal
import sys
import time
from collections import deque
from dataclasses import dataclass

import numpy as np

from rlhw.config.root import Config
from rlhw.rl.rundir import MetricsLogger, RunDir, RunStatus, plot_learning_curve
from rlhw.runtime.stop_signals import cause_text


@dataclass
class Counters:
    env_steps: int = 0
    updates: int = 0
    episodes: int = 0
    evals: int = 0
    best_success: float = float("nan")
    last_success: float = float("nan")


@dataclass
class StopReason:
    status: RunStatus  # finished (target reached), stopped (step budget), interrupted (Ctrl-C, SIGTERM), failed
    reason: str
    signal: signal.Signals | None = None  # what interrupted the run (run.json's "signal")

    def __post_init__(self) -> None:
        self.status = RunStatus(self.status)

    @property
    def exit_code(self) -> int:
        """`rlhw train`'s exit status: 0 when it ran its course, 128 + the signal when interrupted, else 1."""
        if self.status is RunStatus.INTERRUPTED:
            return 128 + int(self.signal or signal.SIGINT)
        return 0 if self.status.ran_its_course else 1


def interrupted(env_steps: int, saved: bool, cause: signal.Signals = signal.SIGINT) -> StopReason:
    """Ctrl-C or SIGTERM is a user's (or a scheduler's) decision, not a failure: say where the run stands
    and how to go on."""
    return StopReason(
        RunStatus.INTERRUPTED,
        f"{cause_text(cause)} at {env_steps} env steps; "
        f"{'checkpoint saved' if saved else 'checkpoint NOT saved'}; "
        "continue with --resume and the same --run-dir",
        cause,
    )


class TrainingSession:
    def __init__(self, config: Config, run_dir: RunDir, counters: Counters | None = None):
        self.cfg = config.train
        self.config = config
        self.run_dir = run_dir
        self.c = counters or Counters()
        self.logger = MetricsLogger(run_dir)
        self._returns: deque[float] = deque(maxlen=20)
        self._successes: deque[float] = deque(maxlen=20)
        self._lengths: deque[int] = deque(maxlen=20)
        self._intervention_rates: deque[float] = deque(maxlen=20)
        self._losses: dict[str, list[float]] = {}
        self._extra: dict[str, float] = {}
        self._next_log = (self.c.env_steps // self.cfg.log_every_steps + 1) * self.cfg.log_every_steps
        self._next_eval = (self.c.env_steps // self.cfg.eval_every_steps + 1) * self.cfg.eval_every_steps
        self._next_ckpt = (self.c.env_steps // self.cfg.checkpoint_every_steps + 1) * self.cfg.checkpoint_every_steps
        self._t0 = time.time()
        self._steps0 = self.c.env_steps
        self._last_log_t, self._last_log_steps = self._t0, self.c.env_steps
        self.stop: StopReason | None = None
        self.status_extra: dict = {}  # more fields for run.json (e.g. the learner ranks' weight digests)
        self._bar = None
        if self.cfg.progress:
            from tqdm import tqdm

            self._bar = tqdm(
                total=self.cfg.max_env_steps,
                initial=self.c.env_steps,
                unit="step",
                dynamic_ncols=True,
                desc="train",
                mininterval=0.5 if sys.stderr.isatty() else 10.0,
            )
        run_dir.write_status(RunStatus.RUNNING, env_steps=self.c.env_steps, started=self._t0)

    # ---- inputs from the runner
    def add_env_steps(self, n: int) -> None:
        self.c.env_steps += int(n)
        if self._bar is not None:
            self._bar.update(int(n))

    def add_episode(self, episode_return: float, success: bool, length: int, interventions: int = 0) -> None:
        """A finished train episode; ``interventions``: how many of its steps an operator executed."""
        self.c.episodes += 1
        self._returns.append(float(episode_return))
        self._successes.append(float(success))
        self._lengths.append(int(length))
        self._intervention_rates.append(interventions / length if length else 0.0)
        if self._bar is not None and interventions:
            self._bar.set_postfix(self._postfix(), refresh=False)

    def _postfix(self) -> dict:
        out = {
            "eval_success": f"{self.c.last_success:.2f}",
            "alpha": f"{self._extra.get('losses/alpha', float('nan')):.3f}",
        }
        if any(self._intervention_rates):
            out["intervened"] = f"{np.mean(self._intervention_rates):.0%}"
        return out

    def add_losses(self, metrics: dict[str, float], n_updates: int) -> None:
        self.c.updates += int(n_updates)
        for k, v in metrics.items():
            self._losses.setdefault(k, []).append(float(v))

    def increment(self, key: str, n: float = 1.0) -> None:
        """A running count logged with every row (e.g. robot faults)."""
        self._extra[key] = self._extra.get(key, 0.0) + float(n)

    def set_extra(self, **scalars: float) -> None:
        self._extra.update({k: float(v) for k, v in scalars.items()})

    # ---- cadence
    def eval_due(self) -> bool:
        return self.c.env_steps >= self._next_eval or self.c.env_steps >= self.cfg.max_env_steps

    def checkpoint_due(self) -> bool:
        if self.c.env_steps >= self._next_ckpt:
            self._next_ckpt = (
                self.c.env_steps // self.cfg.checkpoint_every_steps + 1
            ) * self.cfg.checkpoint_every_steps
            return True
        return False

    def log_due(self) -> bool:
        return self.c.env_steps >= self._next_log

    def record_eval(self, results: list[tuple[float, bool, int, int]], extra: dict[str, float] | None = None) -> None:
        """Log an evaluation of ``(return, success, length, intervened steps)`` episodes (plus ``extra`` figures of
        the period, e.g. a `VerdictTally`'s) and decide whether the target is reached. An episode an operator
        helped in (an env with ``env.teleop`` may take over in evaluation too) counts as a failure: the success
        rate is the policy's alone. Where the env has a simulator judge, success is its verdict."""
        self._next_eval = (self.c.env_steps // self.cfg.eval_every_steps + 1) * self.cfg.eval_every_steps
        self.c.evals += 1
        returns = [r for r, _, _, _ in results]
        successes = [bool(s) and not helped for _, s, _, helped in results]
        rate = float(np.mean(successes)) if successes else float("nan")
        self.c.last_success = rate
        self.c.best_success = rate if np.isnan(self.c.best_success) else max(self.c.best_success, rate)
        helped = float(np.mean([h > 0 for _, _, _, h in results])) if results else float("nan")
        self.log(
            {
                "eval/success_rate": rate,
                "eval/episode_return": float(np.mean(returns)) if returns else float("nan"),
                "eval/episodes": len(successes),
                "eval/intervened_episodes": helped,
                **(extra or {}),
            }
        )
        plot_learning_curve(self.run_dir)
        if self._bar is not None:
            self._bar.set_postfix(self._postfix())
        if successes and rate >= self.cfg.target_success:
            self.stop = StopReason(RunStatus.FINISHED, f"eval success {rate:.2f} >= target {self.cfg.target_success}")

    def check_budget(self) -> None:
        if self.stop is None and self.c.env_steps >= self.cfg.max_env_steps:
            self.stop = StopReason(
                RunStatus.STOPPED,
                f"reached max_env_steps={self.cfg.max_env_steps} (best eval success {self.c.best_success:.2f})",
            )

    def log(self, extra: dict[str, float] | None = None) -> dict:
        """Write one metrics row: training stats since the last row plus ``extra``."""
        now = time.time()
        row: dict[str, float] = {
            "train/episode_return": float(np.mean(self._returns)) if self._returns else float("nan"),
            "train/success_rate": float(np.mean(self._successes)) if self._successes else float("nan"),
            "train/episode_length": float(np.mean(self._lengths)) if self._lengths else float("nan"),
            # share of the steps of the recent train episodes that an operator executed (mean per episode)
            "train/intervention_rate": float(np.mean(self._intervention_rates))
            if self._intervention_rates
            else float("nan"),
            "train/episodes": self.c.episodes,
            "train/updates": self.c.updates,
            "eval/success_rate": float("nan"),
            "perf/env_steps_per_s": self._rate(now),
            "perf/elapsed_s": now - self._t0,
        }
        row.update({k: float(np.mean(v)) for k, v in self._losses.items() if v})
        row.update(self._extra)
        row.update(extra or {})
        self._losses = {}
        self._last_log_t, self._last_log_steps = now, self.c.env_steps
        self._next_log = (self.c.env_steps // self.cfg.log_every_steps + 1) * self.cfg.log_every_steps
        return self.logger.log(self.c.env_steps, row)

    def _rate(self, now: float) -> float:
        """Env steps per second since the previous row (the previous rate again when no step happened)."""
        if self.c.env_steps > self._last_log_steps:
            self._last_rate = (self.c.env_steps - self._last_log_steps) / max(now - self._last_log_t, 1e-9)
        return getattr(self, "_last_rate", 0.0)

    def finish(self, stop: StopReason | None = None) -> StopReason:
        stop = stop or self.stop or StopReason(RunStatus.STOPPED, "ended")
        self.stop = stop
        if self._bar is not None:
            self._bar.close()
        plot_learning_curve(self.run_dir)
        self.logger.close()
        self.run_dir.write_status(
            stop.status,
            reason=stop.reason,
            env_steps=self.c.env_steps,
            updates=self.c.updates,
            episodes=self.c.episodes,
            best_eval_success=self.c.best_success,
            last_eval_success=self.c.last_success,
            wall_s=time.time() - self._t0,
            **({"signal": stop.signal.name} if stop.signal else {}),
            **self.status_extra,
        )
        return stop
