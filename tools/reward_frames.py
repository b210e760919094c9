"""Record MuJoCo episodes whose success is known, to train and test the success classifier.

Each episode runs through the real env (make_env with env.sim=mujoco, images on) and is written by the
real recorder (rlhw.rl.episodes), so the frames are exactly the pixels an env server would observe and
the per-step ``success`` is the task's own ground truth. A *stager* per task sets the scene before every
step: half the episodes end in success and hold it for the last ``hold`` steps, the others stop short.
push_cube's places the cube through the simulator's hook (small random hand moves make the scenes vary
beyond the cube); insert's drives the hand with the peg through the env in a few coarse steps.

    PYTHONPATH=. .venv/bin/python tools/reward_frames.py --task push_cube --out /tmp/frames --episodes 40
    PYTHONPATH=. .venv/bin/python -m rlhw.cli.main train-reward /tmp/frames --out /tmp/push_cube_reward.pt

    PYTHONPATH=. .venv/bin/python tools/reward_frames.py --task insert --out /tmp/insert_frames --cameras wrist
        --steps 4 --hold 1 --set env.sim_camera_meshes=collision    (one command; docs/vision.md has its result)

Adding a task: write a stager (a class with ``config`` (the base config file), ``overrides`` (what the
task needs on top), ``__init__(env, rng, succeed, steps, hold)``, ``before_step(t) -> action`` and
optionally ``meta``, a dict added to each episode's meta) and register it in STAGERS.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

import drivers.mujoco  # noqa: F401  (chooses the GL backend before mujoco is imported)
from rlhw.config import load_config
from rlhw.rl.episodes import EpisodeRecorder
from rlhw.robot import make_env
from rlhw.robot.pose import Pose


class PushCubeStager:
    """The cube slides from its start to the goal (success) or stops 5+ cm short (failure), in a straight
    line with a little sideways wobble, then holds still for the last ``hold`` steps."""

    config = "configs/sim_reach.yaml"
    overrides = [
        "env.task=push_cube",
        "env.safety.workspace_low=[0.25,-0.3,0.02]",
        "env.task_options.terminate_on_success=false",
    ]

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
        self.arm.set_object_pose("cube", Pose((*xy, self.z)))
        return self.rng.uniform(-0.4, 0.4, 3).astype(np.float32)


class InsertStager:
    """The hand (with the peg) moves from the task's own start to an end pose in ``steps - hold`` steps,
    then holds it for the last ``hold`` steps. A successful episode lines the peg up over the hole
    (its tip 8 mm above it), then goes down the hole's axis in the remaining moving steps to within
    half of ``success_m`` of the goal. A failed one ends clearly short, at one of: above the hole (the
    tip 3-20 mm over it), beside it (the tip over the block top, 1.5-3.5 cm off the axis) or resting
    on the block top (the tip 1 mm over it, partly over the hole's edge).

    Why driven, not teleported: the env computes each step's command from its last measured state,
    so a pose set by hand between steps would be pulled back by the next command. The overrides
    make the steps coarse instead (2 Hz, up to 6 cm a step, the contact zone's slow-down relaxed), so
    an episode is a few cheap steps. The hand's moves go through the real env and safety layer; only
    the rendered pixels and the task's success matter here, and neither depends on the step size.
    """

    config = "configs/sim_insert.yaml"
    overrides = [
        "env.task_options.terminate_on_success=false",
        "env.control_hz=2",
        "env.safety.max_step_m=0.06",
        "env.safety.contact_zone_speed_mps=0.3",
        "env.action.scale_m=0.05",
        "env.task_options.path_speed_mps=0.3",
    ]
    #: The peg's tip above the hole's top while lining up (m), as the scripted expert does.
    CLEARANCE_M = 0.008
    ENDS = ("above", "beside", "on_top")

    def __init__(self, env, rng: np.random.Generator, succeed: bool, steps: int, hold: int):
        if steps - hold < 3:
            raise ValueError(
                f"steps: insert needs steps - hold >= 3 (line up, go down the hole in two steps), "
                f"got steps={steps}, hold={hold}"
            )
        self.env, self.task, self.rng, self.steps, self.hold = env, env.task, rng, steps, hold
        goal, start = self.task.goal.position.copy(), np.asarray(env.measured_state.ee_position, dtype=float)
        moving = steps - hold
        if succeed:
            over = goal + [0.0, 0.0, self.task.depth + self.CLEARANCE_M]
            end = goal + self._success_offset()
            down = [over + (end - over) * k / (moving - 1) for k in range(1, moving)]
            self.waypoints, kind = [over, *down], "success"
        else:
            kind = self.ENDS[int(rng.integers(len(self.ENDS)))]
            end = goal + self._failure_offset(kind)
            self.waypoints = [start + (end - start) * k / moving for k in range(1, moving + 1)]
        self.end = end
        #: Written into the episode's meta: which end was staged (to tell which kind a classifier misses).
        self.meta = {"staged_end": kind}

    def _success_offset(self) -> np.ndarray:
        """Within half the success radius, so that the task judges it a success with room to spare;
        x and y within 1 mm (the hole leaves 2 mm a side)."""
        half = 0.5 * self.task.success_m
        r_max = min(0.001, 0.5 * half)
        r, angle = self.rng.uniform(0, r_max), self.rng.uniform(-np.pi, np.pi)
        dz_max = np.sqrt(half**2 - r_max**2)
        return np.array([r * np.cos(angle), r * np.sin(angle), self.rng.uniform(-dz_max, dz_max)])

    def _failure_offset(self, kind: str) -> np.ndarray:
        """The hand's offset from the goal for an end clearly short of it (the tip is ``depth`` below
        the hole's top at the goal)."""
        depth, rng = self.task.depth, self.rng
        angle = rng.uniform(-np.pi, np.pi)
        if kind == "above":
            r, tip = rng.uniform(0, 0.0015), rng.uniform(0.003, 0.02)
        elif kind == "beside":
            r, tip = rng.uniform(0.015, 0.035), rng.uniform(0.003, 0.02)
        else:  # on_top: the 2 cm peg fits the 2.4 cm hole only within 2 mm of its axis; 1.4 cm off, it rests on the top
            r, tip = rng.uniform(0.014, 0.035), 0.001
        return np.array([r * np.cos(angle), r * np.sin(angle), depth + tip])

    def before_step(self, t: int) -> np.ndarray:
        """The action toward this step's waypoint (the last one while holding), from the measured hand."""
        target = self.waypoints[min(t, len(self.waypoints) - 1)]
        hand = np.asarray(self.env.measured_state.ee_position, dtype=float)
        action = np.clip((target - hand) / self.env.config.action.scale_m, -1.0, 1.0)
        return action.astype(np.float32)


#: task name -> stager class.
STAGERS = {"push_cube": PushCubeStager, "insert": InsertStager}


def record_episodes(
    task: str,
    out_dir: str | Path,
    episodes: int,
    *,
    steps: int = 10,
    hold: int = 4,
    size: int = 64,
    cameras: Sequence[str] = ("front",),
    seed: int = 0,
    config: str | None = None,
    overrides: Sequence[str] = (),
) -> list[Path]:
    """Record ``episodes`` episodes of ``task`` (alternately successful and not) under ``out_dir``."""
    if task not in STAGERS:
        raise SystemExit(f"no stager for task {task!r}; known: {', '.join(STAGERS)}")
    stager_cls = STAGERS[task]
    cfg = load_config(
        config or stager_cls.config,
        [
            "env.sim=mujoco",
            "env.images=true",
            f"env.image_size=[{size},{size}]",
            f"env.sim_cameras=[{','.join(cameras)}]",
            f"env.max_episode_steps={steps}",
            *stager_cls.overrides,
            *overrides,
        ],
    )
    env = make_env(cfg)
    rng = np.random.default_rng(seed)
    recorder, paths = EpisodeRecorder(out_dir), []
    try:
        for i in range(episodes):
            obs, info = env.reset(seed=seed * 100_003 + i).gym()
            succeed = i % 2 == 0
            stager = stager_cls(env, rng, succeed, steps, hold)
            recorder.begin(obs, meta={"task": task, "staged_success": succeed, **getattr(stager, "meta", {})})
            for t in range(steps):
                action = stager.before_step(t)
                obs, reward, terminated, truncated, info = env.step(action).gym()
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
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="config override on top of the stager's (repeatable), e.g. env.sim_camera_meshes=collision",
    )
    a = p.parse_args(argv)
    paths = record_episodes(
        a.task,
        a.out,
        a.episodes,
        steps=a.steps,
        hold=a.hold,
        size=a.size,
        cameras=a.cameras,
        seed=a.seed,
        config=a.config,
        overrides=a.set,
    )
    print(f"wrote {len(paths)} episodes under {a.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
