"""One policy, two drivers: eval success of the same checkpoint in MuJoCo and through the real franka driver
against franky-sim, and the obs->action latency of `rlhw eval` against training's on the same env.

For each training seed: train reach with configs/sim_reach.yaml in MuJoCo (`rlhw train`, unless --run-dirs
gives finished runs), then evaluate its checkpoint with `rlhw.rl.evaluate.evaluate` (what `rlhw eval` runs)
for --episodes episodes on configs/sim_reach.yaml (MuJoCo) and on configs/franky_sim.yaml (a franky-sim
started here). Both drivers get the same eval seeds (2**32 + k), so the same targets.

Reported per seed and driver: success rate with its 95 % Wilson interval, mean steps of the successful
episodes, obs->action latency p50/p99; and training's obs->action latency from the run's run.json (same env:
MuJoCo, through the pipeline's step lane) against eval's in MuJoCo (the policy in the loop's own process).

    .venv/bin/python tools/bench_eval.py --seeds 0 1 --episodes 30 --json runs/bench_eval.json
    # the same, with franky-sim's controller as configs/franky_sim.yaml had it before (slow tracking):
    .venv/bin/python tools/bench_eval.py --seeds 0 1 --run-dirs RUN0 RUN1 --episodes 30 \
        --franky-set cluster.node_groups.0.hardware.configs.0.controller.relative_dynamics_factor=0.1
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rlhw.config import load_config  # noqa: E402
from rlhw.rl.checkpoint import PolicyCheckpoint  # noqa: E402
from rlhw.rl.evaluate import evaluate  # noqa: E402
from rlhw.rl.rundir import RunDir  # noqa: E402


def train(seed: int, run_dir: Path) -> float:
    t = time.monotonic()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "rlhw.cli.main",
            "train",
            "configs/sim_reach.yaml",
            f"train.seed={seed}",
            "train.progress=false",
            "--run-dir",
            str(run_dir),
        ],
        cwd=ROOT,
        check=True,
    )
    return time.monotonic() - t


def summary(report) -> dict:
    steps = [e.steps for e in report.episodes if e.success]
    h = report.loop_health
    return {
        "success_rate": report.success_rate,
        "ci95": list(report.ci95),
        "episodes": len(report.episodes),
        "faults": sum(e.fault is not None for e in report.episodes),
        "mean_steps_successful": float(np.mean(steps)) if steps else None,
        "steps": [e.steps for e in report.episodes],
        "success": [e.success for e in report.episodes],
        "latency_p50_ms": h.get("latency_p50_ms"),
        "latency_p99_ms": h.get("latency_p99_ms"),
        "late_steps": h.get("late_steps"),
        "timed_steps": h.get("timed_steps"),
    }


def overlap(a: list[float], b: list[float]) -> bool:
    return a[0] <= b[1] and b[0] <= a[1]


def bench_seed(seed: int, run_dir: Path, episodes: int, out_root: Path, franky_set: list[str]) -> dict:
    from drivers.franky_sim import FrankySim

    row: dict = {"seed": seed, "run_dir": str(run_dir)}
    if not (run_dir / "checkpoints" / "latest.pt").exists():
        row["train_s"] = train(seed, run_dir)
    status = json.loads((run_dir / "run.json").read_text())
    row["train_status"] = status["status"]
    row["train_best_eval_success"] = status.get("best_eval_success")
    health = status["loop_health"][0]
    row["train_latency_p50_ms"], row["train_latency_p99_ms"] = health["latency_p50_ms"], health["latency_p99_ms"]
    ckpt = PolicyCheckpoint.load(run_dir, "--checkpoint")
    mujoco = load_config(ROOT / "configs/sim_reach.yaml")
    row["mujoco"] = summary(evaluate(mujoco, ckpt, episodes, RunDir(out_root / f"s{seed}-mujoco")))
    with FrankySim() as sim:
        franky = load_config(
            ROOT / "configs/franky_sim.yaml",
            [f"cluster.node_groups.0.hardware.configs.0.robot_ip={sim.host}", "env.reset.timeout_s=40", *franky_set],
        )
        row["franky_sim"] = summary(evaluate(franky, ckpt, episodes, RunDir(out_root / f"s{seed}-franky")))
    row["intervals_overlap"] = overlap(row["mujoco"]["ci95"], row["franky_sim"]["ci95"])
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    ap.add_argument("--run-dirs", nargs="*", default=[], help="finished runs to use for the seeds, in order")
    ap.add_argument("--episodes", type=int, default=30)
    ap.add_argument("--out", default="runs/bench_eval", help="where training runs and eval episodes go")
    ap.add_argument("--json", default=None)
    ap.add_argument(
        "--franky-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="an override of configs/franky_sim.yaml (e.g. the controller's relative_dynamics_factor, "
        "to measure the config as it was)",
    )
    args = ap.parse_args()
    out = Path(args.out)
    rows = []
    for i, seed in enumerate(args.seeds):
        run_dir = Path(args.run_dirs[i]) if i < len(args.run_dirs) else out / f"train-s{seed}"
        row = bench_seed(seed, run_dir, args.episodes, out / ("-".join(args.franky_set) or "."), args.franky_set)
        rows.append(row)
        for driver in ("mujoco", "franky_sim"):
            r = row[driver]
            print(
                f"seed {seed} {driver:>10}: success {r['success_rate']:.2f} [{r['ci95'][0]:.2f}, {r['ci95'][1]:.2f}] "
                f"of {r['episodes']}, mean steps {r['mean_steps_successful']}, obs->action p50 "
                f"{r['latency_p50_ms']:.2f} ms p99 {r['latency_p99_ms']:.2f} ms",
                flush=True,
            )
        print(
            f"seed {seed} training obs->action p50 {row['train_latency_p50_ms']:.2f} ms p99 "
            f"{row['train_latency_p99_ms']:.2f} ms; intervals overlap: {row['intervals_overlap']}",
            flush=True,
        )
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"command": sys.argv, "rows": rows}, indent=2, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
