"""Session step latency through the env service with a real simulated arm behind it (the real arm's path in sim).

    PYTHONPATH=$PWD .venv/bin/python tools/bench_env_sim_step.py [--config configs/sim_reach.yaml] [--steps 1000]

`tools/bench_env_service.py` hosts a bare FakeEnv, so it shows the service's fixed cost alone; this one hosts
the env a config builds (MuJoCo reach by default) in child processes, as `rlhw serve-env` does, and times
`RemoteEnv.step` over the Session stream from this process: what a step costs a client when a simulator is
behind the server. Two servers side by side, blocks of steps alternating between them: one as rlhw serves
(observations appended as declared tensors, rlhw.env.step_messages) and one whose writer declares nothing
(protobuf's fill for every field: "plain"). To compare two trees, run it in each in turn.
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
WIRES = ("declared", "plain")


def serve(config_path: str, overrides: list[str], wire: str) -> None:
    import dataclasses

    from rlhw.config import load_config
    from rlhw.config.server import ServerConfig
    from rlhw.env.server import EnvServer
    from rlhw.env.step_messages import StepWriter
    from rlhw.robot import make_env

    env = make_env(load_config(config_path, overrides))
    server = EnvServer(env, ServerConfig(port=0, watchdog_s=60.0, max_workers=8, max_streams=4)).start()
    if wire == "plain":  # a writer that declares no observation: protobuf's fill for every field
        server.native.writer = StepWriter(dataclasses.replace(env.spec, observations={}))
    print(json.dumps({"env": server.address}), flush=True)
    sys.stdin.read()  # until the parent closes our stdin
    server.stop(0.5)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=str(REPO / "configs" / "sim_reach.yaml"))
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override")
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--block", type=int, default=50, help="steps per block; blocks alternate between the servers")
    ap.add_argument("--serve", choices=WIRES, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    overrides = ["env.max_episode_steps=100000", *args.set]
    if args.serve:
        serve(args.config, overrides, args.serve)
        return 0
    from rlhw.env.client import RemoteEnv

    children, envs, seconds = {}, {}, {wire: [] for wire in WIRES}
    try:
        for wire in WIRES:
            cmd = [sys.executable, __file__, "--serve", wire, "--config", args.config]
            cmd += [f"--set={s}" for s in args.set]
            children[wire] = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=REPO)
            envs[wire] = RemoteEnv(json.loads(children[wire].stdout.readline())["env"], use_session=True)
            envs[wire].reset(seed=args.seed)
        rng = np.random.default_rng(args.seed)
        for block in range(args.steps // args.block):
            for wire in WIRES if block % 2 == 0 else WIRES[::-1]:
                env = envs[wire]
                for _ in range(args.block):
                    action = rng.uniform(-0.3, 0.3, env.action_space.shape).astype(np.float32)
                    t0 = time.perf_counter()
                    _, _, terminated, truncated, _ = env.step(action)
                    seconds[wire].append(time.perf_counter() - t0)
                    if terminated or truncated:
                        env.reset()
        encode = {wire: envs[wire].status().timing["encode"].p50_s * 1e6 for wire in WIRES}
        for env in envs.values():
            env.close()
    finally:
        for child in children.values():
            child.stdin.close()
            child.wait(10)
    p50 = {}
    for wire in WIRES:
        us = np.asarray(seconds[wire][args.block :]) * 1e6  # the first block warms caches
        p50[wire] = np.percentile(us, 50)
        print(
            f"{args.config} [{wire}]: {len(us)} Session steps, p50 {p50[wire]:.0f} us, "
            f"p90 {np.percentile(us, 90):.0f} us, mean {us.mean():.0f} us; server encode p50 {encode[wire]:.1f} us"
        )
    print(f"p50 declared / plain: {p50['declared'] / p50['plain']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
