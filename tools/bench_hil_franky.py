"""Human in the loop on the real driver path: 5 scripted demos, then 500 env steps with interventions, against
franky-sim on loopback. Loop health at 10 Hz, the executed action against the operator's command, nothing lost.

    # configs/franky_sim.yaml's layout: the policy next to the arm, the loop at SCHED_FIFO 80
    PYTHONPATH=$PWD .venv/bin/python tools/bench_hil_franky.py [--steps 500] [--demos 5] [--seed 0] [--no-baseline]
    # the layout before it was the default (docs/robot_loop.md, "Real-arm default layout"): rollout worker, no priority
    PYTHONPATH=$PWD .venv/bin/python tools/bench_hil_franky.py --set train.policy_at=rollout \
        --set 'cluster.node_groups[0].env_configs=[]'

What runs (all real components, each as a user runs it):

1. ``drivers.franky_sim.FrankySim`` starts franky-sim on a free loopback address;
   configs/franky_sim.yaml is pointed at it (``cluster.node_groups[0].hardware.configs[0].robot_ip=<host>``),
   so every command goes through the real ``franka`` driver (franky, libfranka's protocol).
2. ``rlhw record-demos configs/franky_sim.yaml --teleop scripted --episodes 5`` (task ``reach``: franky-sim
   has no objects): the scripted expert drives through the teleop device interface.
3. ``rlhw train configs/franky_sim.yaml`` with the config's own runner (the pipeline: env worker -> ``rlhw
   serve-env`` child -> franka driver -> franky-sim, real time at ``env.control_hz`` 10), ``train.demos`` = the
   recorded demos and ``env.teleop.device=scripted env.teleop.mode=intervene``: the expert is read by the env
   server on the robot node and takes over when the policy stops making progress.
4. Baseline, same invocation and seeds without the operator (``env.teleop.device=none``), run first.

The operator's own command is recorded at the device interface, independently of the env: the train child
processes get a ``sitecustomize`` (written by this tool into the output dir and put first on PYTHONPATH) that
wraps ``ScriptedExpert.read`` and appends every reading (twist, gripper, active, episode, step) to a JSONL
file. The expert reads privileged simulator state through the env it is built with; the policy never sees it.

Then the run directory is read (run.json ``loop_health`` and ``env_steps``, the ``train-*`` episode files,
metrics.jsonl) and checked:

- loop health: steps timed, late steps (deadline misses at 10 Hz), lateness p99, period p50/p99,
  obs->action latency p50/p99, with the operator and in the baseline;
- every intervened step: the stored executed action == the operator's command (the rule of
  rlhw/robot/takeover.py: clipped linear twist, gripper command or the last one), compared bit for bit;
  the number of intervened steps and the intervention rate;
- nothing lost: env steps in run.json == loop-health steps of the env worker == transitions in the episode
  files == operator readings during steps; episode step indices 0..T-1 without a gap; demos loaded by
  ``rlhw.rl.demos.load_demos`` (the trainer's loader) == the demos recorded, with their step count.

One summary table is printed and written to ``<out>/summary.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "franky_sim.yaml"
ENTRY = "cluster.node_groups[0].hardware.configs[0]"
LOG_ENV = "RLHW_BENCH_OPERATOR_LOG"

# Loaded by every Python process of the train run (PYTHONPATH); acts only where the expert is built (the
# env server child) and only when LOG_ENV is set. Wraps the device's read, the interface the env uses.
SITECUSTOMIZE = '''
import importlib.abc, importlib.util, json, os, sys

def _wrap(module):
    read_ = module.ScriptedExpert.read
    def read(self, timeout_s=0.05):
        r = read_(self, timeout_s)
        sight = self.view.look()
        row = {"pid": os.getpid(), "in_episode": sight is not None,
               "episode": -1 if sight is None else sight.episode, "step": -1 if sight is None else sight.step,
               "twist": [float(x) for x in r.twist], "gripper": None if r.gripper is None else float(r.gripper),
               "active": bool(r.active)}
        with open(os.environ["%(env)s"], "a") as f:
            f.write(json.dumps(row) + "\\n")
        return r
    module.ScriptedExpert.read = read

class _Finder(importlib.abc.MetaPathFinder):
    """Patches drivers.teleop.scripted when (and only where) it is imported: nothing else is loaded early."""
    def find_spec(self, name, path, target=None):
        if name != "drivers.teleop.scripted":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        exec_module = spec.loader.exec_module
        def patched(module):
            exec_module(module)
            _wrap(module)
        spec.loader.exec_module = patched
        return spec

if os.environ.get("%(env)s"):
    sys.meta_path.insert(0, _Finder())
''' % {"env": LOG_ENV}  # noqa: UP031  (a code template: braces would need escaping)


def cli(args: list[str], env: dict | None = None) -> None:
    cmd = [sys.executable, "-m", "rlhw.cli.main", *args]
    print("$ rlhw " + " ".join(args), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT, env=env)


def common_overrides(host: str, args) -> list[str]:
    return [
        f"{ENTRY}.robot_ip={host}",
        f"{ENTRY}.controller.relative_dynamics_factor=1.0",
        "env.reset.timeout_s=40",
        f"env.seed={args.seed}",
        f"env.max_episode_steps={args.episode_steps}",
    ]


def train_run(name: str, host: str, demos: Path, args, operator: bool) -> Path:
    run_dir = Path(args.out) / name
    env = dict(os.environ)
    teleop = ["env.teleop.device=none"]
    if operator:
        hook = Path(args.out) / "hook"
        hook.mkdir(parents=True, exist_ok=True)
        (hook / "sitecustomize.py").write_text(SITECUSTOMIZE)
        env["PYTHONPATH"] = f"{hook}:{ROOT}"
        env[LOG_ENV] = str(Path(args.out) / f"{name}-operator.jsonl")
        teleop = [
            "env.teleop.device=scripted",
            "env.teleop.mode=intervene",
            f"env.teleop.seed={args.seed}",
            f"env.teleop.intervene_prob={args.intervene_prob}",
            f"env.teleop.intervene_decay={args.intervene_decay}",
        ]
    for attempt in (1, 2):  # a run whose embedded Ray failed to start (a loaded machine) is run once more, afresh
        if attempt == 2:
            run_dir = Path(args.out) / f"{name}-again"
            Path(env.get(LOG_ENV, "/nonexistent")).unlink(missing_ok=True)
        try:
            cli(
                [
                    "train",
                    str(CONFIG),
                    "--run-dir",
                    str(run_dir),
                    *common_overrides(host, args),
                    *teleop,
                    f"train.seed={args.seed}",
                    f"train.max_env_steps={args.steps}",
                    f"train.learning_starts={args.learning_starts}",
                    f"train.demos=[{demos}]",
                    "train.eval_every_steps=1000000",
                    "train.eval_episodes=1",
                    "train.progress=false",
                    *args.set,
                ],
                env,
            )
            return run_dir
        except subprocess.CalledProcessError as e:
            print(f"{name} run failed ({e.returncode}); see {run_dir}/run.json", flush=True)
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def read_operator_log(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [row for line in path.read_text().splitlines() if (row := json.loads(line))["in_episode"]]


def operator_command(row: dict, action_shape: tuple[int, ...], last_gripper: float) -> tuple[np.ndarray, float]:
    """The rule of rlhw/robot/takeover.py, applied to the recorded reading (the independent expectation)."""
    if row["gripper"] is not None:
        last_gripper = float(np.clip(row["gripper"], -1.0, 1.0))
    action = np.zeros(action_shape, np.float32)
    n = min(3, action_shape[0])
    action[:n] = np.clip(np.asarray(row["twist"][:n], np.float32), -1.0, 1.0)
    if action_shape[0] > 3:
        action[3] = last_gripper
    return action, last_gripper


def check_run(run_dir: Path, operator_log: Path | None) -> dict:
    from rlhw.rl.episodes import episode_files, load_episode

    status = json.loads((run_dir / "run.json").read_text())
    health = status["loop_health"][0]
    # Train and eval episodes share the env worker's episode counter (the number in the file name): in that
    # order they are the order the env server ran them, which is the order of the operator's readings.
    files = sorted(episode_files(run_dir / "episodes", ("train", "eval")), key=lambda p: int(p.stem.split("-")[1]))
    every = [load_episode(p) for p in files]
    eps = [e for p, e in zip(files, every) if p.name.startswith("train-")]
    evals = [e for p, e in zip(files, every) if p.name.startswith("eval-")]
    transitions = sum(e.length for e in eps)
    gaps = sum(int(not step_indices_whole(e)) for e in every)
    intervened = int(sum(int(e.intervened.sum()) for e in eps))
    out = {
        "run_dir": str(run_dir),
        "status": status.get("status"),
        "env_steps_run_json": status.get("env_steps"),
        "env_worker_steps": health["steps"],
        "episode_files": len(eps),
        "episode_transitions": transitions,
        "eval_episode_files": len(evals),
        "eval_transitions": sum(e.length for e in evals),
        "eval_intervened_steps": int(sum(int(e.intervened.sum()) for e in evals)),
        "episodes_with_step_gaps": gaps,
        "intervened_steps": intervened,
        "intervention_rate": intervened / max(transitions, 1),
        "episodes_with_intervention": sum(int(e.intervened.any()) for e in eps),
        "policy_version_minus1_on_intervened": bool(all((e.policy_version[e.intervened] == -1).all() for e in eps)),
        "loop_health": {
            k: health[k]
            for k in (
                "steps",
                "timed_steps",
                "late_steps",
                "lateness_p99_ms",
                "period_p50_ms",
                "period_p99_ms",
                "latency_p50_ms",
                "latency_p99_ms",
                "latency_max_ms",
            )
        },
    }
    if operator_log is not None:
        out.update(compare_operator(every, read_operator_log(operator_log)))
    return out


def step_indices_whole(ep) -> bool:
    """The step times increase (no step missing or doubled); `Episode` itself refuses a per-step array with
    other than one entry per step."""
    return bool(np.all(np.diff(ep.time) > 0))


def compare_operator(eps: list, rows: list[dict]) -> dict:
    """Align the operator's readings with the stored steps (one read per step, in order) and compare."""
    steps = [(e, t) for e in eps for t in range(e.length)]
    mismatches, compared, active_not_intervened, intervened_not_active, step_index_mismatch = [], 0, 0, 0, 0
    last_gripper, episode = 1.0, None
    for (e, t), row in zip(steps, rows):
        if row["episode"] != episode:
            episode, last_gripper = row["episode"], 1.0  # an episode starts open (Takeover.start_episode)
        step_index_mismatch += int(row["step"] != t)
        expected, last_gripper = operator_command(row, e.action.shape[1:], last_gripper)
        if not e.intervened[t]:
            active_not_intervened += int(row["active"])
            continue
        intervened_not_active += int(not row["active"])
        compared += 1
        if not np.array_equal(expected, e.action[t]):
            mismatches.append(
                {
                    "episode": row["episode"],
                    "step": t,
                    "executed": e.action[t].tolist(),
                    "operator": expected.tolist(),
                }
            )
    return {
        "operator_readings_in_steps": len(rows),
        "intervened_steps_compared": compared,
        "executed_equals_operator": compared - len(mismatches),
        "executed_differs": len(mismatches),
        "mismatch_examples": mismatches[:5],
        "operator_active_but_not_intervened": active_not_intervened,
        "intervened_but_operator_inactive": intervened_not_active,
        "reading_step_index_mismatches": step_index_mismatch,
    }


def check_demos(demos: Path, run_dir: Path) -> dict:
    """The demos as the trainer loads them (rlhw.rl.demos.load_demos, against the run's own spec)."""
    from rlhw.rl.demos import demo_steps, load_demos
    from rlhw.rl.episodes import episode_files, load_episode

    files = episode_files(demos, "demo")
    first = load_episode(files[0])
    observations = {k: v.shape[1:] for k, v in first.obs.items()}
    batches = load_demos([str(demos)], observations, first.action.shape[1:], None)  # counts only; train checked
    lengths = [load_episode(f).length for f in files]
    return {
        "demo_files": len(files),
        "demo_episodes_loaded": len(batches),
        "demo_steps_loaded": demo_steps(batches),
        "demo_lengths": lengths,
        "demo_successes": int(sum(bool(load_episode(f).success[-1]) for f in files)),
    }


def holds(summary: dict, demos: int) -> dict:
    """The three claims, each True only when every count agrees."""
    op, d = summary["operator"], summary["demos"]
    lost = {
        name: r["env_steps_run_json"] == r["episode_transitions"]
        and r["env_worker_steps"] == r["episode_transitions"] + r["eval_transitions"]
        and r["episodes_with_step_gaps"] == 0
        for name, r in ((n, summary[n]) for n in ("baseline", "operator") if n in summary)
    }
    return {
        "nothing_lost": all(lost.values())
        and op["operator_readings_in_steps"] == op["env_worker_steps"]
        and op["reading_step_index_mismatches"] == 0
        and d["demo_files"] == d["demo_episodes_loaded"] == demos
        and d["demo_steps_loaded"] == sum(d["demo_lengths"]),
        "executed_equals_operator_on_every_intervened_step": op["executed_differs"] == 0
        and op["intervened_steps_compared"] == op["intervened_steps"] + op["eval_intervened_steps"]
        and op["operator_active_but_not_intervened"] == 0
        and op["intervened_but_operator_inactive"] == 0,
    }


def table(summary: dict) -> str:
    runs = [(name, summary[name]) for name in ("baseline", "operator") if name in summary]
    keys = [
        "status",
        "env_steps_run_json",
        "env_worker_steps",
        "episode_transitions",
        "episode_files",
        "eval_transitions",
        "eval_episode_files",
        "eval_intervened_steps",
        "episodes_with_step_gaps",
        "intervened_steps",
        "intervention_rate",
        "operator_readings_in_steps",
        "intervened_steps_compared",
        "executed_equals_operator",
        "executed_differs",
        "operator_active_but_not_intervened",
        "reading_step_index_mismatches",
    ]
    lines = ["| figure | " + " | ".join(n for n, _ in runs) + " |", "|---|" + "---|" * len(runs)]
    for k in keys:
        lines.append(f"| {k} | " + " | ".join(fmt(r.get(k, "-")) for _, r in runs) + " |")
    for k in summary["operator"]["loop_health"]:
        lines.append(f"| loop_health.{k} | " + " | ".join(fmt(r["loop_health"][k]) for _, r in runs) + " |")
    for k, v in summary["demos"].items():
        lines.append(f"| demos.{k} | {fmt(v)} |" + " |" * (len(runs) - 1))
    return "\n".join(lines)


def fmt(v) -> str:
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=500, help="env steps of each train run")
    p.add_argument("--demos", type=int, default=5, help="scripted demos to record")
    p.add_argument("--seed", type=int, default=0, help="env.seed, train.seed and env.teleop.seed")
    p.add_argument("--episode-steps", type=int, default=50, help="env.max_episode_steps")
    p.add_argument("--learning-starts", type=int, default=100)
    p.add_argument("--intervene-prob", type=float, default=1.0)
    p.add_argument("--intervene-decay", type=float, default=0.98)
    p.add_argument("--no-baseline", action="store_true", help="skip the run without the operator")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra config override of both train runs, and env.* ones of the demos too (e.g. train.policy_at=rollout)",
    )
    p.add_argument("--out", default=str(ROOT / "runs" / f"bench-hil-franky-{time.strftime('%Y%m%d-%H%M%S')}"))
    args = p.parse_args()
    from drivers.franky_sim import FrankySim

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary: dict = {
        "command": " ".join(sys.argv),
        "seed": args.seed,
        "steps": args.steps,
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
    }
    t0 = time.monotonic()
    with FrankySim(start_timeout_s=90) as sim:
        demos = out / "demos"
        cli(
            [
                "record-demos",
                str(CONFIG),
                "--teleop",
                "scripted",
                "--episodes",
                str(args.demos),
                "--out",
                str(demos),
                "--no-live",
                *common_overrides(sim.host, args),
                # the env.* overrides apply to the demos too: train.demos refuses demos of another env config
                *[kv for kv in args.set if kv.startswith("env.")],
            ]
        )
        summary["demo_wall_s"] = round(time.monotonic() - t0, 1)
        if not args.no_baseline:
            summary["baseline"] = check_run(train_run("baseline", sim.host, demos, args, operator=False), None)
        run_dir = train_run("operator", sim.host, demos, args, operator=True)
        summary["operator"] = check_run(run_dir, out / "operator-operator.jsonl")
        summary["demos"] = check_demos(demos, run_dir)
    summary["wall_s"] = round(time.monotonic() - t0, 1)
    summary["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    summary["holds"] = holds(summary, args.demos)
    print(json.dumps(summary["holds"], indent=1))
    print(table(summary))
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    (run_dir / "bench_hil_franky.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    print(f"load average (1, 5, 15 min) at start {summary['loadavg_start']}, at end {summary['loadavg_end']}")
    print(f"summary: {out / 'summary.json'} (and {run_dir / 'bench_hil_franky.json'}); wall {summary['wall_s']} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
