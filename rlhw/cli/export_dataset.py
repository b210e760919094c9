"""`rlhw export-dataset EPISODES... --out DIR [--repo-id NAME] [--fps N] [--task TEXT] [--vcodec CODEC]`.

Writes recorded episodes (``rlhw record-demos`` demos, or a run's ``<run_dir>/episodes``) as one LeRobotDataset
v3.0 at DIR, which LeRobot's tools open offline as ``LeRobotDataset(NAME, root=DIR)`` and `train.demos` reads
back as it is. EPISODES are episode files or directories searched for them (train, eval and demo episodes;
``--kinds`` narrows it). The layout (features, the last observation of each episode, the recording config
kept per episode) is described in rlhw.rl.lerobot.format.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rlhw.cli.common import EPISODE_KINDS, episode_paths, positive_int
from rlhw.errors import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("episodes", nargs="+", metavar="EPISODES", help="episode files or directories of them")
    parser.add_argument("--out", required=True, help="directory of the LeRobotDataset to write (new or empty)")
    parser.add_argument(
        "--repo-id", default=None, help="the dataset's name on the Hub, OWNER/NAME (default: rlhw/<name of --out>)"
    )
    parser.add_argument(
        "--fps",
        type=positive_int("--fps"),
        default=None,
        help="frames per second (default: the recording config's env.control_hz)",
    )
    parser.add_argument("--task", default=None, help="the task text of every episode (default: env.task)")
    parser.add_argument(
        "--kinds",
        nargs="+",
        choices=EPISODE_KINDS,
        default=list(EPISODE_KINDS),
        help="episode kinds to take from directories (default: all)",
    )
    parser.add_argument(
        "--vcodec",
        choices=("h264", "libsvtav1"),
        default="h264",
        help="video codec (default: h264; libsvtav1 is LeRobot's default AV1: docs/datasets.md says why not here)",
    )
    parser.add_argument(
        "--crf",
        type=int,
        default=None,
        help="video quality, lower is better and larger (default: 23 for h264, 30 for AV1)",
    )


def _repo_id(text: str | None, out: Path) -> str:
    repo_id = text or f"rlhw/{out.resolve().name}"
    if repo_id.count("/") != 1 or not all(repo_id.split("/")):
        raise ConfigError("--repo-id", f"{repo_id!r} is not OWNER/NAME (e.g. my-lab/insert-demos)")
    return repo_id


def run(args: argparse.Namespace) -> int:
    from rlhw.rl.lerobot.export import ExportOptions, export_episodes

    out = Path(args.out)
    options = ExportOptions(
        repo_id=_repo_id(args.repo_id, out), fps=args.fps, task=args.task, codec=args.vcodec, crf=args.crf
    )
    summary = export_episodes(episode_paths(args.episodes, args.kinds), out, options)
    for path in summary.skipped:
        print(f"skipped {path}: no recorded step")
    cameras = ", ".join(summary.cameras) or "none"
    print(
        f"wrote {summary.episodes} episode(s), {summary.frames} frame(s) at {summary.fps} fps (cameras: {cameras}) "
        f"to {out} as LeRobotDataset {options.repo_id!r}; open it with LeRobotDataset({options.repo_id!r}, root={str(out)!r})"
    )
    return 0
