"""Arguments shared by every subcommand that reads a config."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from rlhw.errors import ConfigError

#: The kinds of recorded episode a command reads from a directory unless told otherwise.
EPISODE_KINDS = ("train", "eval", "demo")


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


def positive_int(flag: str):
    """An argparse ``type`` for a whole number >= 1 whose error names ``flag``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be a whole number, got {text!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{flag} must be >= 1, got {value}")
        return value

    return parse


def positive_seconds(flag: str):
    """An argparse ``type`` for a duration > 0 in seconds whose error names ``flag``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be a number of seconds, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{flag} must be > 0 seconds, got {text!r}")
        return value

    return parse


def episode_paths(items: Sequence[str], kinds: Sequence[str] = EPISODE_KINDS) -> list[Path]:
    """The episode files named in ``items`` or found under its directories (recursively), in the order given:
    the EPISODES argument of every command that reads recorded episodes (view, train-reward, export-dataset).
    A path that does not exist, or a directory without an episode of ``kinds``, is a ConfigError naming
    EPISODES: an empty result would only fail later, further from the typo."""
    from rlhw.rl.episodes import episode_files

    paths: list[Path] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            found = episode_files(p, tuple(kinds))
            if not found:
                raise ConfigError(
                    "EPISODES",
                    f"{p} holds no episode files of kind {'/'.join(kinds)} (<kind>-NNNNNN.npz "
                    "or .steps, searched recursively); record some with `rlhw record-demos "
                    "CONFIG --out DIR` or `rlhw train`",
                )
            paths += found
        elif p.is_file():
            paths.append(p)
        else:
            raise ConfigError("EPISODES", f"{p} does not exist; give episode files or directories of them")
    return paths
