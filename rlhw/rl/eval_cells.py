"""One evaluation over several cells: `evaluate_cells` runs `rlhw.rl.evaluate.evaluate` on each robot rank in turn.

What a fleet needs from `rlhw eval` is the policy's success on every arm it will drive, each arm's figure and
the pooled one, on held-out seeds that no two cells share. The episodes are shared out over the cells
(`share_episodes`): cell j gets its own block of episode indices, so its seeds are ``EVAL_SEED_BASE + k`` for
k in that block. Together the cells run exactly the seeds a one-cell evaluation of the same number of
episodes runs, so a pooled figure is comparable, episode for episode, with one arm's. The blocks hold
different targets, so two cells' rates differ by their targets as well as by their arms: a per-cell figure
says where to look, not that one arm is worse.

The cells run one after the other, each through the whole single-cell path (its own env opened and closed, so
its arm is stopped before the next one moves), because that is the simplest design that keeps every property
of that path:

- the robot loop is the calling thread, and node 0's loop isolation (CPU affinity, SCHED_FIFO on a real-arm
  config) applies to that thread: two loops in one process would share one interpreter lock and one set of
  cores, and each cell's obs->action latency, which the report gives, would measure the other cell;
- Ctrl-C and SIGTERM arrive in the main thread as an interrupt, which stops the one moving arm where it is;
- one arm moves at a time, and an operator watching it is told which one (``on_cell``) before it moves;
- every blocking call keeps the bound it has there (server start, close: ``CLOSE_TIMEOUT_S``); nothing here
  waits on another thread.

What it costs is wall-clock time: N episodes take the same robot time whether they run on one cell or on
several. Running cells at once would buy that back for a long evaluation on real arms; it would also need one
process per cell, as training's env workers are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from rlhw.config.root import Config
from rlhw.errors import ConfigError, PlacementError
from rlhw.placement.grammar import format_ranks, parse_ranks
from rlhw.rl.checkpoint import PolicyCheckpoint
from rlhw.rl.evaluate import EvalEpisode, EvalReport, evaluate
from rlhw.rl.rundir import RunStatus
from rlhw.runtime.stop_signals import cause_text, interrupt_cause

ALL = "all"


def cell_ranks(config: Config) -> tuple[int, ...]:
    """The robot ranks of the cells `rlhw train` runs with ``config``: one per env worker of the env placement,
    each the Franka hardware rank its placement gives it, or the worker's rank where the env is not placed on
    Franka hardware (a simulator's arms), as in training's fleet (`rlhw.rl.pipeline.fleet.Fleet`)."""
    from rlhw.placement import plan

    placements = plan(config.cluster)["env"]
    return tuple(p.robot_rank for p in placements)


def robot_ranks(config: Config, text: str) -> tuple[int, ...]:
    """The robot ranks ``--robot`` names: one rank (``1``), a list or range (``0,2``, ``0-1``), or ``all`` (the
    cells of `cell_ranks`). A rank the config does not have is a ConfigError naming ``--robot``, the ranks
    it has and the fix. A Franka config has every hardware entry of the env's node group; a simulated one
    has the cells its env placement runs."""
    from rlhw.robot.factory import franka_entry

    cells = cell_ranks(config)
    if text.strip() == ALL:
        return cells
    try:
        ranks = parse_ranks(text, what="--robot")
    except PlacementError as e:
        raise ConfigError(
            "--robot", f"{e.message}; or write all (this config's cells: {format_ranks(cells)})"
        ) from None
    fix = f"name one of them, a list (e.g. {format_ranks(cells)}) or all"
    for rank in ranks:
        try:
            has_arm = franka_entry(config, rank) is not None
        except ConfigError as e:
            raise ConfigError("--robot", f"{e.message}; {fix}") from None
        if not has_arm and rank not in cells:
            raise ConfigError(
                "--robot",
                f"robot rank {rank} is not a cell of this config: its env placement "
                f"(cluster.component_placement) runs robot rank(s) {format_ranks(cells)}; {fix}, "
                "or place more env workers",
            )
    return ranks


@dataclass(frozen=True)
class CellShare:
    """Cell ``robot_rank``'s part of an evaluation: ``episodes`` episodes with indices from ``first``."""

    robot_rank: int
    first: int
    episodes: int

    @property
    def indices(self) -> range:
        return range(self.first, self.first + self.episodes)


def share_episodes(episodes: int, ranks: tuple[int, ...] | list[int]) -> tuple[CellShare, ...]:
    """``episodes`` shared out over the cells ``ranks`` as evenly as it goes (the first ``episodes % N`` get one
    more), each a block of consecutive indices: disjoint, and together ``0 .. episodes-1``. Fewer episodes
    than cells would leave a cell unevaluated: a ConfigError naming ``--episodes``."""
    if episodes < len(ranks):
        raise ConfigError(
            "--episodes",
            f"{episodes} episode(s) cannot be shared over {len(ranks)} cells (robot ranks {format_ranks(ranks)}); "
            f"give at least {len(ranks)}, one per cell, or name fewer cells with --robot",
        )
    base, extra = divmod(episodes, len(ranks))
    shares, first = [], 0
    for j, rank in enumerate(ranks):
        n = base + (j < extra)
        shares.append(CellShare(rank, first, n))
        first += n
    return tuple(shares)


@dataclass
class CellsReport:
    """Each cell's `EvalReport` (in the order run; a cell not reached is absent) and the pooled figure over
    every episode of every cell. ``status``: finished, or interrupted (in which case later cells did not run)."""

    shares: tuple[CellShare, ...]
    cells: dict[int, EvalReport] = field(default_factory=dict)
    status: RunStatus = RunStatus.FINISHED
    reason: str = ""
    signal: int | None = None

    @property
    def pooled(self) -> EvalReport:
        """Every cell's episodes as one report: its success rate and Wilson interval are the pooled ones."""
        episodes = [e for report in self.cells.values() for e in report.episodes]
        return EvalReport(episodes, status=self.status, reason=self.reason, signal=self.signal)

    def to_json(self, **extra) -> dict:
        """The pooled figure with the keys of a one-cell eval.json (less its episodes and loop health), then
        ``cells``: each cell's own eval.json with its robot rank."""
        out = self.pooled.to_json(**extra)
        del out["episodes"], out["loop_health"]
        out["cells"] = [
            {"robot_rank": s.robot_rank, "first_index": s.first, **self.cells[s.robot_rank].to_json()}
            for s in self.shares
            if s.robot_rank in self.cells
        ]
        return out


def evaluate_cells(
    config: Config,
    checkpoint: PolicyCheckpoint,
    episodes: int,
    run_dir,
    ranks: tuple[int, ...] | list[int],
    on_episode: Callable[[EvalEpisode], None] | None = None,
    on_cell: Callable[[CellShare], None] | None = None,
) -> CellsReport:
    """Evaluate ``checkpoint`` for ``episodes`` episodes in all, shared over the cells ``ranks``
    (`share_episodes`), one cell after the other (the module says why). Each cell's episodes are recorded under
    ``<run_dir>/episodes/env<rank>``. ``on_cell`` is told before a cell's env is opened. An interrupt ends the
    evaluation where it is: the running cell's arm is stopped, later cells are not run, and the report says so.
    Any other failure (a checkpoint refused by a cell's spec, a dead env server) is raised, as for one cell."""
    report = CellsReport(share_episodes(episodes, ranks))
    for share in report.shares:
        if on_cell is not None:
            on_cell(share)
        try:
            cell = evaluate(config, checkpoint, share.episodes, run_dir, share.robot_rank, on_episode, share.first)
        except KeyboardInterrupt as e:  # landed outside the episodes, while the env was opened or closed
            cause = interrupt_cause(e)
            reason = f"{cause_text(cause)} while its env was opened or closed; finished episodes are on disk"
            cell = EvalReport(status=RunStatus.INTERRUPTED, reason=reason, signal=int(cause))
        report.cells[share.robot_rank] = cell
        if cell.status is RunStatus.INTERRUPTED:
            left = [s.robot_rank for s in report.shares if s.robot_rank not in report.cells]
            report.status, report.signal = RunStatus.INTERRUPTED, cell.signal
            report.reason = f"robot rank {share.robot_rank}: {cell.reason}" + (
                f"; robot rank(s) {format_ranks(left)} not run" if left else ""
            )
            break
    return report
