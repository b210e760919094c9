"""`rlhw record-demos CONFIG [--episodes N] [--teleop DEVICE] [--out DIR] [--replay EPISODE_FILE]`.

An operator drives the arm (or the scripted expert does, in sim) and every episode is written as it is
recorded, crash-safe, in the episode format the trainer reads (rlhw.rl.episodes, kind ``demo``:
``DIR/demo-NNNNNN.npz``; a crash leaves ``demo-NNNNNN.steps``, complete up to its last step).

- The env is built in this process with rlhw.robot.make_env, so the same command works on MuJoCo,
  the mock, franky-sim and a real arm; the device is read on this node (``env.teleop``).
- The operator's action is executed on every step (``env.teleop.always_active``): at rest the arm
  holds still. It goes through the env's safety layer like any action.
- Between episodes the env resets with its bounded, safe reset, from seed ``env.seed + episode``.
- Labels: the operator's mark (success / failure key or button), else the task's success.
- The stored action of every step is the step's ``executed`` action (rlhw/robot/step.py), what really went to
  the arm.

``--replay FILE`` re-executes a recorded episode's actions in simulation from its seed and reports
whether the final state reproduces (every proprio observation within ``--tolerance``).
Exit status: 0 done (replay: reproduced), 1 replay did not reproduce, 2 usage or config error.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from rlhw.cli.common import add_config_arguments, positive_int
from rlhw.config.root import Config
from rlhw.errors import ConfigError
from rlhw.robot.registry import teleop_devices
from rlhw.robot.step import Step

#: The teleop devices the driver registry knows (names only: no device module is imported).
DEVICES = tuple(teleop_devices())


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument(
        "--episodes", type=positive_int("--episodes"), default=20, help="episodes to record (default 20, as SERL)"
    )
    parser.add_argument(
        "--teleop", choices=DEVICES, default=None, help="the operator's device (default: env.teleop.device)"
    )
    parser.add_argument("--out", default="demos", help="directory of the demo episodes (default: ./demos)")
    parser.add_argument(
        "--replay",
        metavar="EPISODE_FILE",
        default=None,
        help="re-execute a recorded episode in sim and check it reproduces",
    )
    parser.add_argument(
        "--tolerance",
        type=float,
        default=0.005,
        help="replay: largest final deviation of any proprio observation (default 0.005)",
    )
    parser.add_argument("--no-live", action="store_true", help="print one line per episode instead of the live view")


def run(args: argparse.Namespace) -> int:
    from rlhw.config import load_config

    overrides = list(args.overrides)
    if args.replay:
        return replay(
            load_config(args.config, [*overrides, "env.teleop.device=none"]), Path(args.replay), args.tolerance
        )
    if args.teleop:
        overrides.append(f"env.teleop.device={args.teleop}")
    overrides += ["env.teleop.always_active=true", "env.teleop.mode=demo"]
    config = load_config(args.config, overrides)
    if config.env.teleop.device == "none":
        raise ConfigError(
            "--teleop", f"record-demos needs an operator: pass --teleop {'|'.join(DEVICES)} or set env.teleop.device"
        )
    return record(config, args, overrides)


def record(config: Config, args, overrides: list[str]) -> int:
    from rlhw.rl.demos import PROVENANCE_KEY, recorded_env
    from rlhw.rl.episodes import EpisodeKind, EpisodeRecorder
    from rlhw.robot import make_env

    out = Path(args.out)
    env = make_env(config)
    # Human demonstrations are precious: fsync each finished one. Each records the env config it was recorded
    # with, which `train.demos` checks against the run's (rlhw.rl.demos).
    recorder = EpisodeRecorder(out, fsync=True, meta={PROVENANCE_KEY: recorded_env(config.env)})
    view = LiveView(args.episodes, enabled=not args.no_live)
    successes = 0
    zero = np.zeros(env.spec.action.shape, dtype=np.float32)
    try:
        with view:
            for episode in range(args.episodes):
                seed = config.env.seed + episode
                first = env.reset(seed=seed)
                recorder.begin(
                    {k: v[0] for k, v in first.obs.items()},
                    kind=EpisodeKind.DEMO,
                    meta={
                        "seed": seed,
                        "task": config.env.task,
                        "robot": env.spec.robot,
                        "teleop": config.env.teleop.device,
                        "config": str(args.config),
                        "overrides": overrides,
                        "control_hz": config.env.control_hz,
                    },
                )
                done = False
                while not done:
                    step = env.step(zero)  # the operator's action is executed
                    recorder.step(
                        step.executed[0],
                        step.reward[0],
                        step.terminated[0],
                        step.truncated[0],
                        {k: v[0] for k, v in step.obs.items()},
                        step.success[0],
                        intervened=step.intervened[0],
                        fault=step.fault[0],
                        judge_success=None if step.judge_success is None else step.judge_success[0],
                    )
                    done = bool(step.ended[0])
                    view.update(episode, step, successes)
                path = recorder.end()
                successes += bool(step.success[0])
                view.finished(episode, path, step, successes)
    finally:
        recorder.close()
        env.close()
    print(f"recorded {args.episodes} demo episode(s) in {out}: {successes} success(es)")
    return 0


def replay(config: Config, path: Path, tolerance: float) -> int:
    """Re-execute ``path``'s actions from its seed in sim; 0 when the final state is within ``tolerance``."""
    from rlhw.rl.episodes import load_episode
    from rlhw.robot import make_env

    if not path.is_file():
        raise ConfigError("--replay", f"{path} is not a file; give a demo-NNNNNN.npz written by record-demos")
    episode = load_episode(path)
    if episode is None:
        raise ConfigError("--replay", f"{path} holds no recorded step")
    meta = episode.meta
    if "seed" not in meta:
        raise ConfigError("--replay", f"{path} has no seed in its meta; only episodes written by record-demos replay")
    env = make_env(config)
    try:
        if env.realtime:
            raise ConfigError(
                "--replay", "replay runs in simulation only (a real arm is not deterministic); add env.sim=mujoco"
            )
        env.reset(seed=int(meta["seed"]))
        for action in episode.action:
            step = env.step(action)
            if step.ended[0]:
                break
    finally:
        env.close()
    obs, steps = {k: v[0] for k, v in step.obs.items()}, step.notes[0].episode_step
    deviation = max(
        float(np.max(np.abs(obs[k] - episode.obs[k][-1])))
        for k in obs
        if not k.startswith("image_") and k in episode.obs
    )
    ok = deviation <= tolerance and episode.length == steps
    print(
        f"replay of {path}: {steps} of {episode.length} steps, final deviation "
        f"{deviation:.6f} (tolerance {tolerance}): {'reproduced' if ok else 'NOT reproduced'}"
    )
    return 0 if ok else 1


class LiveView:
    """The operator's screen (rich): episode, step, successes, camera frame age; plain lines without it."""

    def __init__(self, episodes: int, enabled: bool = True):
        self.episodes = episodes
        self.enabled = enabled
        self._live = None

    def __enter__(self) -> LiveView:
        if self.enabled:
            from rich.console import Console
            from rich.live import Live

            self._live = Live(
                self._render(0, None, 0), console=Console(stderr=True), refresh_per_second=8, transient=False
            )
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)

    def update(self, episode: int, step: Step, successes: int) -> None:
        if self._live is not None:
            self._live.update(self._render(episode, step, successes))

    def finished(self, episode: int, path, step: Step, successes: int) -> None:
        label = step.notes[0].operator_label or ("success" if step.success[0] else "failure")
        line = f"episode {episode + 1}/{self.episodes}: {step.notes[0].episode_step} steps, {label}, saved {path}"
        if self._live is not None:
            self._live.console.print(line)
        else:
            print(line, flush=True)

    def _render(self, episode: int, step: Step | None, successes: int):
        from rich.table import Table

        table = Table(title="rlhw record-demos", show_header=False)
        table.add_row("episode", f"{episode + 1} / {self.episodes}")
        table.add_row("step", str(step.notes[0].episode_step) if step is not None else "-")
        table.add_row("successes", str(successes))
        table.add_row("operator", "driving" if step is not None and step.intervened[0] else "-")
        table.add_row("camera frame age", frame_ages(step))
        return table


def frame_ages(step: Step | None) -> str:
    """Age of each camera's newest frame in the last observation, e.g. ``front 42 ms``."""
    if step is None:
        return "-"
    now = time.time()
    ages = [
        f"{k[len('image_') :]} {1000 * (now - t[0]):.0f} ms" for k, t in step.stamps.items() if k.startswith("image_")
    ]
    return ", ".join(ages) or "no camera"
