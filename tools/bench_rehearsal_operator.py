"""How often the scripted operator's takeovers alone finish a push_cube rehearsal episode, against a policy that
drifts up and away (as the rehearsal runs' early policies did), per ``env.teleop.takeover_steps``. No learning.

    PYTHONPATH=$PWD .venv/bin/python tools/bench_rehearsal_operator.py [--episodes 10] [--takeovers 8 20 40 60]

Each episode resets from seed 100 + k; the policy's action is always +z; the operator (intervene mode, no decay)
takes over after ``patience`` steps without progress. Counts episodes in which the judge saw the cube in the
taped square, and the share of steps the operator drove.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    from rlhw.config import load_config
    from rlhw.robot import make_env

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--episodes", type=int, default=10)
    ap.add_argument("--takeovers", type=int, nargs="+", default=[8, 20, 40, 60])
    args = ap.parse_args()
    for takeover in args.takeovers:
        config = load_config(
            str(ROOT / "configs/sim_push_cube_pixels.yaml"),
            [
                "env.sim_state=visible",
                "env.image_size=[32,32]",
                "env.teleop.device=scripted",
                "env.teleop.mode=intervene",
                f"env.teleop.takeover_steps={takeover}",
                "env.teleop.intervene_decay=1.0",
            ],
        )
        env = make_env(config)
        wins, shares = 0, []
        try:
            for k in range(args.episodes):
                env.reset(seed=100 + k)
                done, judged, steps, driven = False, False, 0, 0
                while not done:
                    _, _, terminated, truncated, info = env.step(np.array([0.0, 0.0, 0.6], np.float32)).gym()
                    judged |= info["judge_success"]
                    steps, driven, done = steps + 1, driven + info["intervened"], terminated or truncated
                wins += judged
                shares.append(driven / steps)
        finally:
            env.close()
        print(
            f"takeover_steps={takeover}: {wins}/{args.episodes} episodes reached the goal, "
            f"operator share of steps {np.mean(shares):.2f}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
