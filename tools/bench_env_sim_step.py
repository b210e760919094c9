"""Session step latency through the env service with a real simulated arm behind it (the real arm's path in sim).

    PYTHONPATH=$PWD .venv/bin/python tools/bench_env_sim_step.py [--config configs/sim_reach.yaml] [--steps 1000]

`tools/bench_env_service.py` hosts a bare FakeEnv, so it shows the service's fixed cost alone; this one hosts
the env a config builds (MuJoCo reach by default) in a child process, as `rlhw serve-env` does, and times
`RemoteEnv.step` over the Session stream from this process: what a step costs a client when a simulator is
behind the server. Run it in two trees in turn to compare them (docs/benchmarks.md, issue 25's decision).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def serve(config_path: str, overrides: list[str]) -> None:
    from rlhw.config import load_config
    from rlhw.config.server import ServerConfig
    from rlhw.env.server import EnvServer
    from rlhw.robot import make_env

    env = make_env(load_config(config_path, overrides))
    server = EnvServer(env, ServerConfig(port=0, watchdog_s=60.0, max_workers=8, max_streams=4)).start()
    print(json.dumps({"env": server.address}), flush=True)
    sys.stdin.read()  # until the parent closes our stdin
    server.stop(0.5)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(REPO / "configs" / "sim_reach.yaml"))
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    overrides = ["env.max_episode_steps=100000", *args.set]
    if args.serve:
        serve(args.config, overrides)
        return 0
    from rlhw.env.client import RemoteEnv

    cmd = [sys.executable, __file__, "--serve", "--config", args.config, *[f"--set={s}" for s in args.set]]
    child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)
    try:
        env = RemoteEnv(json.loads(child.stdout.readline())["env"], use_session=True)
        env.reset(seed=args.seed)
        rng = np.random.default_rng(args.seed)
        seconds = []
        for _ in range(args.steps):
            action = rng.uniform(-0.3, 0.3, env.action_space.shape).astype(np.float32)
            t0 = time.perf_counter()
            _, _, terminated, truncated, _ = env.step(action)
            seconds.append(time.perf_counter() - t0)
            if terminated or truncated:
                env.reset()
        env.close()
    finally:
        child.stdin.close()
        child.wait(10)
    us = np.asarray(seconds[20:]) * 1e6  # the first steps warm caches
    print(
        f"{args.config}: {len(us)} Session steps, p50 {np.percentile(us, 50):.0f} us, "
        f"p90 {np.percentile(us, 90):.0f} us, mean {us.mean():.0f} us"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
