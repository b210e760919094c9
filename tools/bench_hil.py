"""Human in the loop on sim push_cube (state observations, the local runner): env steps and wall-clock to
>= 0.8 eval success for (a) SAC from scratch, (b) RLPD with demos, (c) (b) plus scripted interventions.

    PYTHONPATH=$PWD .venv/bin/python tools/bench_hil.py --variants a [--max-env-steps 60000] [--seed 0]
    PYTHONPATH=$PWD .venv/bin/python tools/bench_hil.py --variants a,b,c --demos DIR --expert MODULE:FACTORY

(a) plain SAC's critics (N=2, M=2, no LayerNorm, actor on min), no demos. (b) RLPD's critics (the defaults)
and ``train.demos: [DIR]`` with demo_ratio 0.5; DIR comes from ``rlhw record-demos configs/sim_push_cube.yaml
--teleop scripted --episodes 10 --out DIR``. (c) (b), and an expert that takes over during training: at each
step outside a takeover, a takeover of ``--takeover-steps`` steps starts with probability
``p0 * 0.5 ** (env_steps / half_life)`` (a decaying rate); the expert's action is executed and reported as
``info["intervened"]`` / ``info["executed_action"]``, exactly as an env server with a teleop device reports
it. ``--expert MODULE:FACTORY``: ``FACTORY(env)`` returns a callable ``obs -> action`` (the scripted expert of
the teleop drivers). Every variant is evaluated on fresh eval episodes (deterministic policy, seeds never
trained on) every ``--eval-every`` env steps; each variant runs in its own run directory under --runs-root,
seed stated. Intervention steps count as env steps. Prints one line per variant and the intervention rate
over time for (c).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SAC_CRITICS = ["train.sac.critic_ensemble=2", "train.sac.critic_subset=2", "train.sac.critic_layer_norm=false",
               "train.sac.actor_q=min"]


class ScriptedTakeover:
    """Wraps an env: an expert takes over for a few steps at a decaying rate (see the module docstring)."""

    def __init__(self, env, expert, p0: float, half_life: float, takeover_steps: int, seed: int):
        self.env, self.expert = env, expert
        self.p0, self.half_life, self.takeover_steps = p0, half_life, takeover_steps
        self.rng = np.random.default_rng(seed)
        self.steps, self.left, self.obs = 0, 0, None
        self.spec = env.spec

    def reset(self, seed=None):
        self.obs, info = self.env.reset(seed=seed)
        self.left = 0
        return self.obs, info

    def step(self, action):
        if self.left == 0 and self.rng.random() < self.p0 * 0.5 ** (self.steps / self.half_life):
            self.left = self.takeover_steps
        intervened = self.left > 0
        if intervened:
            action = np.asarray(self.expert(self.obs), np.float32)
            self.left -= 1
        self.steps += 1
        self.obs, reward, terminated, truncated, info = self.env.step(action)
        info = dict(info, intervened=intervened, executed_action=np.asarray(action, np.float32))
        return self.obs, reward, terminated, truncated, info

    def close(self):
        self.env.close()


def run_variant(name: str, overrides: list[str], args, expert_factory=None) -> dict:
    from rlhw.config import load_config
    from rlhw.rl.local import train_local
    from rlhw.rl.rundir import RunDir
    from rlhw.robot import make_env

    config = load_config(str(ROOT / "configs/sim_push_cube.yaml"), [
        "train.runner=local", f"train.seed={args.seed}", f"train.max_env_steps={args.max_env_steps}",
        f"train.target_success={args.target}", f"train.eval_every_steps={args.eval_every}",
        "train.eval_episodes=10", "train.progress=false", *overrides])

    def env_factory(cfg, rank):
        env = make_env(cfg, rank)
        if expert_factory is None:
            return env
        return ScriptedTakeover(env, expert_factory(env), args.p0, args.half_life, args.takeover_steps, args.seed)

    rd = RunDir(Path(args.runs_root) / f"{name}-s{args.seed}")
    rd.write_config(config)
    t0 = time.time()
    # Eval episodes get their own env, without the scripted operator: eval success is the policy's alone.
    stop = train_local(config, rd, env_factory=env_factory, eval_env_factory=make_env)
    rows = rd.metrics()
    reached = next((r for r in rows if (r.get("eval/success_rate") or 0) >= args.target), None)
    return {"variant": name, "status": stop.status, "reason": stop.reason, "wall_s": time.time() - t0,
            "steps_to_target": reached["env_steps"] if reached else None,
            "wall_to_target_s": reached["perf/elapsed_s"] if reached else None,
            "evals": [(r["env_steps"], r["eval/success_rate"]) for r in rows if r.get("eval/success_rate") is not None],
            "intervention_rate": [(r["env_steps"], r["train/intervention_rate"]) for r in rows
                                  if r.get("train/intervention_rate")],
            "run_dir": str(rd.path)}


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--variants", default="a", help="comma-separated subset of a,b,c")
    ap.add_argument("--demos", help="demo directory for (b) and (c)")
    ap.add_argument("--expert", help="MODULE:FACTORY, FACTORY(env) -> (obs -> action), for (c)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-env-steps", type=int, default=60_000)
    ap.add_argument("--eval-every", type=int, default=2_000)
    ap.add_argument("--target", type=float, default=0.8)
    ap.add_argument("--p0", type=float, default=0.05, help="(c) takeover probability per step at the start")
    ap.add_argument("--half-life", type=float, default=5_000, help="(c) env steps over which the rate halves")
    ap.add_argument("--takeover-steps", type=int, default=10)
    ap.add_argument("--runs-root", default="runs/bench_hil")
    args = ap.parse_args()
    torch.set_num_threads(1)
    variants = args.variants.split(",")
    if {"b", "c"} & set(variants) and not args.demos:
        ap.error("variants b and c need --demos DIR (rlhw record-demos ... --teleop scripted --out DIR)")
    if "c" in variants and not args.expert:
        ap.error("variant c needs --expert MODULE:FACTORY")
    results = []
    for v in variants:
        if v == "a":
            results.append(run_variant("a-sac", SAC_CRITICS, args))
        elif v == "b":
            results.append(run_variant("b-rlpd-demos", [f"train.demos=[{args.demos}]"], args))
        elif v == "c":
            module, _, attr = args.expert.partition(":")
            factory = getattr(importlib.import_module(module), attr)
            results.append(run_variant("c-rlpd-demos-interventions", [f"train.demos=[{args.demos}]"], args, factory))
        else:
            ap.error(f"unknown variant {v!r}; use a, b, c")
    print(f"sim push_cube, local runner, seed {args.seed}, target eval success {args.target}, "
          f"budget {args.max_env_steps} env steps")
    for r in results:
        print(f"  {r['variant']:30s} steps to target: {r['steps_to_target']}  wall to target: "
              f"{r['wall_to_target_s'] and round(r['wall_to_target_s'])} s  ({r['status']}: {r['reason']})")
        print(f"    evals (env steps, success): {r['evals']}")
        if r["intervention_rate"]:
            print(f"    intervention rate (env steps, share of steps): {r['intervention_rate']}")
    print(json.dumps(results), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
