"""Benchmark: the ``insert`` task in MuJoCo (configs/sim_insert.yaml), with ``reach`` as the baseline.

One run measures:

- the scripted expert (rlhw/robot/tasks/insert.py, `insert_expert`): success rate, steps to success, contact
  faults, over N seeded episodes (seeds 0..N-1: reset(seed=i));
- the cost of one env step and one reset, CPU seconds of this process (``time.process_time``) and
  wall seconds: insert (peg scene, contact wrench, contact zone) against reach on the plain scene
  (same driver, same control rate), interleaved block by block so machine noise hits both alike.

    PYTHONPATH=. .venv/bin/python tools/bench_insert.py [--episodes 20] [--steps 400]
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from drivers.teleop.scripted import expert_action  # noqa: E402
from rlhw.config import load_config  # noqa: E402
from rlhw.robot import make_env  # noqa: E402


def expert_episodes(env, episodes: int) -> dict:
    successes, lengths, faults = 0, [], []
    for seed in range(episodes):
        env.reset(seed=seed)
        for step in range(env.config.max_episode_steps):  # noqa: B007  (read after the loop)
            _, _, terminated, truncated, info = env.step(expert_action(env.operator_view)).gym()
            if info["fault"]:
                faults.append(info["fault"])
            if terminated or truncated:
                break
        successes += bool(info["success"])
        if info["success"]:
            lengths.append(step + 1)
    return {
        "episodes": episodes,
        "seeds": f"0..{episodes - 1}",
        "success_rate": successes / episodes,
        "steps_to_success_median": statistics.median(lengths) if lengths else None,
        "steps_to_success_max": max(lengths) if lengths else None,
        "faults": faults,
    }


def time_block(env, steps: int, policy) -> tuple[float, float, float, int]:
    """(cpu s per step, wall s per step, cpu s per reset, resets) over ``steps`` steps."""
    step_cpu = step_wall = reset_cpu = 0.0
    resets = 0
    for _ in range(steps):
        c, w = time.process_time(), time.perf_counter()
        _, _, terminated, truncated, _ = env.step(policy(env)).gym()
        step_cpu += time.process_time() - c
        step_wall += time.perf_counter() - w
        if terminated or truncated:
            c = time.process_time()
            env.reset()
            reset_cpu += time.process_time() - c
            resets += 1
    return step_cpu / steps, step_wall / steps, reset_cpu / max(resets, 1), resets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=20)
    parser.add_argument("--steps", type=int, default=400, help="timed steps per variant (in 4 interleaved blocks)")
    args = parser.parse_args()

    insert = make_env(load_config("configs/sim_insert.yaml"))
    reach = make_env(load_config("configs/sim_reach.yaml"))
    try:
        result = {"expert": expert_episodes(insert, args.episodes)}
        rng = np.random.default_rng(0)
        policies = {
            "insert": lambda env: expert_action(env.operator_view),
            "reach": lambda env: rng.uniform(-1, 1, 3).astype(np.float32),
        }
        envs = {"insert": insert, "reach": reach}
        totals = {name: [] for name in envs}
        for env in envs.values():
            env.reset(seed=100)
        for _ in range(4):
            for name, env in envs.items():
                totals[name].append(time_block(env, args.steps // 4, policies[name]))
        for name, blocks in totals.items():
            result[name] = {
                "cpu_ms_per_step": 1e3 * statistics.mean(b[0] for b in blocks),
                "wall_ms_per_step": 1e3 * statistics.mean(b[1] for b in blocks),
                "cpu_ms_per_reset": 1e3 * statistics.mean(b[2] for b in blocks if b[3])
                if any(b[3] for b in blocks)
                else None,
            }
        result["insert_vs_reach_step_cpu"] = result["insert"]["cpu_ms_per_step"] / result["reach"]["cpu_ms_per_step"]
        print(json.dumps(result, indent=2))
    finally:
        insert.close()
        reach.close()


if __name__ == "__main__":
    main()
