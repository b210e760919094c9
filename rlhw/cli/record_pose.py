"""`rlhw record-pose CONFIG NAME [--out FILE] [--now] [--sim]`: save the hand's pose as a task's goal.

It connects to the arm the config names (a real Franka through franky, franky-sim, or MuJoCo) and
moves NOTHING: the operator brings the hand to the goal by hand-guiding (a real Franka: hold the
enabling buttons at the wrist and guide the arm) or with a teleop device in another session, while
this command shows the live hand pose. Enter saves it (``--now``: at once, for scripts and tests).

NAME is the task option that names the pose file (``goal_pose`` for ``insert``): the pose goes to
the file that option holds in CONFIG, or to ``--out FILE``. The file format: rlhw/robot/poses.py.
"""

from __future__ import annotations

import argparse
import os
import select
import sys
import time

from rlhw.config.root import Config
from rlhw.errors import ConfigError

#: How often the live pose is redrawn while waiting for Enter (s).
REFRESH_S = 0.2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="YAML config file (its env section names the arm and the task)")
    parser.add_argument("name", help="the pose to record: a pose option of the config's task (insert: goal_pose)")
    parser.add_argument(
        "overrides", nargs="*", metavar="key=value", help="dotted overrides, e.g. env.driver_timeout_s=5"
    )
    parser.add_argument("--out", default=None, help="write the pose here instead of the file the config names")
    parser.add_argument("--now", action="store_true", help="record the current pose at once, without waiting for Enter")
    parser.add_argument(
        "--sim", action="store_true", help="record in MuJoCo instead of on the configured robot (env.sim=mujoco)"
    )


def pose_path(config: Config, name: str, out: str | None) -> str:
    """Where the pose goes: ``--out``, else the file the task option NAME holds; checked writable."""
    from rlhw.robot.task_registry import task_class

    if not name.replace("_", "").isalnum():
        raise ConfigError("NAME", f"pose name {name!r} must be a word like goal_pose")
    source = "--out"
    if out is None:
        source = f"env.task_options.{name}"
        task = config.env.task
        known = tuple(task_class(task).pose_options)
        if name not in known:
            raise ConfigError(
                "NAME",
                f"task {task!r} has no pose option {name!r}; known: {', '.join(known) or '(none)'}"
                " (or pass --out FILE)",
            )
        out = config.env.task_options.get(name)
        if not out:
            raise ConfigError(
                f"env.task_options.{name}", "names no file; set it to a path (e.g. poses/goal.json) or pass --out FILE"
            )
    path = str(out)
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
        probe = os.path.join(folder, f".rlhw-write-test.{os.getpid()}")
        with open(probe, "w"):
            pass
        os.remove(probe)
    except OSError as e:
        raise ConfigError(source, f"cannot write the pose file {path!r}: {e.strerror or e}") from None
    if os.path.isdir(path):
        raise ConfigError(
            source, f"{path!r} is a directory; give a file name such as {os.path.join(path, name + '.json')}"
        )
    return path


def describe(state) -> str:
    (x, y, z), (qx, qy, qz, qw) = state.pose.position.tolist(), state.pose.quaternion.tolist()
    return (
        f"hand at x={x:+.4f} y={y:+.4f} z={z:+.4f} m, quat(xyzw)=[{qx:+.3f} {qy:+.3f} {qz:+.3f} {qw:+.3f}], "
        f"gripper {state.gripper_width * 1000:.1f} mm"
    )


def wait_for_enter(arm, out=sys.stderr):
    """Show the live pose until the operator presses Enter; returns the state read right after."""
    print("bring the hand to the goal (hand-guiding or teleop), then press Enter to record (Ctrl-C: abort)", file=out)
    while True:
        print("\r" + describe(arm.state()) + "   ", end="", file=out, flush=True)
        ready, _, _ = select.select([sys.stdin], [], [], REFRESH_S)
        if ready:
            sys.stdin.readline()
            print(file=out)
            return arm.state()


def run(args: argparse.Namespace) -> int:
    from rlhw.config import load_config
    from rlhw.robot.factory import build_arm, plan_env
    from rlhw.robot.poses import RecordedPose, save_pose
    from rlhw.robot.task_registry import task_class

    config = load_config(args.config, list(args.overrides) + (["env.sim=mujoco"] if args.sim else []))
    path = pose_path(config, args.name, args.out)
    if not args.now and not sys.stdin.isatty():
        raise ConfigError(
            "--now", "stdin is not a terminal, so nobody can press Enter; pass --now to record the current pose"
        )
    plan = plan_env(config)
    sim_options = task_class(config.env.task).sim_arm_options
    arm = build_arm(config, plan, seed=config.env.seed, sim_options=sim_options)
    arm.connect(timeout_s=config.env.connect_timeout_s)
    try:
        state = arm.state() if args.now else wait_for_enter(arm)
    finally:
        arm.close()
    pose = RecordedPose.from_state(args.name, plan.robot, state)
    save_pose(path, pose)
    print(
        f"rlhw record-pose: {describe(state)}; saved {args.name!r} from {plan.robot} to {path}"
        f" at {time.strftime('%H:%M:%S')}",
        file=sys.stderr,
    )
    return 0
