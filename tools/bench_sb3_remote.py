"""Benchmark: stable-baselines3's SAC on rlhw's MuJoCo reach, in process against through `RemoteEnv` (issue 39).

Issue 39 asks that a third-party learner stepping a served env through `RemoteEnv` keep at least 0.8x of its
speed on the same env in process. The same config (configs/sim_reach.yaml: MuJoCo arm, proprio, env.pace=free)
two ways, both seen by SB3 as one Gymnasium env:

- ``in process``: `make_env` in this process behind `GymRobotEnv` (rlhw's Gymnasium edge);
- ``served``: a `rlhw serve-env` child (`EnvServerProcess`, as the pipeline serves an arm) stepped by
  `RemoteEnv` from this process (the Session stream, its default).

Both behind gymnasium's `FlattenObservation` (SB3's MlpPolicy takes one Box; rlhw's observation is a Dict of
Boxes), the same wrapper on both sides. Two workloads, each timed on both sides:

- ``sac``: a fresh `SAC("MlpPolicy")` per repeat, fixed small settings and seed (`SAC_SETTINGS`),
  ``model.learn(--steps)``: random actions for ``learning_starts`` steps, then one gradient step per env step.
  Env steps per second of the whole ``learn`` (episode resets included; building the model not timed);
- ``random``: the same number of env steps with seeded random actions and a reset at each episode end, no
  learner: what the wire costs when nothing else runs, to tell the wire's share of the ``sac`` ratio from SB3's.

Repeats are interleaved in one run (round k: random in process, random served, sac in process, sac served), after
one untimed warm-up of each; each ratio is served / in process of the same round. CPU ms per env step counts this
process and, when served, the server child (user + system, all threads; the child's also alone): it depends far
less on the load than wall time does, and since client and server take turns within a step, CPU ms in process /
served is about the wall ratio a quiet machine would give. Torch runs on one thread (the server child is the other
side of each step; the two never compute at once).

    PYTHONPATH=. nice -n 19 .venv/bin/python tools/bench_sb3_remote.py [--repeats 5] [--steps 1000] [--json out.json]
    PYTHONPATH=. .venv/bin/python tools/bench_sb3_remote.py --quick      # a smoke run

stable-baselines3 is a benchmark-only package here, not an rlhw dependency:
``.venv/bin/pip install --no-deps stable-baselines3`` (its own dependencies, torch, gymnasium, numpy and
cloudpickle, are rlhw's already).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import shlex  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import gymnasium as gym  # noqa: E402
import numpy as np  # noqa: E402
import psutil  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CONFIG = ROOT / "configs" / "sim_reach.yaml"
# The server's silence watchdog would stop the arm while the in-process side runs (tens of seconds when loaded).
OVERRIDES = ["env.sim=mujoco", "env.pace=free", "env.images=false", "server.watchdog_s=600"]
SIDES = ("in process", "served")
WORKLOADS = ("random", "sac")
#: SB3 SAC's settings: small and fixed, so that each repeat does the same work (same seed, same update count).
SAC_SETTINGS = {
    "learning_starts": 100,
    "batch_size": 64,
    "buffer_size": 100_000,
    "train_freq": 1,
    "gradient_steps": 1,
    "policy_kwargs": {"net_arch": [64, 64]},
}
STEP_TIMEOUT_S, RESET_TIMEOUT_S, START_TIMEOUT_S = 30.0, 120.0, 120.0


def cpu_s(processes: list[psutil.Process]) -> float:
    """CPU seconds (user + system, every thread) the processes used so far."""
    return sum(sum(p.cpu_times()[:2]) for p in processes)


class Side:
    """One way of reaching the env, as SB3 sees it: ``env`` (flattened observations) and the processes whose
    CPU time a step costs."""

    def __init__(self, name: str, log_dir: Path):
        from rlhw.config import load_config

        config = load_config(CONFIG, OVERRIDES)
        self.name, self.child = name, None
        if name == "in process":
            from rlhw.robot import make_env
            from rlhw.robot.gym import GymRobotEnv

            inner = GymRobotEnv(make_env(config))
            self.processes = [psutil.Process()]
        else:
            from rlhw.env.client import RemoteEnv
            from rlhw.env.server_process import EnvServerProcess

            self.child = EnvServerProcess(
                config, 0, log_path=log_dir / "serve-env.log", start_timeout_s=START_TIMEOUT_S
            )
            address = self.child.start()
            inner = RemoteEnv(address, timeout_s=STEP_TIMEOUT_S, reset_timeout_s=RESET_TIMEOUT_S, reconnect_s=5.0)
            self.processes = [psutil.Process(), psutil.Process(self.child.proc.pid)]
        self.env = gym.wrappers.FlattenObservation(inner)

    def close(self) -> None:
        try:
            self.env.close()
        finally:
            if self.child is not None:
                self.child.stop()


def random_steps(side: Side, steps: int, seed: int) -> None:
    """``steps`` env steps with seeded random actions, a reset at each episode end (as SB3's vector env does)."""
    env = side.env
    rng = np.random.default_rng(seed)
    low, high = env.action_space.low, env.action_space.high
    actions = rng.uniform(low, high, (steps, *low.shape)).astype(np.float32)
    env.reset(seed=seed)
    for action in actions:
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            env.reset()


def sac_model(side: Side, seed: int):
    """A fresh SB3 SAC on ``side.env`` (not timed: what is timed is its ``learn``)."""
    from stable_baselines3 import SAC

    return SAC("MlpPolicy", side.env, seed=seed, device="cpu", verbose=0, **SAC_SETTINGS)


def timed(side: Side, workload: str, steps: int, seed: int) -> tuple[float, float, float]:
    """(env steps per second, CPU ms per env step of all ``side.processes``, of its server child alone) of one
    repeat of ``workload``."""
    model = sac_model(side, seed) if workload == "sac" else None
    server = side.processes[1:]
    c0, s0, t0 = cpu_s(side.processes), cpu_s(server), time.perf_counter()
    if model is None:
        random_steps(side, steps, seed)
    else:
        model.learn(total_timesteps=steps)
    wall, cpu, server_cpu = time.perf_counter() - t0, cpu_s(side.processes) - c0, cpu_s(server) - s0
    return steps / wall, cpu / steps * 1e3, server_cpu / steps * 1e3


def spread(values: list[float], digits: int = 0) -> str:
    return f"{statistics.median(values):.{digits}f} ({min(values):.{digits}f}-{max(values):.{digits}f})"


def run(repeats: int, steps: int, seed: int) -> dict:
    """Every figure of the run: per workload and side, the steps/s and CPU ms of each repeat, and the ratios."""
    os.chdir(ROOT)  # config paths are relative to the repository
    rates = {w: {s: [] for s in SIDES} for w in WORKLOADS}
    cpu = {w: {s: [] for s in SIDES} for w in WORKLOADS}
    server_cpu = {w: [] for w in WORKLOADS}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="bench_sb3_remote_") as tmp:
        sides: dict[str, Side] = {}
        try:
            for name in SIDES:
                sides[name] = Side(name, Path(tmp))
            warm = min(steps, SAC_SETTINGS["learning_starts"] + 50)
            for workload in WORKLOADS:  # first calls: imports, torch's kernels, the stream's first messages
                for name in SIDES:
                    timed(sides[name], workload, warm, seed)
            for k in range(repeats):
                for workload in WORKLOADS:
                    for name in SIDES:
                        rate, ms, server_ms = timed(sides[name], workload, steps, seed)
                        rates[workload][name].append(rate)
                        cpu[workload][name].append(ms)
                        if name == "served":
                            server_cpu[workload].append(server_ms)
                line = ", ".join(
                    f"{w} {rates[w]['in process'][-1]:.0f} / {rates[w]['served'][-1]:.0f}" for w in WORKLOADS
                )
                print(f"repeat {k + 1}/{repeats}: steps/s in process / served: {line}", flush=True)
        finally:
            for side in sides.values():
                side.close()
    ratios = {w: [b / a for a, b in zip(rates[w]["in process"], rates[w]["served"])] for w in WORKLOADS}
    # CPU per step does not depend on the load: in process / served is the ratio where CPU is all a step waits for
    cpu_ratios = {w: [a / b for a, b in zip(cpu[w]["in process"], cpu[w]["served"])] for w in WORKLOADS}
    return {
        "config": str(CONFIG.relative_to(ROOT)),
        "overrides": OVERRIDES,
        "steps": steps,
        "repeats": repeats,
        "seed": seed,
        "sac_settings": SAC_SETTINGS,
        "load_average_before": load_before,
        "load_average_after": os.getloadavg(),
        "steps_per_s": rates,
        "cpu_ms_per_step": cpu,
        "server_cpu_ms_per_step": server_cpu,
        "served_over_in_process": ratios,
        "cpu_in_process_over_served": cpu_ratios,
    }


def report(figures: dict) -> None:
    rates, cpu, ratios = figures["steps_per_s"], figures["cpu_ms_per_step"], figures["served_over_in_process"]
    print(
        f"\n{figures['steps']} env steps per repeat, {figures['repeats']} repeats, seed {figures['seed']}; load "
        f"average {figures['load_average_before'][0]:.2f} before, {figures['load_average_after'][0]:.2f} after"
    )
    ms = {w: {s: [1e3 / r for r in rates[w][s]] for s in SIDES} for w in WORKLOADS}  # wall ms per step
    for workload in WORKLOADS:
        print(f"{workload}: median (min-max)")
        for side in SIDES:
            print(
                f"  {side:10s} {spread(rates[workload][side])} steps/s   "
                f"{spread(cpu[workload][side], 2)} CPU ms per step (all its processes)"
            )
        print(
            f"  the served side's server child alone: {spread(figures['server_cpu_ms_per_step'][workload], 2)} CPU ms"
        )
        print(
            f"  served / in process: median {statistics.median(ratios[workload]):.3f}; each: {joined(ratios[workload])}"
        )
        extra = [b - a for a, b in zip(ms[workload]["in process"], ms[workload]["served"])]
        print(
            f"  served less in process, wall ms per step: median {statistics.median(extra):.2f}; each: {joined(extra)}"
        )
        cpu_ratio = figures["cpu_in_process_over_served"][workload]
        print(
            f"  CPU ms per step, in process / served: median {statistics.median(cpu_ratio):.3f}; each: "
            f"{joined(cpu_ratio)}"
        )
    learner = [s - r for r, s in zip(ms["random"]["in process"], ms["sac"]["in process"])]
    print(f"SB3's own wall ms per step, in process (sac less random): median {statistics.median(learner):.2f}")


def joined(values: list[float]) -> str:
    return " ".join(f"{v:.3f}" for v in values)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="rounds of all four timings (at least 3 for a figure)")
    parser.add_argument("--steps", type=int, default=1000, help="env steps per timing (more than learning_starts)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", type=Path, default=None, help="also write every figure to this file")
    parser.add_argument("--quick", action="store_true", help="2 repeats of 200 steps: a smoke run")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.steps = 2, 200
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1 (got {args.repeats})")
    if args.steps <= SAC_SETTINGS["learning_starts"]:
        parser.error(f"--steps must exceed SAC's learning_starts, {SAC_SETTINGS['learning_starts']} (got {args.steps})")
    try:
        import stable_baselines3
    except ImportError:
        parser.error("stable-baselines3 is not installed: .venv/bin/pip install --no-deps stable-baselines3")
    import torch

    torch.set_num_threads(1)
    print(
        f"stable-baselines3 {stable_baselines3.__version__}, torch {torch.__version__} (1 thread), gymnasium "
        f"{gym.__version__}; {CONFIG.relative_to(ROOT)} {' '.join(OVERRIDES)}",
        flush=True,
    )
    figures = run(args.repeats, args.steps, args.seed)
    figures["command"] = shlex.join([Path(sys.executable).name, *sys.argv])
    report(figures)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
