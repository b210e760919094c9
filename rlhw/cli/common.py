"""Arguments shared by every subcommand that reads a config."""

from __future__ import annotations

import argparse


def add_config_arguments(parser: argparse.ArgumentParser, default: str | None = None) -> None:
    parser.add_argument(
        "config",
        nargs="?" if default else None,
        default=default,
        help="YAML config file" + (f" (default: {default})" if default else ""),
    )
    parser.add_argument(
        "overrides",
        nargs="*",
        metavar="key=value",
        help="dotted overrides, e.g. cluster.num_nodes=2 train.seed=3",
    )
