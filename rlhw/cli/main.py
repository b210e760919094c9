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
    "smoke-test": ("rlhw.cli.smoke_test", "check robots, cameras, nodes and env servers; moves nothing unless asked"),
}


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser; only ``command``'s module is imported to add its arguments (all of them when None)."""
    parser = argparse.ArgumentParser(prog="rlhw", description="Reinforcement learning on real and simulated robot arms.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, (module, help_text) in SUBCOMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if command is None or name == command:
            importlib.import_module(module).add_arguments(p)
        p.set_defaults(_module=module)
    return parser


def _chosen_command(argv: list[str]) -> str | None:
    first = next((a for a in argv if not a.startswith("-")), None)
    return first if first in SUBCOMMANDS else None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    command = _chosen_command(argv)
    # Unknown or missing command: let argparse print the usage with every subcommand listed.
    parser = build_parser(command) if command else build_parser("__none__")
    args = parser.parse_args(argv)
    try:
        return int(importlib.import_module(args._module).run(args) or 0)
    except ConfigError as e:
        print(f"rlhw {args.command}: config error: {e}", file=sys.stderr)
        return 2
    except RlhwError as e:
        print(f"rlhw {args.command}: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"rlhw {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
