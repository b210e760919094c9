"""The run directory: everything a training run leaves behind, written by the controller (and rank 0).

<run_dir>/config.yaml          resolved config snapshot (what actually ran, overrides applied)
<run_dir>/run.json             status (a `RunStatus`: running / finished / stopped / interrupted / failed),
                               reason, env steps
<run_dir>/metrics.jsonl        one JSON object per log step (env_steps, train/..., eval/..., losses/..., perf/...)
<run_dir>/tb/                  TensorBoard events (same scalars)
<run_dir>/checkpoints/         latest.pt (+ step-<N>.pt), written atomically
<run_dir>/episodes/env<r>/     every collected transition (see rlhw.rl.episodes)
<run_dir>/learning_curve.png   eval success, train return (and the intervention rate, once an operator
                               took over) against env steps
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping
from datetime import datetime
from enum import Enum
from pathlib import Path
from typing import Any

import torch
import yaml

from rlhw.config.root import Config


class RunStatus(str, Enum):
    """Where a run stands, run.json's ``status``: read by tools (jq, dashboards), so the values stay as written."""

    RUNNING = "running"
    FINISHED = "finished"  # the target eval success was reached
    STOPPED = "stopped"  # the step budget ran out
    INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM: a person's or a scheduler's decision, resumable
    FAILED = "failed"

    def __str__(self) -> str:
        return self.value

    @property
    def ran_its_course(self) -> bool:
        """The run ended as asked (the target or the budget), not cut short."""
        return self in (RunStatus.FINISHED, RunStatus.STOPPED)


def _strict_json(value: Any) -> Any:
    """``value`` with every non-finite float (no eval yet, an empty loop-health window) as None: run.json
    is read by other tools (jq, dashboards), and NaN / Infinity are not JSON."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_strict_json(v) for v in value]
    return value


def default_run_dir(config_path: str | os.PathLike | None) -> Path:
    stem = Path(config_path).stem if config_path else "run"
    return Path("runs") / f"{stem}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


class RunDir:
    def __init__(self, path: str | os.PathLike):
        self.path = Path(path)
        self.path.mkdir(parents=True, exist_ok=True)
        self.checkpoints = self.path / "checkpoints"
        self.checkpoints.mkdir(exist_ok=True)
        self.episodes = self.path / "episodes"
        self.episodes.mkdir(exist_ok=True)
        self.metrics_path = self.path / "metrics.jsonl"
        self.config_path = self.path / "config.yaml"
        self.status_path = self.path / "run.json"
        self.plot_path = self.path / "learning_curve.png"

    # ---- config and status
    def write_config(self, config: Config) -> None:
        data = config.model_dump(mode="json")
        if isinstance(data.get("server"), dict) and data["server"].get("token") is not None:
            data["server"]["token"] = None  # never a secret on disk (pydantic masks it anyway); use token_env
        _atomic_write_text(self.config_path, yaml.safe_dump(data, sort_keys=False))

    def write_status(self, status: RunStatus, **fields: Any) -> None:
        """run.json, replaced atomically; ValueError for a status that is not a `RunStatus`."""
        record = _strict_json({"status": RunStatus(status).value, "updated": time.time(), **fields})
        _atomic_write_text(self.status_path, json.dumps(record, indent=2, default=str, allow_nan=False) + "\n")

    def read_status(self) -> dict:
        try:
            return json.loads(self.status_path.read_text())
        except (OSError, json.JSONDecodeError):
            return {}

    # ---- checkpoints
    def save_checkpoint(self, state: Mapping[str, Any], env_steps: int, keep_step_copy: bool = True) -> Path:
        latest = self.checkpoints / "latest.pt"
        tmp = self.checkpoints / "latest.pt.tmp"
        torch.save(dict(state), tmp)
        os.replace(tmp, latest)
        if keep_step_copy:
            step_path = self.checkpoints / f"step-{env_steps:09d}.pt"
            try:
                os.link(latest, step_path)
            except OSError:
                pass
        return latest

    def load_checkpoint(self) -> dict | None:
        latest = self.checkpoints / "latest.pt"
        if not latest.exists():
            return None
        return torch.load(latest, map_location="cpu", weights_only=False)

    def metrics(self) -> list[dict]:
        if not self.metrics_path.exists():
            return []
        rows = []
        for line in self.metrics_path.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                pass  # a torn last line after a crash
        return rows


class MetricsLogger:
    """metrics.jsonl + TensorBoard; the same scalars in both. Only one process (the controller) logs."""

    def __init__(self, run_dir: RunDir, tensorboard: bool = True):
        self.run_dir = run_dir
        self._f = open(run_dir.metrics_path, "a")
        self._tb = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            self._tb = SummaryWriter(log_dir=str(run_dir.path / "tb"))

    def log(self, env_steps: int, scalars: Mapping[str, float]) -> dict:
        row = {"env_steps": int(env_steps), "time": time.time()}
        for k, v in scalars.items():
            v = float(v)
            row[k] = v if math.isfinite(v) else None
        self._f.write(json.dumps(row) + "\n")
        self._f.flush()
        if self._tb is not None:
            for k, v in row.items():
                if k not in ("env_steps", "time") and v is not None:
                    self._tb.add_scalar(k, v, global_step=int(env_steps))
            self._tb.flush()
        return row

    def close(self) -> None:
        self._f.close()
        if self._tb is not None:
            self._tb.close()


def plot_learning_curve(run_dir: RunDir) -> Path | None:
    """Eval success rate and training episode return against env steps, from metrics.jsonl; a third panel with
    the intervention rate once any train episode had an operator's step."""
    rows = run_dir.metrics()
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ev = [(r["env_steps"], r["eval/success_rate"]) for r in rows if r.get("eval/success_rate") is not None]
    tr = [(r["env_steps"], r["train/episode_return"]) for r in rows if r.get("train/episode_return") is not None]
    iv = [(r["env_steps"], r["train/intervention_rate"]) for r in rows if r.get("train/intervention_rate") is not None]
    panels = 3 if any(rate > 0 for _, rate in iv) else 2
    fig, axes = plt.subplots(1, panels, figsize=(5 * panels, 3.6))
    ax1, ax2 = axes[0], axes[1]
    if ev:
        ax1.plot(*zip(*ev), marker="o")
    ax1.set(xlabel="env steps", ylabel="eval success rate", ylim=(-0.05, 1.05), title="evaluation")
    ax1.grid(alpha=0.3)
    if tr:
        ax2.plot(*zip(*tr))
    ax2.set(xlabel="env steps", ylabel="episode return", title="training episodes")
    ax2.grid(alpha=0.3)
    if panels == 3:
        axes[2].plot(*zip(*iv), color="tab:red")
        axes[2].set(xlabel="env steps", ylabel="share of steps", ylim=(-0.05, 1.05), title="operator interventions")
        axes[2].grid(alpha=0.3)
    fig.suptitle(run_dir.path.name)
    fig.tight_layout()
    tmp = run_dir.plot_path.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=90)
    plt.close(fig)
    os.replace(tmp, run_dir.plot_path)
    return run_dir.plot_path


def _atomic_write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
