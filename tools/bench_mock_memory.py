"""A long sim-only run with the mock arm: process RSS over N env steps, with the mock's bounded motion window
(``drivers.mock.KEEP_MOTIONS``) against the same run keeping every motion (the behaviour before, issue 24:
a server's RSS went from 81 to 164 MiB over 400,000 steps).

Each variant runs in a fresh child process (RSS is per process), one after the other, with the same seed:

    PYTHONPATH=$PWD .venv/bin/python tools/bench_mock_memory.py [--steps 100000] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def rss_mib() -> float:
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def run(steps: int, seed: int, keep_all: bool) -> dict:
    """``steps`` random-action steps of configs/sim_reach.yaml on the mock arm; RSS at every quarter."""
    import numpy as np

    from rlhw.config import load_config
    from rlhw.robot import make_env

    env = make_env(load_config(ROOT / "configs" / "sim_reach.yaml", ["env.sim=mock", f"env.seed={seed}"]))
    if keep_all:
        env.arm.motions = deque(env.arm.motions)  # no maxlen: every motion kept, as before the window
    rng = np.random.default_rng(seed)
    env.reset(seed=seed)
    marks, t0 = {}, time.perf_counter()
    for i in range(steps + 1):
        if i % max(1, steps // 4) == 0:
            marks[i] = round(rss_mib(), 1)
        if i == steps:
            break
        _, _, terminated, truncated, _ = env.step(rng.uniform(-1, 1, env.spec.action.shape).astype(np.float32)).gym()
        if terminated or truncated:
            env.reset()
    out = {
        "keep_all": keep_all,
        "rss_mib": marks,
        "growth_mib": round(marks[steps] - marks[0], 1),
        "growth_after_first_quarter_mib": round(marks[steps] - marks[max(1, steps // 4)], 1),
        "motions_kept": len(env.arm.motions),
        "motion_count": env.arm.motion_count,
        "steps_per_s": round(steps / (time.perf_counter() - t0)),
    }
    env.close()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100_000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--child", choices=("window", "keep_all"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(run(args.steps, args.seed, args.child == "keep_all")))
        return 0
    results = {}
    for variant in ("keep_all", "window"):  # the baseline first
        r = subprocess.run(
            [sys.executable, __file__, "--steps", str(args.steps), "--seed", str(args.seed), "--child", variant],
            capture_output=True,
            text=True,
            check=True,
            cwd=ROOT,
        )
        results[variant] = json.loads(r.stdout.strip().splitlines()[-1])
    print(json.dumps({"steps": args.steps, "seed": args.seed, **results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
