"""`rlhw` command line: one subcommand per module in rlhw/cli, imported only when used.

Each subcommand module defines ``add_arguments(parser)`` and ``run(args) -> int``. Only the chosen
subcommand's module is imported (so `rlhw placement` never pays for Ray, torch or MuJoCo, and a broken
optional dependency of one subcommand cannot break the others); `rlhw --help` lists all of them from
the table below without importing any. Errors that are the user's to fix (rlhw.errors.RlhwError)
print one line and exit 2, without a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from rlhw.errors import ConfigError, RlhwError

SUBCOMMANDS = {
    "placement": ("rlhw.cli.placement", "print where every process of every component runs"),
    "serve-env": ("rlhw.cli.serve_env", "serve gRPC step/reset in front of one arm or simulator"),
    "train": ("rlhw.cli.train", "train a policy (sim-only default: configs/sim_reach.yaml)"),
    "eval": ("rlhw.cli.eval", "run a trained policy for N episodes: its success rate and Wilson interval"),
    "record-pose": (
        "rlhw.cli.record_pose",
        "save the hand's pose (moved there by hand-guiding or teleop) as a task's goal",
    ),
    "smoke-test": ("rlhw.cli.smoke_test", "check robots, cameras, nodes and env servers; moves nothing unless asked"),
    "record-demos": (
        "rlhw.cli.record_demos",
        "record operator demonstrations (SpaceMouse, keyboard or scripted expert) as demo episodes",
    ),
    "view": ("rlhw.cli.view", "show recorded episodes in the Rerun viewer (writes an .rrd file, or serves the viewer)"),
    "train-reward": (
        "rlhw.cli.train_reward",
        "train the success (reward) classifier on recorded episodes' camera frames",
    ),
    "export-dataset": (
        "rlhw.cli.export_dataset",
        "write recorded episodes as a LeRobotDataset v3.0 (LeRobot's tools and the Hub read it)",
    ),
}


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser: lists the subcommands without importing any of them."""
    parser = argparse.ArgumentParser(
        prog="rlhw", description="Reinforcement learning on real and simulated robot arms."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (_, help_text) in SUBCOMMANDS.items():
        sub.add_parser(name, help=help_text, add_help=False)
    return parser


def subcommand_parser(command: str) -> argparse.ArgumentParser:
    module, help_text = SUBCOMMANDS[command]
    parser = argparse.ArgumentParser(prog=f"rlhw {command}", description=help_text)
    importlib.import_module(module).add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = argv[0] if argv and argv[0] in SUBCOMMANDS else None
    if command is None:
        build_parser().parse_args(argv)  # prints the usage (or --help) and exits
        return 2
    # Intermixed, so flags and key=value overrides may come in any order:
    # `rlhw train CONFIG --sim train.seed=3` as well as `rlhw train CONFIG train.seed=3 --sim`.
    args = subcommand_parser(command).parse_intermixed_args(argv[1:])
    args.command = command
    try:
        return int(importlib.import_module(SUBCOMMANDS[command][0]).run(args) or 0)
    except ConfigError as e:
        print(f"rlhw {command}: config error: {e}", file=sys.stderr)
        return 2
    except RlhwError as e:
        print(f"rlhw {command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:  # Ctrl-C; SIGTERM too where a command asks (rlhw.runtime.stop_signals)
        from rlhw.runtime.stop_signals import cause_text, interrupt_cause

        cause = interrupt_cause(e)
        print(f"rlhw {command}: interrupted ({cause_text(cause)})", file=sys.stderr)
        return 128 + int(cause)


if __name__ == "__main__":
    sys.exit(main())
