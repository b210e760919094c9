"""Benchmark: teleop latency, from a SpaceMouse HID report to the arm command, against the policy's path.

The operator's path: a recorded HID report (SpaceMouse Compact layout) is handed to the HID handle at
t0 (as if the kernel had just delivered it); the driver's reader thread pulls it through pyspacemouse's
decoding; the next ``env.step`` (simulated time) executes it; the latency ends when the arm driver's
``command_pose`` is called with it. Two loop shapes:

- ``paced``: the env loop is idle when the report arrives (as a real-time loop is while it waits for
  its control period: sleeping, without the GIL); the step starts once the reader has decoded the
  report. Reported: total, and its decode part (report -> reading available);
- ``busy``: ``env.step`` back to back, never idle; steps that ran before the report was decoded count.
  The reader thread then waits for the GIL (Python's switch interval, 5 ms by default).

The baseline, same env, same run, interleaved trial by trial: the policy's action given to
``env.step`` at t0, until that step's ``command_pose``.

Neither figure includes the wait for the next control period (0 to 1/control_hz on a real-time arm),
which both paths pay alike.

    PYTHONPATH=$PWD .venv/bin/python tools/bench_teleop.py                 # MuJoCo arm, 3 runs x 300 trials
    PYTHONPATH=$PWD .venv/bin/python tools/bench_teleop.py --sim mock --trials 100 --runs 1
    PYTHONPATH=$PWD .venv/bin/python tools/bench_teleop.py --experts 30      # the scripted expert's success rates
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from drivers.teleop.recorded import RecordedHid  # noqa: E402
from drivers.teleop.spacemouse import SpaceMouse  # noqa: E402
from rlhw.config import load_config  # noqa: E402
from rlhw.config.env import TeleopConfig  # noqa: E402
from rlhw.robot import make_env  # noqa: E402
from rlhw.robot.takeover import Takeover  # noqa: E402

# Two full deflections (HID frame): away from the operator (robot +x), and to the left (robot +y).
REPORTS = [(bytes.fromhex("010000a2fe0000"), [1.0, 0.0, 0.0]), (bytes.fromhex("01a2fe00000000"), [0.0, 1.0, 0.0])]
ENDLESS = ["env.max_episode_steps=1000000", "env.reach.terminate_on_success=false", "env.teleop.device=none"]


def build(sim: str):
    env = make_env(load_config(os.path.join(ROOT, "configs", "sim_reach.yaml"), [f"env.sim={sim}", *ENDLESS]))
    hid = RecordedHid()
    mouse = SpaceMouse("SpaceMouseCompact", deadband=0.1, hid_device=hid)
    env.takeover = Takeover(mouse, TeleopConfig(device="spacemouse"), env.spec.action.shape)
    env.takeover.open()
    stamps: list[float] = []
    command = env.arm.command_pose

    def timed_command(pose):
        stamps.append(time.perf_counter())
        command(pose)

    env.arm.command_pose = timed_command
    return env, hid, mouse, stamps


def teleop_trial(
    env, hid, mouse, stamps, report: bytes, expected: list[float], paced: bool
) -> tuple[float, float, int]:
    """Report -> the command of the step that executes it; returns (seconds, decode seconds, steps)."""
    zero = np.zeros(env.spec.action.shape, np.float32)
    target = mouse.reports + 1
    t0 = time.perf_counter()
    hid.push(report)
    decoded = float("nan")
    if paced:  # the loop is idle (waiting for its period) until the reader has decoded the report
        if not mouse.wait_reports(target, 1.0):
            raise RuntimeError("the report was not decoded within 1 s")
        decoded = time.perf_counter() - t0
    for n in range(1, 10_000):
        _, _, _, _, info = env.step(zero).gym()
        if info["executed_action"].tolist() == expected:
            return stamps[-1] - t0, decoded, n
    raise RuntimeError("the report never reached the arm")


def policy_trial(env, stamps, action: np.ndarray) -> float:
    t0 = time.perf_counter()
    env.step(action)
    return stamps[-1] - t0


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values) * 1000.0, q))


def one_run(sim: str, trials: int) -> dict[str, list[float]]:
    env, hid, mouse, stamps = build(sim)
    env.reset(seed=0)
    out: dict[str, list[float]] = {"paced": [], "decode": [], "busy": [], "busy_stale": [], "policy": []}
    rng = np.random.default_rng(0)
    try:
        for i in range(trials):
            if env.episode_step > 200:  # keep the hand inside the box's interior
                env.reset()
            paced = i % 2 == 0
            report, expected = REPORTS[(i // 2) % 2]
            latency, decode, steps = teleop_trial(env, hid, mouse, stamps, report, expected, paced)
            if paced:
                out["paced"].append(latency)
                out["decode"].append(decode)
            else:
                out["busy"].append(latency)
                out["busy_stale"].append(steps - 1)
            target = mouse.reports + 1
            hid.push(bytes.fromhex("01000000000000"))  # let go: the policy drives the baseline
            mouse.wait_reports(target, 1.0)
            out["policy"].append(
                policy_trial(env, stamps, rng.uniform(-1, 1, env.spec.action.shape).astype(np.float32))
            )
    finally:
        env.close()
    return out


def expert_success(task: str, episodes: int) -> tuple[float, float, float]:
    """Scripted expert in demo mode (default noise and hesitation) on ``task`` in MuJoCo: success rate,
    mean steps; baseline: the success rate of a policy that never moves (zero actions, no expert)."""
    overrides = ["env.sim=mujoco", f"env.task={task}", "env.max_episode_steps=100"]
    if task == "push_cube":
        overrides.append("env.safety.workspace_low=[0.25,-0.3,0.02]")
    rates = []
    for device in ("scripted", "none"):
        config = load_config(
            os.path.join(ROOT, "configs", "sim_reach.yaml"), [*overrides, f"env.teleop.device={device}"]
        )
        env = make_env(config)
        wins, steps = 0, []
        try:
            for seed in range(episodes):
                env.reset(seed=seed)
                done, info = False, {}
                while not done:
                    _, _, terminated, truncated, info = env.step(np.zeros(env.spec.action.shape, np.float32)).gym()
                    done = terminated or truncated
                wins += bool(info["success"])
                steps.append(info["episode_step"])
        finally:
            env.close()
        rates.append((wins / episodes, statistics.fmean(steps)))
    return rates[0][0], rates[0][1], rates[1][0]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sim", choices=("mujoco", "mock"), default="mujoco")
    parser.add_argument("--trials", type=int, default=300, help="trials per run (half paced, half busy)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--experts",
        type=int,
        default=0,
        metavar="EPISODES",
        help="instead: the scripted expert's success rate on reach and push_cube over EPISODES seeds",
    )
    args = parser.parse_args()
    if args.experts:
        print(f"scripted expert, demo mode, default noise 0.1 / hesitation 0.05, seeds 0-{args.experts - 1}, MuJoCo")
        for task in ("reach", "push_cube"):
            rate, steps, idle = expert_success(task, args.experts)
            print(
                f"{task:>10}: success {rate:.2f} (mean {steps:.1f} steps); baseline, zero actions: success {idle:.2f}"
            )
        return 0
    print(f"teleop latency, {args.sim} arm, {args.trials} trials per run; milliseconds, p50 / p99")
    print(
        f"{'run':>3} {'policy (baseline)':>18} {'teleop paced':>15} {'of it decode':>15} {'paced/policy p50':>17} "
        f"{'teleop busy':>15} {'busy stale steps':>17}"
    )
    for run in range(args.runs):
        r = one_run(args.sim, args.trials)

        def both(key):
            return f"{pct(r[key], 50):.3f} / {pct(r[key], 99):.3f}"

        print(
            f"{run + 1:>3} {both('policy'):>18} {both('paced'):>15} {both('decode'):>15} "
            f"{pct(r['paced'], 50) / pct(r['policy'], 50):>17.2f} {both('busy'):>15} {statistics.fmean(r['busy_stale']):>17.2f}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
