"""Record MuJoCo episodes whose success is known, to train and test the success classifier.

Each episode runs through the real env (make_env with env.sim=mujoco, images on) and is written by the
real recorder (rlhw.rl.episodes), so the frames are exactly the pixels an env server would observe and
the per-step ``success`` is the task's own ground truth. A *stager* per task sets the scene before every
step through the simulator hooks: half the episodes end in success and hold it for the last ``hold``
steps, the others stop short. Small random hand moves make the scenes vary beyond the object.

    PYTHONPATH=. .venv/bin/python tools/reward_frames.py --task push_cube --out /tmp/frames --episodes 40
    PYTHONPATH=. .venv/bin/python -m rlhw.cli.main train-reward /tmp/frames --out /tmp/push_cube_reward.pt

Adding a task: write a stager (a class with ``config`` (the base config file), ``overrides`` (what the
task needs on top), ``__init__(env, rng, succeed, steps, hold)`` and ``before_step(t) -> action``) and
register it in STAGERS.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

import numpy as np

import drivers.mujoco  # noqa: F401  (chooses the GL backend before mujoco is imported)
from rlhw.config import load_config
from rlhw.rl.episodes import EpisodeRecorder
from rlhw.robot import make_env


class PushCubeStager:
    """The cube slides from its start to the goal (success) or stops 5+ cm short (failure), in a straight
    line with a little sideways wobble, then holds still for the last ``hold`` steps."""

    config = "configs/sim_reach.yaml"
    overrides = ["env.task=push_cube", "env.safety.workspace_low=[0.25,-0.3,0.02]",
                 "env.task_options.terminate_on_success=false"]

    def __init__(self, env, rng: np.random.Generator, succeed: bool, steps: int, hold: int):
        task = env.task
        self.arm, self.rng, self.steps, self.hold = env.arm, rng, steps, hold
        start, goal = task.cube[:2].copy(), task.goal[:2].copy()
        gap = float(np.linalg.norm(goal - start))
        if succeed:  # anywhere well inside the success radius
            angle, r = rng.uniform(-np.pi, np.pi), rng.uniform(0, 0.6 * task.success_m)
            self.end = goal + r * np.array([np.cos(angle), np.sin(angle)])
        else:  # short of the goal along the line, at least 5 cm away from it
            self.end = start + (goal - start) * rng.uniform(0.0, max(0.0, 1 - 0.05 / gap))
        self.start, self.z = start, task.cube[2]

    def before_step(self, t: int) -> np.ndarray:
        moving = max(1, self.steps - self.hold)
        f = min(1.0, (t + 1) / moving)
        xy = self.start + f * (self.end - self.start)
        if f < 1.0:
            xy = xy + self.rng.normal(0, 0.004, 2)
        self.arm.set_object_pose("cube", np.array([*xy, self.z]))
        return self.rng.uniform(-0.4, 0.4, 3).astype(np.float32)


#: task name -> stager class. The insert task registers its own after merging (see docs/vision.md).
STAGERS = {"push_cube": PushCubeStager}


def record_episodes(task: str, out_dir: str | Path, episodes: int, *, steps: int = 10, hold: int = 4,
                    size: int = 64, cameras: Sequence[str] = ("front",), seed: int = 0,
                    config: str | None = None, overrides: Sequence[str] = ()) -> list[Path]:
    """Record ``episodes`` episodes of ``task`` (alternately successful and not) under ``out_dir``."""
    if task not in STAGERS:
        raise SystemExit(f"no stager for task {task!r}; known: {', '.join(STAGERS)}")
    stager_cls = STAGERS[task]
    cfg = load_config(config or stager_cls.config, ["env.sim=mujoco", "env.images=true", f"env.image_size=[{size},{size}]",
                               f"env.sim_cameras=[{','.join(cameras)}]", f"env.max_episode_steps={steps}",
                               *stager_cls.overrides, *overrides])
    env = make_env(cfg)
    rng = np.random.default_rng(seed)
    recorder, paths = EpisodeRecorder(out_dir), []
    try:
        for i in range(episodes):
            obs, info = env.reset(seed=seed * 100_003 + i)
            succeed = i % 2 == 0
            recorder.begin(obs, meta={"task": task, "staged_success": succeed})
            stager = stager_cls(env, rng, succeed, steps, hold)
            for t in range(steps):
                action = stager.before_step(t)
                obs, reward, terminated, truncated, info = env.step(action)
                recorder.step(action, reward, terminated, truncated, obs, success=info["success"])
                if terminated or truncated:
                    break
            paths.append(recorder.end())
    finally:
        recorder.close()
        env.close()
    return paths


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--task", default="push_cube", choices=sorted(STAGERS))
    p.add_argument("--out", required=True, help="directory for the episode files")
    p.add_argument("--episodes", type=int, default=40)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--hold", type=int, default=4)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--cameras", nargs="+", default=["front"])
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--config", default=None, help="base config (default: the stager's)")
    a = p.parse_args(argv)
    paths = record_episodes(a.task, a.out, a.episodes, steps=a.steps, hold=a.hold, size=a.size,
                            cameras=a.cameras, seed=a.seed, config=a.config)
    print(f"wrote {len(paths)} episodes under {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
