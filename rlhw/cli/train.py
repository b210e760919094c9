"""`rlhw train CONFIG [key=value ...] [--run-dir DIR] [--resume] [--sim]`: train a policy with SAC.

With no CONFIG it trains the embedded sim-only default (configs/sim_reach.yaml): a local Ray cluster, a
MuJoCo arm behind its env server, and SAC until eval success reaches ``train.target_success``.
Everything the run produces goes to the run directory (see rlhw.rl.rundir); ``--resume`` continues a run
from its checkpoint and every transition recorded on disk.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rlhw.cli.common import add_config_arguments

DEFAULT_CONFIG = "configs/sim_reach.yaml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, default=DEFAULT_CONFIG)
    parser.add_argument(
        "--run-dir",
        default=None,
        help="where checkpoints, metrics, episodes and plots go (default: runs/<config>-<timestamp>)",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the run in --run-dir: reload its config snapshot, checkpoint and episodes",
    )
    parser.add_argument(
        "--sim",
        action="store_true",
        help="sim-only: replace robots and cameras by the MuJoCo drivers (env.sim=mujoco), keeping the placement",
    )


def resolve_config(args: argparse.Namespace):
    """The config to run: the snapshot of the run being resumed, or CONFIG; then overrides (and --sim)."""
    from rlhw.config import load_config
    from rlhw.errors import ConfigError

    if args.config and "=" in args.config and not Path(args.config).exists():
        # `rlhw train key=value ...`: argparse took the first override for CONFIG; the default applies.
        args.overrides = [args.config, *args.overrides]
        args.config = DEFAULT_CONFIG
    overrides = list(args.overrides) + (["env.sim=mujoco"] if args.sim else [])
    if args.resume:
        if not args.run_dir:
            raise ConfigError("--resume", "needs --run-dir DIR, the run directory to continue")
        snapshot = Path(args.run_dir) / "config.yaml"
        if not snapshot.exists():
            raise ConfigError("--resume", f"{snapshot} not found: {args.run_dir} is not a run directory of rlhw train")
        return load_config(snapshot, overrides)
    return load_config(_default_config_path(args.config), overrides)


def _default_config_path(path: str) -> str:
    """CONFIG as given; the default also resolves next to the installed package when run from elsewhere."""
    p = Path(path)
    if p.exists() or path != DEFAULT_CONFIG:
        return path
    repo_copy = Path(__file__).resolve().parents[2] / DEFAULT_CONFIG
    return str(repo_copy) if repo_copy.exists() else path


def run(args: argparse.Namespace) -> int:
    from rlhw.cli.trainer import train
    from rlhw.rl.rundir import RunDir, default_run_dir

    config = resolve_config(args)
    run_dir = RunDir(args.run_dir or default_run_dir(args.config))
    print(f"rlhw train: run directory {run_dir.path}", file=sys.stderr)
    stop = train(config, run_dir, resume=args.resume)
    print(f"rlhw train: {stop.status}: {stop.reason}; run directory {run_dir.path}", file=sys.stderr)
    return stop.exit_code  # 130 after Ctrl-C, 143 after SIGTERM (128 + the signal, as a shell reports it)
