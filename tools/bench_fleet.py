"""Fleet scaling: N paced cells feeding one CPU learner (configs/sim_fleet.yaml), N = 1, 2, 4.

    PYTHONPATH=$PWD .venv/bin/python tools/bench_fleet.py [--cells 1 2 4] [--seeds 0 1] [--out runs/bench_fleet]
        [--config configs/sim_fleet.yaml] [--timeout-s 1200] [key=value ...]
    PYTHONPATH=$PWD .venv/bin/python tools/bench_fleet.py --update-cost-only [--save-probe probe.pkl]
    PYTHONPATH=$PWD python3 tools/bench_fleet.py --update-cost-only --probe probe.pkl --device cuda   # a GPU box

For each seed and N it writes the shipped config with N Franka entries (hardware ranks 0..N-1, one env worker
each, all on node 0 of this machine), runs `rlhw train` on it as a subprocess, then `rlhw eval` of the run's
final checkpoint on held-out seeds (2**32 + k, never a training seed; unpaced: a simulator's physics do not
depend on the pace). Reported per run, from the run's own metrics.jsonl and run.json:

- wall-clock to target: the training loop's elapsed time at the first eval row at or above the target (and
  the whole process's time, Ray's start and stop included);
- total env steps to target (all cells together);
- per cell: deadline hit rate (steps not late / steps) and obs->action p99 over the whole run;
- the achieved UTD against the configured one, and the seconds the cells waited for the learner;
- the learner: updates per second it ran, against the rate N cells ask for (N x control_hz x utd_ratio).

Before the runs it measures the update cost alone (`update_cost`: SAC updates on transitions of the task,
one torch thread as the learner has, no cell running), which says at which N one learner stops keeping up:
N* = 1 / (update_s x control_hz x utd_ratio).

A table of the whole set is printed at the end and written to <out>/summary.json.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
RLHW = [sys.executable, "-m", "rlhw.cli.main"]


def fleet_config(base: Path, cells: int, task: Path | None = None) -> dict:
    """The shipped fleet config with ``cells`` arms: Franka ranks 0..cells-1 on node 0, one env worker each.

    With ``task`` (another config, e.g. configs/sim_insert.yaml), its env and train sections replace the
    fleet's, keeping what makes a fleet: the fleet's cluster, each arm on the clock (``env.pace``) and the
    policy next to each arm (``train.policy_at``)."""
    raw = yaml.safe_load(base.read_text())
    if task is not None:
        own = yaml.safe_load(task.read_text())
        own["env"]["pace"], own["train"]["policy_at"] = raw["env"]["pace"], raw["train"]["policy_at"]
        own["train"]["runner"] = raw["train"]["runner"]
        raw = {**own, "cluster": raw["cluster"]}
    franka = next(g for g in raw["cluster"]["node_groups"] if g["label"] == "franka")
    franka["hardware"]["configs"] = [{"robot_ip": f"172.16.{i}.2", "node_rank": 0} for i in range(cells)]
    raw["cluster"]["component_placement"]["env"]["placement"] = "0" if cells == 1 else f"0-{cells - 1}"
    return raw


def task_probe(config_path: Path, overrides: list[str]) -> dict:
    """What the update cost depends on: the task's agent space, 1,000 of its transitions under random actions
    (in a replay buffer), the SAC settings, control rate and UTD. Picklable, so that another machine (a GPU)
    can time the same updates without the simulator (``--save-probe`` here, ``--probe`` there)."""
    import numpy as np

    from rlhw.config import load_config
    from rlhw.rl.replay import MixedReplay, transition_batch
    from rlhw.rl.spaces import AgentSpace
    from rlhw.robot.factory import make_env

    config = load_config(config_path, [*overrides, "env.pace=free"])
    env = make_env(config, 0)
    space = AgentSpace.from_spec(env.spec)
    replay = MixedReplay(10_000, config.train.demo_ratio, seed=0)
    rng = np.random.default_rng(0)
    obs, _ = env.reset(seed=0).gym()
    for _ in range(1000):
        action = rng.uniform(space.low, space.high).astype(np.float32)
        nxt, reward, terminated, truncated, _ = env.step(action).gym()
        one = {k: np.asarray(v)[None] for k, v in obs.items()}
        replay.add_batch(
            transition_batch(one, {k: np.asarray(v)[None] for k, v in nxt.items()}, action[None], [reward], [0], [0])
        )
        obs = env.reset().gym()[0] if terminated or truncated else nxt
    env.close()
    return {
        "space": space,
        "replay": replay,
        "sac": config.train.sac,
        "hz": config.env.control_hz,
        "utd": config.train.utd_ratio,
    }


def update_cost(probe: dict, device: str, updates: int = 300) -> dict:
    """Seconds per SAC update of the learner on the probe's task (its networks, batch size, one torch thread as
    the learner has), with no cell running meanwhile."""
    import torch

    from rlhw.rl.sac import SAC

    torch.set_num_threads(1)
    space, replay, sac = probe["space"], probe["replay"], probe["sac"]
    agent = SAC(space.layout, space.low, space.high, sac, device=torch.device(device))
    for _ in range(20):  # warm-up (first calls allocate)
        agent.update(replay.sample(sac.batch_size))
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(updates):
        agent.update(replay.sample(sac.batch_size))
    if device == "cuda":
        torch.cuda.synchronize()
    per = (time.perf_counter() - t0) / updates
    hz, utd = probe["hz"], probe["utd"]
    return {
        "device": device if device == "cpu" else torch.cuda.get_device_name(0),
        "update_ms": round(per * 1e3, 3),
        "updates_per_s": round(1 / per, 1),
        "needed_per_cell": hz * utd,
        "cells_one_learner_keeps_up_with": round(1 / (per * hz * utd), 1),
        "batch_size": sac.batch_size,
        "hidden_sizes": list(sac.hidden_sizes),
        "critics": sac.critic_ensemble,
    }


def run_one(args, cells: int, seed: int, overrides: list[str]) -> dict:
    tag = f"n{cells}-seed{seed}"
    out = Path(args.out) / tag
    out.mkdir(parents=True, exist_ok=True)
    cfg_path = out / "fleet.yaml"
    cfg_path.write_text(yaml.safe_dump(fleet_config(Path(args.config), cells, args.task_config), sort_keys=False))
    run_dir = out / "run"
    cmd = [
        *RLHW,
        "train",
        str(cfg_path),
        "--run-dir",
        str(run_dir),
        f"train.seed={seed}",
        "train.progress=false",
        *overrides,
    ]
    t0 = time.monotonic()
    with open(out / "train.log", "w") as log:
        proc = subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, timeout=args.timeout_s, check=False)
    process_s = time.monotonic() - t0
    if not (run_dir / "run.json").exists():
        raise SystemExit(f"{tag}: rlhw train wrote no run.json (exit {proc.returncode}); see {out / 'train.log'}")
    status = json.loads((run_dir / "run.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    evals = [r for r in rows if r.get("eval/success_rate") is not None]
    target = status.get("target_success") or args.target
    hit = next((r for r in evals if r["eval/success_rate"] >= target), None)
    held_out = held_out_eval(args, cfg_path, run_dir, out, overrides)
    utd = status.get("utd", {})
    wall = status.get("wall_s") or float("nan")
    updates = status.get("updates", 0)
    cells_out = []
    for c, h in zip(status.get("cells", []), status.get("loop_health", []), strict=False):
        deadlines, missed = h.get("deadlines") or 0, h.get("missed_deadlines") or 0
        cells_out.append(
            {
                "cell": c["address"],
                "env_steps": c["env_steps"],
                "episodes": c["episodes"],
                "deadlines": deadlines,
                "hit_rate": round(1 - missed / deadlines, 5) if deadlines else None,
                "obs_to_action_p99_ms": round(h["latency_p99_ms"], 2),
                "period_p99_ms": h.get("period_p99_ms"),
                "in_run": c["in_run"],
            }
        )
    return {
        "cells": cells,
        "seed": seed,
        "rc": proc.returncode,
        "status": status["status"],
        "reason": status.get("reason"),
        "env_steps": status.get("env_steps"),
        "target": target,
        "reached": hit is not None,
        "steps_to_target": hit["env_steps"] if hit else None,
        "wall_to_target_s": round(hit["perf/elapsed_s"], 1) if hit else None,
        "evals": [(r["env_steps"], r["eval/success_rate"]) for r in evals],
        "training_loop_s": round(wall, 1),
        "process_s": round(process_s, 1),
        "utd_configured": utd.get("configured"),
        "utd_achieved": utd.get("achieved"),
        "env_wait_s": utd.get("env_wait_s"),
        "updates_per_s": round(updates / wall, 2) if wall and wall == wall else None,
        "updates_needed_per_s": cells * args.control_hz * (utd.get("configured") or float("nan")),
        "env_steps_per_s": round(status.get("env_steps", 0) / wall, 2) if wall and wall == wall else None,
        "per_cell": cells_out,
        "held_out": held_out,
        "load_after": os.getloadavg(),
    }


def held_out_eval(args, cfg_path: Path, run_dir: Path, out: Path, overrides: list[str]) -> dict | None:
    """`rlhw eval` of the run's final checkpoint on held-out seeds (2**32 + k), unpaced."""
    ckpt = run_dir / "checkpoints" / "latest.pt"
    if not ckpt.exists() or args.eval_episodes <= 0:
        return None
    result = out / "eval.json"
    cmd = [
        *RLHW,
        "eval",
        str(cfg_path),
        "--checkpoint",
        str(ckpt),
        "--episodes",
        str(args.eval_episodes),
        "--json",
        str(result),
        "--run-dir",
        str(out / "eval"),
        *overrides,
        "env.pace=free",
    ]
    with open(out / "eval.log", "w") as log:
        subprocess.run(cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, timeout=600, check=False)
    if not result.exists():
        return None
    got = json.loads(result.read_text())
    return {"success_rate": got.get("success_rate"), "ci95": got.get("ci95"), "episodes": len(got.get("episodes", []))}


def table(results: list[dict]) -> str:
    lines = [
        "| N | seed | env steps to target | wall to target (loop / process) | held-out eval | worst cell hit rate "
        "| worst obs->action p99 | UTD achieved / set | learner updates/s (needed) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        hits = [c["hit_rate"] for c in r["per_cell"] if c["hit_rate"] is not None]
        p99 = [c["obs_to_action_p99_ms"] for c in r["per_cell"]]
        held = r["held_out"]
        lines.append(
            f"| {r['cells']} | {r['seed']} | {r['steps_to_target'] or 'not reached'} "
            f"| {r['wall_to_target_s'] or '-'} s / {r['process_s']} s "
            f"| {held['success_rate'] if held else '-'} | {min(hits) if hits else '-'} | {max(p99) if p99 else '-'} ms "
            f"| {r['utd_achieved']} / {r['utd_configured']} | {r['updates_per_s']} ({r['updates_needed_per_s']:g}) |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", default=str(ROOT / "configs" / "sim_fleet.yaml"))
    p.add_argument(
        "--task-config",
        type=Path,
        help="take env and train from this config (e.g. configs/sim_insert.yaml), the cluster from --config",
    )
    p.add_argument("--cells", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--out", default=str(ROOT / "runs" / "bench_fleet"))
    p.add_argument("--timeout-s", type=float, default=1200)
    p.add_argument("--eval-episodes", type=int, default=20)
    p.add_argument("--target", type=float, default=0.9)
    p.add_argument("--update-cost-only", action="store_true")
    p.add_argument("--device", default="cpu", help="where --update-cost-only times the updates (cpu, cuda)")
    p.add_argument("--save-probe", help="write the task's probe (space, transitions, SAC settings) to this file")
    p.add_argument("--probe", help="time the updates of a saved probe (no simulator needed)")
    p.add_argument("--report", help="print the tables of a summary.json this tool wrote, and exit")
    args, overrides = p.parse_known_args(argv)
    if args.report:
        report(json.loads(Path(args.report).read_text())["runs"])
        return 0
    bad = [o for o in overrides if "=" not in o]
    if bad:
        p.error(f"unknown arguments {bad}: overrides are key=value")
    if args.probe:
        probe = pickle.loads(Path(args.probe).read_bytes())
    else:
        probe = task_probe(args.task_config or Path(args.config), overrides)
    if args.save_probe:
        Path(args.save_probe).write_bytes(pickle.dumps(probe))
    cost = update_cost(probe, args.device)
    print(json.dumps({"update_cost": cost}), flush=True)
    if args.update_cost_only:
        return 0
    args.control_hz = yaml.safe_load((args.task_config or Path(args.config)).read_text())["env"].get("control_hz", 10)
    results = []
    summary_path = Path(args.out) / "summary.json"
    for seed in args.seeds:  # seeds outermost: a cut-short session still has every N of the first seed
        for cells in args.cells:
            r = run_one(args, cells, seed, overrides)
            results.append(r)
            print(json.dumps(r), flush=True)
            summary_path.write_text(json.dumps({"update_cost": cost, "runs": results}, indent=1))
    report(results)
    return 0


def report(results: list[dict]) -> None:
    """The table of every run, and each N's means against the smallest N's."""
    print(table(results))
    by_n: dict[int, list[dict]] = {}
    for r in results:
        by_n.setdefault(r["cells"], []).append(r)
    base = by_n.get(min(by_n)) if by_n else None
    if base:
        for n, rs in sorted(by_n.items()):
            walls = [r["wall_to_target_s"] for r in rs if r["wall_to_target_s"]]
            steps = [r["steps_to_target"] for r in rs if r["steps_to_target"]]
            base_walls = [r["wall_to_target_s"] for r in base if r["wall_to_target_s"]]
            base_steps = [r["steps_to_target"] for r in base if r["steps_to_target"]]
            if walls and base_walls and len(walls) == len(rs) and len(base_walls) == len(base):
                print(
                    f"N={n}: wall to target {_mean(walls) / _mean(base_walls):.2f} x N={min(by_n)}, "
                    f"env steps {_mean(steps) / _mean(base_steps):.2f} x (means over {len(rs)} seed(s))"
                )


def _mean(xs: list[float]) -> float:
    return sum(xs) / len(xs) if xs else math.nan


if __name__ == "__main__":
    sys.exit(main())
