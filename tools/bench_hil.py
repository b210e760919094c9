"""Human in the loop in sim (state observations, the local runner): env steps and wall-clock to the target
eval success for (a) SAC from scratch, (b) RLPD with scripted demos, (c) (b) plus scripted interventions.

    PYTHONPATH=$PWD .venv/bin/python tools/bench_hil.py --task push_cube --variants b,c,a [--seed 0]
    PYTHONPATH=$PWD .venv/bin/python tools/bench_hil.py --task insert --variants b --target 0.9

- (a) plain SAC's critics (N=2, M=2, no LayerNorm, actor on min), no demos.
- (n) the config as it is: its critics (RLPD's by default), no demos (what ``rlhw train CONFIG`` learns with).
- (b) RLPD's critics (the defaults) and ``train.demos: [DIR]``. DIR is ``--demos``, else the tool records it
  first with the real command: ``rlhw record-demos configs/sim_TASK.yaml --teleop scripted --episodes N``.
- (c) (b), and the scripted expert as the operator through the env's own takeover path
  (``env.teleop.device=scripted env.teleop.mode=intervene``): it takes over when the policy stops making
  progress, with a probability that decays per episode (``intervene_prob``, ``intervene_decay``); the env
  executes its action through the safety layer and reports ``info["intervened"]``. Intervention steps count
  as env steps.

The rehearsal of a real cell (``--task push_cube_pixels``, configs/sim_push_cube_pixels.yaml: cameras plus proprio,
``env.sim_state=hidden``, 40 N), both variants with the demos (recorded with images) and the scripted operator of (c):

- (r) the reward from the success classifier that ``rlhw train-reward DEMOS`` trains (the tool runs that command,
  unless ``--classifier`` names a model file): HIL-SERL's recipe;
- (g) the baseline: the same run with the ground-truth sparse reward (``env.sim_state=visible``, no classifier: the
  task's own success test on the simulator's cube, 1 on success), which isolates what the classifier costs.

    PYTHONPATH=$PWD .venv/bin/python tools/bench_hil.py --task push_cube_pixels --variants r,g --demo-episodes 20

``eval/success_rate`` is the simulator judge's verdict in both; (r) logs per eval period how often the classifier
disagreed with the judge on training steps (``reward/classifier_*`` in metrics.jsonl).

Eval episodes run on an env of their own WITHOUT the operator (``env.teleop.device=none``) and with seeds
never used for training: eval episode k of the run (k = 0, 1, ... over all evals) resets with seed
EVAL_SEED_BASE + k; training episodes draw their seeds below 2**31 and demos use env.seed + episode.
``--set KEY=VALUE`` (repeatable) passes config overrides a user would tune (train.demo_ratio, ...). Each run
reports how many train and eval episodes a safety fault ended, by kind (the episodes' recorded ``fault``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
EVAL_SEED_BASE = 2**31
SAC_CRITICS = [
    "train.sac.critic_ensemble=2",
    "train.sac.critic_subset=2",
    "train.sac.critic_layer_norm=false",
    "train.sac.actor_q=min",
]


class FreshSeeds:
    """Wraps the eval env: eval episode k resets with seed base + k, whatever seed the runner passes."""

    def __init__(self, env, base: int):
        self.env, self.next_seed = env, base

    def reset(self, seed=None):
        self.next_seed += 1
        return self.env.reset(seed=self.next_seed - 1)

    def __getattr__(self, name):
        return getattr(self.env, name)


def record_demos(config_path: Path, args) -> Path:
    """Record the scripted demos with the user's own command (rlhw record-demos), unless --demos names them.
    The ``env.*`` overrides of --set apply to them too: a demo's actions mean what the env's action config says."""
    out = Path(args.runs_root) / f"demos-{args.task}-n{args.demo_episodes}"
    cmd = [
        sys.executable,
        "-m",
        "rlhw.cli.main",
        "record-demos",
        str(config_path),
        "--teleop",
        "scripted",
        "--episodes",
        str(args.demo_episodes),
        "--out",
        str(out),
        "--no-live",
        f"env.teleop.noise={args.demo_noise}",
        f"env.teleop.hesitation={args.demo_hesitation}",
        *[kv for kv in args.set if kv.startswith("env.")],
    ]
    print("recording demos:", " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)
    return out


def train_reward(demos: Path, args) -> Path:
    """The success classifier from the demos' frames, with the user's own command (rlhw train-reward)."""
    out = Path(args.runs_root) / f"reward-{args.task}-n{args.demo_episodes}.pt"
    cmd = [sys.executable, "-m", "rlhw.cli.main", "train-reward", str(demos), "--out", str(out)]
    print("training the reward classifier:", " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)
    return out


def operator_overrides(args) -> list[str]:
    return [
        "env.teleop.device=scripted",
        "env.teleop.mode=intervene",
        f"env.teleop.seed={args.seed}",
        f"env.teleop.intervene_prob={args.intervene_prob}",
        f"env.teleop.intervene_decay={args.intervene_decay}",
        f"env.teleop.patience={args.patience}",
    ] + ([] if args.takeover_steps is None else [f"env.teleop.takeover_steps={args.takeover_steps}"])


def fault_counts(run_dir: Path) -> dict:
    """Per episode kind (train, eval): episodes, and how many a fault ended, by kind (the recorded ``fault``)."""
    from collections import Counter

    from rlhw.rl.episodes import episode_files, load_episode

    out = {}
    for kind in ("train", "eval"):
        files = episode_files(Path(run_dir) / "episodes", kind)
        ended = Counter(str(k) for f in files if (ep := load_episode(f)) for k in ep.fault if k)
        out[kind] = {"episodes": len(files), **dict(sorted(ended.items()))}
    return out


def run_variant(name: str, overrides: list[str], config_path: Path, args) -> dict:
    from rlhw.config import load_config
    from rlhw.rl.local import train_local
    from rlhw.rl.rundir import RunDir
    from rlhw.robot import make_env

    common = [
        "train.runner=local",
        f"train.seed={args.seed}",
        f"train.max_env_steps={args.max_env_steps}",
        f"train.target_success={args.target}",
        f"train.eval_every_steps={args.eval_every}",
        f"train.eval_episodes={args.eval_episodes}",
        "train.progress=false",
        *args.set,
        *overrides,
    ]
    config = load_config(str(config_path), common)
    eval_config = load_config(str(config_path), [*common, "env.teleop.device=none"])
    rd = RunDir(Path(args.runs_root) / f"{args.task}-{name}-s{args.seed}")
    rd.write_config(config)
    t0 = time.time()
    stop = train_local(
        config, rd, eval_env_factory=lambda _cfg, rank: FreshSeeds(make_env(eval_config, rank), EVAL_SEED_BASE)
    )
    rows = rd.metrics()
    evals = [(r["env_steps"], r["eval/success_rate"]) for r in rows if r.get("eval/success_rate") is not None]
    reached = next((r for r in rows if (r.get("eval/success_rate") or 0) >= args.target), None)
    return {
        "variant": name,
        "status": stop.status,
        "reason": stop.reason,
        "wall_s": round(time.time() - t0),
        "steps_to_target": reached["env_steps"] if reached else None,
        "wall_to_target_s": round(reached["perf/elapsed_s"]) if reached else None,
        "eval_episodes_total": len(evals) * args.eval_episodes,
        "evals": evals,
        "intervention_rate": [
            (r["env_steps"], round(r["train/intervention_rate"], 3))
            for r in rows
            if r.get("train/intervention_rate") is not None
        ],
        "classifier_vs_judge": [
            (
                r["env_steps"],
                r["reward/classifier_false_positives"],
                r["reward/classifier_false_negatives"],
                r["reward/classifier_steps"],
                r["reward/classifier_false_success_episodes"],
            )
            for r in rows
            if r.get("reward/classifier_steps") is not None
        ],
        "phases": phases(rows),
        "faults": fault_counts(rd.path),
        "run_dir": str(rd.path),
    }


def phases(rows: list[dict]) -> dict:
    """Where the run's time went, as of its last eval (the local runner's perf/* figures)."""
    timed = [r for r in rows if r.get("perf/update_total_s") is not None]
    return {k: round(v, 1) for k, v in timed[-1].items() if k.startswith("perf/") and v is not None} if timed else {}


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", choices=["push_cube", "insert", "reach", "push_cube_pixels"], default="push_cube")
    ap.add_argument(
        "--variants", default="a", help="comma-separated subset of a,b,c,n (push_cube_pixels: r,g), in that order"
    )
    ap.add_argument("--classifier", help="(r) success classifier file; default: rlhw train-reward on the demos")
    ap.add_argument("--demos", help="demo directory for (b) and (c); default: record --demo-episodes first")
    ap.add_argument("--demo-episodes", type=int, default=10)
    ap.add_argument("--demo-noise", type=float, default=0.1, help="scripted expert's action noise while recording")
    ap.add_argument("--demo-hesitation", type=float, default=0.05, help="scripted expert's pause probability")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-env-steps", type=int, default=60_000)
    ap.add_argument("--eval-every", type=int, default=2_000)
    ap.add_argument("--eval-episodes", type=int, default=10)
    ap.add_argument("--target", type=float, default=0.8)
    ap.add_argument("--intervene-prob", type=float, default=1.0, help="(c) env.teleop.intervene_prob")
    ap.add_argument("--intervene-decay", type=float, default=0.98, help="(c) env.teleop.intervene_decay (per episode)")
    ap.add_argument(
        "--takeover-steps", type=int, default=None, help="(c) env.teleop.takeover_steps (default: the config's)"
    )
    ap.add_argument("--patience", type=int, default=5, help="(c) env.teleop.patience")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="extra config override")
    ap.add_argument("--runs-root", default="runs/bench_hil")
    args = ap.parse_args()
    torch.set_num_threads(1)
    variants = args.variants.split(",")
    allowed = {"r", "g"} if args.task == "push_cube_pixels" else {"a", "b", "c", "n"}
    if set(variants) - allowed:
        ap.error(f"--variants: use a subset of {','.join(sorted(allowed))} for {args.task}, got {args.variants!r}")
    config_path = ROOT / f"configs/sim_{args.task}.yaml"
    demos = args.demos or (record_demos(config_path, args) if set(variants) - {"a", "n"} else None)
    classifier = args.classifier or (train_reward(demos, args) if "r" in variants else None)
    with_operator = [f"train.demos=[{demos}]", *operator_overrides(args)]
    plans = {
        "a": ("a-sac", SAC_CRITICS),
        "n": ("n-config", []),
        "b": ("b-rlpd-demos", [f"train.demos=[{demos}]"]),
        "c": ("c-rlpd-demos-interventions", with_operator),
        "r": ("r-rehearsal-classifier-reward", [*with_operator, f"env.reward.classifier={classifier}"]),
        "g": ("g-ground-truth-reward", [*with_operator, "env.sim_state=visible"]),
    }
    print(
        f"sim {args.task}, local runner, seed {args.seed}, target eval success {args.target}, budget "
        f"{args.max_env_steps} env steps, eval seeds {EVAL_SEED_BASE} + k, overrides {args.set}",
        flush=True,
    )
    results = []
    for v in variants:
        r = run_variant(*plans[v], config_path, args)
        results.append(r)
        print(
            f"  {r['variant']:28s} steps to target: {r['steps_to_target']}  wall to target: "
            f"{r['wall_to_target_s']} s  ({r['status']}: {r['reason']}; {r['wall_s']} s)",
            flush=True,
        )
        print(f"    evals (env steps, success): {r['evals']}", flush=True)
        print(f"    episodes a fault ended (by kind): {r['faults']}", flush=True)
        if r["intervention_rate"]:
            print(f"    intervention rate (env steps, share of steps): {r['intervention_rate']}", flush=True)
        print(f"    where the time went (last eval): {r['phases']}", flush=True)
        if r["classifier_vs_judge"]:
            print(
                "    classifier vs judge per eval period (env steps, false positive steps, false negative steps, "
                f"steps, false-success episodes): {r['classifier_vs_judge']}",
                flush=True,
            )
    print(json.dumps(results), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
