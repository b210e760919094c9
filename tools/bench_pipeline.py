"""Pipeline throughput against an in-process loop, and real-robot loop health against franky-sim.

    .venv/bin/python tools/bench_pipeline.py [--seconds 30] [--num-envs 1,4,8] [--franky-steps 300] [--skip-franky]

Part 1 (sim only, one run, same machine, same env and policy): env steps/s of
  - an in-process loop: `make_env` (MuJoCo reach) + the SAC policy network in one Python loop;
  - the full pipeline (env worker -> `rlhw serve-env` child over gRPC -> channels -> rollout worker with
    the same policy network -> channels) with 1 and with 2 env workers, each serving ``env.num_envs``
    instances for every value of ``--num-envs`` (1 = one arm per env worker; more = simulated instances
    stepped together, one message and one gRPC step per env-worker step), no training running.
Part 2: configs/franky_sim.yaml (the real franka driver against franky-sim) through the pipeline at 10 Hz with
the policy acting: deadline hit rate (steps that started inside their control period) and the p50/p99 of
observation-to-action latency (env worker: observation in hand -> action back from the rollout worker).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def in_process(config, seconds: float) -> float:
    from rlhw.rl.local import make_agent
    from rlhw.robot import make_env

    env = make_env(config, 0)
    agent = make_agent(config, env.spec, "cpu")
    obs, _ = env.reset(seed=0)
    steps, t0 = 0, None
    try:
        while True:
            action = agent.act({k: np.asarray(v)[None] for k, v in obs.items()})[0]
            obs, _, term, trunc, _ = env.step(action)
            if term or trunc:
                obs, _ = env.reset()
            steps += 1
            if steps == 50:
                t0 = time.perf_counter()  # after warm-up
            if t0 is not None and time.perf_counter() - t0 >= seconds:
                return (steps - 50) / (time.perf_counter() - t0)
    finally:
        env.close()


def pipeline_rate(config, seconds: float) -> tuple[float, list[dict]]:
    from rlhw.rl.pipeline.controller import Pipeline
    from rlhw.rl.rundir import RunDir
    from rlhw.runtime.cluster import Cluster

    with tempfile.TemporaryDirectory() as tmp:
        pipe = Pipeline(config, RunDir(tmp), cluster=Cluster(config, probe_hardware=False))
        try:
            pipe.rollouts.set_exploration(False).wait(60)  # the policy network acts, as in the loop
            pipe.envs.run_async().wait(60)
            deadline = time.monotonic() + 240  # warm-up: the first resets (a real arm moves home) and 20 steps
            while sum(p.train_steps for p in pipe.poll_envs()) < 20 and time.monotonic() < deadline:
                time.sleep(0.5)
            s0 = sum(p.train_steps for p in pipe.poll_envs())
            t0 = time.perf_counter()
            time.sleep(seconds)
            s1 = sum(p.train_steps for p in pipe.poll_envs())
            rate = (s1 - s0) / (time.perf_counter() - t0)
            health = pipe.envs.loop_health().wait(60)
        finally:
            pipe.close()
    return rate, health


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--franky-steps", type=int, default=300)
    ap.add_argument("--num-envs", default="1,4,8",
                    help="comma-separated env.num_envs values to run the pipeline rows with (default 1,4,8)")
    ap.add_argument("--skip-franky", action="store_true")
    ap.add_argument("--only-franky", action="store_true")
    args = ap.parse_args()
    try:
        num_envs = [int(x) for x in args.num_envs.split(",") if x.strip()]
    except ValueError:
        ap.error(f"--num-envs takes comma-separated integers, got {args.num_envs!r}")
    if not num_envs or min(num_envs) < 1:
        ap.error(f"--num-envs needs values >= 1, got {args.num_envs!r}")
    torch.set_num_threads(1)
    import ray

    from rlhw.config import load_config, load_config_dict

    base = ["train.progress=false", "train.learning_starts=100000000", "train.record_episodes=false"]

    def configs(k: int):
        """sim_reach with env.num_envs=k: one env worker, and two env workers on node 0."""
        one = load_config(ROOT / "configs/sim_reach.yaml", [*base, f"env.num_envs={k}"])
        data = one.model_dump(mode="json")
        data["cluster"]["component_placement"] = {"env": {"node_group": "node", "placement": "0:0-1"},
                                                  "rollout,actor": {"node_group": "node", "placement": "0"}}
        return one, load_config_dict(data)

    cfg1, _ = configs(1)

    rows = []
    if args.only_franky:
        args.seconds = 0
    loop = in_process(cfg1, args.seconds) if not args.only_franky else float("nan")
    rows.append(("in-process loop (env + policy, 1 arm)", loop, 1.0, ""))
    for k in (num_envs if not args.only_franky else ()):
        for n, cfg in zip((1, 2), configs(k)):
            rate, health = pipeline_rate(cfg, args.seconds)
            lat = max(h["latency_p99_ms"] for h in health)
            name = f"pipeline, {n} env worker{'s' if n > 1 else ''}" + (f" x {k} instances" if k > 1 else "")
            rows.append((name, rate, rate / loop, f"{lat:.1f}"))
    print()
    print(f"{'sim reach (MuJoCo), env steps/s':<44}{'steps/s':>10}{'x loop':>10}{'obs->act p99 ms':>17}")
    for name, rate, ratio, lat in rows:
        print(f"{name:<44}{rate:>10.1f}{ratio:>10.2f}{lat:>17}")

    if not args.skip_franky:
        from drivers.franky_sim import FrankySim

        with FrankySim(start_timeout_s=120) as sim:
            cfg = load_config(ROOT / "configs/franky_sim.yaml", [
                f"cluster.node_groups[0].hardware.configs[0].robot_ip={sim.host}",
                "train.progress=false", "train.record_episodes=false", "train.learning_starts=100000000"])
            seconds = args.franky_steps / cfg.env.control_hz
            rate, health = pipeline_rate(cfg, seconds)
        h = health[0]
        print()
        print(f"franky-sim at {cfg.env.control_hz:g} Hz through the pipeline (real franka driver), {h['steps']} steps")
        print(f"  achieved rate            {rate:.2f} steps/s (resets to home included)")
        if h["late_steps"] is None:
            print("  deadline hit rate        unknown: the env reported no step lateness")
        else:
            hit = 1.0 - h["late_steps"] / max(h["timed_steps"], 1)
            print(f"  deadline hit rate        {hit * 100:.2f} %  ({h['late_steps']} of {h['timed_steps']} steps late; "
                  f"p99 lateness {h['lateness_p99_ms']:.1f} ms)")
        if h["period_p50_ms"] is not None:
            print(f"  step period              p50 {h['period_p50_ms']:.1f} ms, p99 {h['period_p99_ms']:.1f} ms "
                  f"(target {1000 / cfg.env.control_hz:.0f} ms)")
        print(f"  obs->action latency      p50 {h['latency_p50_ms']:.1f} ms, p99 {h['latency_p99_ms']:.1f} ms, "
              f"max {h['latency_max_ms']:.1f} ms")
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
