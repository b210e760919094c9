"""`rlhw eval CONFIG --checkpoint FILE [--episodes N] [--json FILE] [--run-dir DIR] [--robot R] [--sim] [key=value ...]`.

Runs a trained policy's deterministic action on the env CONFIG names (MuJoCo, the mock, franky-sim, a real
cell) for N episodes, through training's robot path (rlhw.rl.evaluate): the same safety layer, env server
lease, episode loop and operator takeover, and the same opt-in to move an arm as `rlhw train`: CONFIG itself
(a config that places a Franka drives it; ``--sim`` or ``env.sim=mujoco`` replaces it by the simulator). An
episode an operator took over counts as a failure. Prints one row per episode, then the success rate with its
95 % Wilson interval; ``--json`` writes the same as JSON with the loop's health. Ctrl-C or SIGTERM stops the
arm and keeps what was recorded (exit status 130 after Ctrl-C, 143 after SIGTERM).

``--robot`` names one robot rank (default 0), several (``0,2``, ``0-1``) or ``all`` (the cells the config's env
placement runs, as `rlhw train` does). With several, the N episodes are shared over the cells, each on its own
held-out seeds, one cell after the other (rlhw.rl.eval_cells says why); it prints each cell's rows and success
rate, then the pooled one, and eval.json holds the pooled figure with each cell's report under ``cells``.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path

from rlhw.cli.common import add_config_arguments
from rlhw.config.root import Config


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument(
        "--checkpoint",
        required=True,
        metavar="FILE",
        help="checkpoint of rlhw train (runs/<run>/checkpoints/latest.pt, or the run directory)",
    )
    parser.add_argument("--episodes", type=int, default=20, metavar="N", help="episodes to evaluate (default 20)")
    parser.add_argument(
        "--json",
        default=None,
        metavar="FILE",
        help="also write the result as JSON: success_rate, ci95, episodes, loop_health",
    )
    parser.add_argument(
        "--run-dir",
        default=None,
        help="where the episodes, config snapshot and eval.json go (default: runs/eval-<config>-<time>)",
    )
    parser.add_argument(
        "--robot",
        default="0",
        metavar="R",
        help="the robot rank to run on (default 0); several (0,2 or 0-1) or all share the episodes over those cells",
    )
    parser.add_argument(
        "--sim",
        action="store_true",
        help="replace robots and cameras by the MuJoCo drivers (env.sim=mujoco), as rlhw train --sim",
    )


def resolve(args: argparse.Namespace):
    """The config (CONFIG + overrides, one env instance), the robot ranks (`rlhw.rl.eval_cells.robot_ranks`) and
    the checkpoint; bad flags named."""
    from rlhw.config import load_config
    from rlhw.errors import ConfigError
    from rlhw.rl.checkpoint import PolicyCheckpoint
    from rlhw.rl.eval_cells import robot_ranks, share_episodes

    if args.episodes < 1:
        raise ConfigError("--episodes", f"must be at least 1, got {args.episodes}")
    if args.robot.lstrip().startswith("-"):
        raise ConfigError("--robot", f"must be a robot rank >= 0, got {args.robot}")
    if args.json is not None and Path(args.json).is_dir():
        example = Path(args.json) / "eval.json"
        raise ConfigError("--json", f"{args.json} is a directory; give a file name, e.g. {example}")
    overrides = list(args.overrides) + (["env.sim=mujoco"] if args.sim else [])
    config = load_config(args.config, overrides)
    if config.env.num_envs != 1:  # evaluation steps one instance: one seed, one target, one row per episode
        print(
            f"rlhw eval: env.num_envs={config.env.num_envs} ignored: evaluation runs one env instance", file=sys.stderr
        )
        config = config.model_copy(update={"env": config.env.model_copy(update={"num_envs": 1})})
    ranks = robot_ranks(config, args.robot)
    share_episodes(args.episodes, ranks)  # too few episodes for the cells: refused before the checkpoint loads
    return config, ranks, PolicyCheckpoint.load(args.checkpoint, "--checkpoint")


def print_episode(episode, first_index: int = 0) -> None:
    if episode.index == first_index:
        print(
            f"{'episode':>7}  {'seed':>10}  {'success':>7}  {'steps':>5}  {'return':>8}  fault / operator", flush=True
        )
    notes = [
        n for n in (episode.fault, "operator took over: counted as a failure" if episode.intervened else None) if n
    ]
    print(
        f"{episode.index:>7}  {episode.seed:>10}  {'yes' if episode.success else 'no':>7}  {episode.steps:>5}  "
        f"{episode.ret:>8.2f}  {'; '.join(notes)}",
        flush=True,
    )


def print_rate(report, prefix: str = "", latency: bool = True) -> None:
    lo, hi = report.ci95
    health = report.loop_health
    timing = (
        f"; obs->action p50 {health.get('latency_p50_ms', float('nan')):.2f} ms, p99 "
        f"{health.get('latency_p99_ms', float('nan')):.2f} ms"
    )
    print(
        f"{prefix}success rate {report.successes}/{len(report.episodes)} = {report.success_rate:.2f}, "
        f"95% Wilson interval [{lo:.2f}, {hi:.2f}]{timing if latency else ''}",
        flush=True,
    )


def run(args: argparse.Namespace) -> int:
    from rlhw.rl.rundir import RunDir, RunStatus, _strict_json
    from rlhw.runtime.stop_signals import sigterm_interrupts

    config, ranks, checkpoint = resolve(args)
    stem = Path(args.config).stem
    run_dir = RunDir(args.run_dir or Path("runs") / f"eval-{stem}-{datetime.now().strftime('%Y%m%d-%H%M%S')}")
    cells = f" over robot ranks {', '.join(map(str, ranks))}" if len(ranks) > 1 else ""
    print(
        f"rlhw eval: {checkpoint.path} on {args.config}, {args.episodes} episodes{cells}; run directory {run_dir.path}",
        file=sys.stderr,
    )
    with sigterm_interrupts():  # SIGTERM (systemd, a scheduler) ends it as Ctrl-C does
        if len(ranks) == 1:
            report = evaluate_one(config, checkpoint, args.episodes, run_dir, ranks[0])
        else:
            report = evaluate_several(config, checkpoint, args.episodes, run_dir, ranks)
    result = report.to_json(checkpoint=str(checkpoint.path), config=str(args.config), run_dir=str(run_dir.path))
    text = json.dumps(_strict_json(result), indent=2, default=str, allow_nan=False)
    (run_dir.path / "eval.json").write_text(text + "\n")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n")
    if report.status is RunStatus.INTERRUPTED:
        print(f"rlhw eval: {report.reason}; episodes in {run_dir.episodes}", file=sys.stderr)
        return 128 + int(report.signal)  # 130 after Ctrl-C, 143 after SIGTERM, as a shell reports them
    return 0


def evaluate_one(config: Config, checkpoint, episodes: int, run_dir, robot_rank: int):
    """One robot rank: its rows, then its success rate."""
    from rlhw.rl.evaluate import evaluate

    report = evaluate(config, checkpoint, episodes, run_dir, robot_rank, on_episode=print_episode)
    print_rate(report)
    return report


def evaluate_several(config: Config, checkpoint, episodes: int, run_dir, ranks):
    """Several cells: each cell's rows under a line naming its arm (printed before that arm moves), each cell's
    success rate, then the pooled one."""
    from rlhw.rl.eval_cells import evaluate_cells
    from rlhw.rl.evaluate import EVAL_SEED_BASE

    first = [0]  # the running cell's first episode index: its table's header goes above that row

    def announce(share) -> None:
        first[0] = share.first
        seeds = [EVAL_SEED_BASE + k for k in share.indices]
        print(
            f"cell: robot rank {share.robot_rank}, {share.episodes} episodes, seeds {seeds[0]}-{seeds[-1]}", flush=True
        )

    report = evaluate_cells(
        config,
        checkpoint,
        episodes,
        run_dir,
        ranks,
        on_episode=lambda episode: print_episode(episode, first[0]),
        on_cell=announce,
    )
    for rank, cell in report.cells.items():
        print_rate(cell, prefix=f"robot rank {rank}: ")
    print_rate(report.pooled, prefix=f"pooled over {len(report.cells)} cell(s): ", latency=False)
    return report
