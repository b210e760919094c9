"""`rlhw smoke-test CONFIG [key=value ...]`: check robots, cameras, nodes and env servers.

Answers in seconds, trains nothing, and moves no arm unless ``--allow-motion`` is given and
confirmed (a prompt on a terminal, or ``--yes``); without a terminal and without ``--yes`` the
motion checks are skipped with the reason. Exit status: 0 when every required check passed, 1
when one failed, 2 for a usage or config error.
"""

from __future__ import annotations

import argparse
import os
import sys

from rlhw.cli.common import add_config_arguments, positive_seconds
from rlhw.errors import ConfigError
from rlhw.smoke.options import CHECK_GROUPS


def _checks(text: str) -> tuple[str, ...]:
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    bad = [n for n in names if n not in CHECK_GROUPS]
    if bad or not names:
        raise argparse.ArgumentTypeError(
            f"unknown check group(s) {bad or [text]}; choose from {', '.join(CHECK_GROUPS)}"
        )
    return names


def _playback(text: str) -> tuple[str, str]:
    serial, sep, path = text.partition("=")
    if not sep or not serial.strip() or not path.strip():
        raise argparse.ArgumentTypeError(f"--camera-playback wants SERIAL=FILE, got {text!r}")
    return serial.strip(), path.strip()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    _add_selection_arguments(parser.add_argument_group("what to check"))
    _add_motion_arguments(parser.add_argument_group("motion (off unless asked for)"))
    _add_bound_arguments(parser.add_argument_group("time bounds"))
    parser.add_argument("--json", metavar="FILE", help="also write the report as JSON to FILE")


def _add_selection_arguments(group: argparse._ArgumentGroup) -> None:
    """Which robots, cameras, nodes and env servers the run checks, and where."""
    group.add_argument("--node-group", metavar="G", help="only the robots, cameras and nodes of node group G")
    group.add_argument(
        "--robot",
        type=int,
        metavar="R",
        help="only Franka rank R (within its node group), with its cameras and env server",
    )
    group.add_argument(
        "--checks",
        type=_checks,
        default=CHECK_GROUPS,
        metavar="LIST",
        help=f"comma-separated groups to run (default all: {','.join(CHECK_GROUPS)})",
    )
    group.add_argument(
        "--env-server", metavar="HOST:PORT", help="check this running env server instead of starting one"
    )
    group.add_argument("--ray-address", metavar="ADDR", help="Ray cluster for multi-node configs (default: auto)")
    group.add_argument(
        "--local-node",
        type=int,
        metavar="N",
        help="run only node N's checks, here, without Ray (e.g. on the robot PC of a larger cluster)",
    )
    group.add_argument(
        "--camera-playback",
        action="append",
        type=_playback,
        default=[],
        metavar="SERIAL=FILE",
        help="check camera SERIAL's pipeline on a recording (.db3) instead of the device (repeatable)",
    )


def _add_motion_arguments(group: argparse._ArgumentGroup) -> None:
    """Motion happens only when asked for, and is confirmed unless ``--yes``."""
    group.add_argument(
        "--allow-motion",
        action="store_true",
        help="also move each arm 1.5 cm and back, open/close its gripper, and reset/step real-arm env servers",
    )
    group.add_argument(
        "--yes",
        action="store_true",
        help="do not ask before moving (needed with --allow-motion when stdin is not a terminal)",
    )
    group.add_argument(
        "--motion-cm", type=float, default=1.5, metavar="CM", help="size of the test motion, 0.2-3 cm (default 1.5)"
    )


def _add_bound_arguments(group: argparse._ArgumentGroup) -> None:
    """Every check is bounded: nothing in a smoke test waits without a limit."""
    group.add_argument(
        "--timeout",
        type=positive_seconds("--timeout"),
        default=10.0,
        metavar="S",
        help="bound on every single check, seconds (default 10)",
    )
    group.add_argument(
        "--window",
        type=positive_seconds("--window"),
        default=3.0,
        metavar="S",
        help="how long streaming checks watch: camera fps/drops, robot state (default 3)",
    )
    group.add_argument(
        "--server-start-timeout",
        type=positive_seconds("--server-start-timeout"),
        default=60.0,
        metavar="S",
        help="bound on starting `rlhw serve-env` (default 60)",
    )


def confirm_motion(args, targets, ask=input, stdin=None) -> str:
    """'allowed', 'off', or why motion stays off. Simulated arms need no confirmation."""
    if not args.allow_motion:
        return "off"
    if all(r.simulated for r in targets.robots):
        return "allowed"
    if args.yes:
        return "allowed"
    stdin = sys.stdin if stdin is None else stdin
    if stdin is None or not stdin.isatty():
        return "no terminal to confirm motion on: add --yes to move the arms unattended"
    real = [r.name for r in targets.robots if not r.simulated]
    print(
        f"--allow-motion: will move {', '.join(real)} by {args.motion_cm:g} cm and back, close/open the gripper, and "
        "reset/step their env servers. Keep the workspace clear and the stop button in reach.",
        file=sys.stderr,
    )
    answer = ask("Move the arms? [y/N] ").strip().lower()
    return "allowed" if answer in ("y", "yes") else "the operator declined motion at the prompt"


def run(args: argparse.Namespace) -> int:
    from rlhw.config import load_config
    from rlhw.smoke.options import SmokeOptions
    from rlhw.smoke.render import render
    from rlhw.smoke.runner import run_smoke_test
    from rlhw.smoke.targets import select_targets

    if args.robot is not None and args.robot < 0:
        raise ConfigError("--robot", f"must be >= 0 (a Franka rank within its node group), got {args.robot}")
    if args.yes and not args.allow_motion:
        raise ConfigError("--yes", "confirms motion, which is off; add --allow-motion to move the arms (or drop --yes)")
    config = load_config(args.config, list(args.overrides or []))
    base = dict(
        node_group=args.node_group,
        robot=args.robot,
        timeout_s=args.timeout,
        window_s=args.window,
        server_start_s=args.server_start_timeout,
        env_server=args.env_server,
        checks=tuple(args.checks),
        config_path=os.path.abspath(args.config),
        overrides=tuple(args.overrides or ()),
        motion_m=args.motion_cm / 100.0,
        ray_address=args.ray_address,
        local_node=args.local_node,
        camera_playback=tuple(args.camera_playback),
    )
    options = SmokeOptions(**base)
    targets = select_targets(config, options)
    motion = confirm_motion(args, targets)
    if motion != "off":
        options = SmokeOptions(**base, motion=motion)
    report = run_smoke_test(config, options, config_name=args.config)
    render(report)
    if args.json:
        report.write_json(args.json)
    return report.exit_code


def main(argv: list[str] | None = None) -> int:
    """``python -m rlhw.cli.smoke_test ...``: the same as ``rlhw smoke-test ...``."""
    from rlhw.cli.main import main as rlhw_main

    return rlhw_main(["smoke-test", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
