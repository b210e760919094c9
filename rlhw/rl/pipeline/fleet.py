"""The cells of a run: its env workers, each an arm with its own counters, loop health and fate.

Why a layer between the controller and the env worker group: a fleet's cells fail one at a time. A group call
(`rlhw.runtime.group.GroupCall`) raises for the first worker that died and drops the answers of the others,
which would end the run for every arm, and lose the episodes a `poll` hands over once. `Fleet` calls the cells
that are still in the run, one call each, keeps every answer that came back, and takes a dead cell (or one
whose robot loop failed) out of the run, saying which and why, while any other cell is left. With one cell
left to lose the error goes on to the controller, as it did before: a run with no arm has nothing to do.

What a cell reports, in metrics.jsonl (``cell<r>/...``, every log row) and in run.json (``cells``): its train
steps, train episodes and successes, the steps an operator executed, faults, env server restarts, its deadline
hit rate and obs->action p99, and whether it is still in the run. A cell that misses more than
`DEADLINE_SHARE` of its deadlines between two log rows is named on stderr; the UTD gate gives each cell its
own allowance (`fair_share`), so a slow cell never holds the others back.

Nothing here knows where a cell runs: two cells on one host and two on two hosts are the same fleet.
"""

from __future__ import annotations

import sys
import time
from dataclasses import asdict, dataclass

import ray

from rlhw.errors import WorkerError
from rlhw.rl.loop_health import loop_metrics
from rlhw.rl.pipeline.messages import EnvProgress

#: A cell that misses more than this share of its deadlines between two log rows is named in the log
#: (a real arm's bar: 99.5 % of deadlines kept).
DEADLINE_SHARE = 0.005
PING_S = 10.0  # how long a failed cell gets to prove it is alive before it counts as dead


@dataclass
class Cell:
    """One env worker and its arm, as the controller knows it."""

    rank: int
    address: str
    node_rank: int
    robot_rank: int
    in_run: bool = True
    lost_reason: str | None = None
    lost_at_s: float | None = None
    env_steps: int = 0  # train steps it collected (its share of the run's env_steps)
    episodes: int = 0
    successes: int = 0
    intervened_steps: int = 0
    faults: int = 0
    restarts: int = 0
    status: str = "starting"
    deadlines: int = 0  # deadlines its loop had (paced arms: every step)
    missed: int = 0  # of those, the steps that came late
    obs_to_action_p99_ms: float | None = None
    eval_received: int = 0
    eval_wanted: int = 0

    @property
    def deadline_hit_rate(self) -> float:
        return 1.0 - self.missed / self.deadlines if self.deadlines else float("nan")

    def row(self) -> dict[str, float]:
        p99 = self.obs_to_action_p99_ms
        return {
            f"cell{self.rank}/in_run": float(self.in_run),
            f"cell{self.rank}/env_steps": self.env_steps,
            f"cell{self.rank}/episodes": self.episodes,
            f"cell{self.rank}/successes": self.successes,
            f"cell{self.rank}/intervened_steps": self.intervened_steps,
            f"cell{self.rank}/faults": self.faults,
            f"cell{self.rank}/restarts": self.restarts,
            f"cell{self.rank}/deadline_hit_rate": self.deadline_hit_rate,
            f"cell{self.rank}/obs_to_action_p99_ms": float("nan") if p99 is None else p99,
        }

    def to_json(self) -> dict:
        out = asdict(self)
        out.pop("eval_received"), out.pop("eval_wanted")
        out["deadline_hit_rate"] = None if not self.deadlines else round(self.deadline_hit_rate, 6)
        return out


class FleetCall:
    """One method called on every cell in the run; `wait` returns the answers of those that answered."""

    def __init__(self, fleet: Fleet, method: str, ranks: list[int], args: tuple, kwargs: dict):
        self.fleet, self.method, self.ranks = fleet, method, ranks
        self.calls = [getattr(fleet.group.execute_on(r), method)(*args, **kwargs) for r in ranks]

    def wait(self, timeout: float | None = None) -> list:
        deadline = None if timeout is None else time.monotonic() + timeout
        out = []
        for rank, call in zip(self.ranks, self.calls, strict=True):
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            try:
                out.extend(call.wait(left))
            except WorkerError as e:
                self.fleet.worker_failed(rank, e)  # raises unless the cell is dead and others are left
        return out


class Fleet:
    """The env worker group seen as cells. Method calls go to the cells still in the run (`FleetCall`); the
    group's own attributes (``addresses``, ``worker_cls``, ``shutdown``, ``execute_on``) pass through."""

    def __init__(self, group):
        self.group = group
        self.cells = [
            Cell(
                rank=i,
                address=group.addresses[i],
                node_rank=p.node_rank,
                robot_rank=p.robot_rank,
            )
            for i, p in enumerate(group.placements)
        ]
        self._counted = {c.rank: (0, 0) for c in self.cells}  # (deadlines, missed) at the previous log row

    # ---- the group, narrowed to the cells in the run
    def __getattr__(self, name: str):
        if name in ("worker_cls", "addresses", "placements", "shutdown", "execute_on", "actors", "name"):
            return getattr(self.group, name)
        if name.startswith("_"):
            raise AttributeError(name)
        getattr(self.group.worker_cls, name)  # an unknown method fails here, by name
        return lambda *args, **kwargs: FleetCall(self, name, self.live, args, kwargs)

    @property
    def live(self) -> list[int]:
        return [c.rank for c in self.cells if c.in_run]

    def worker_failed(self, rank: int, error: WorkerError) -> None:
        """A call to cell ``rank`` failed: a dead cell leaves the run while another cell is in it; anything else
        (the last cell, an exception raised in a live worker, a hang) goes on to the controller."""
        if len(self.live) <= 1 or self._alive(rank):
            raise error
        self.drop(rank, str(error).splitlines()[0])

    def _alive(self, rank: int) -> bool:
        try:
            ray.get(self.group.actors[rank]._rlhw_info.remote(), timeout=PING_S)
        except ray.exceptions.RayActorError:
            return False
        except ray.exceptions.GetTimeoutError:
            return True  # hung, not dead: the controller's error stands
        return True

    def drop(self, rank: int, reason: str) -> bool:
        """Take cell ``rank`` out of the run (its robot loop failed, or its worker died); False when it is the
        last cell in the run (the caller then ends the run). Its recorded episodes stay on disk and in the
        replay; the other cells go on."""
        cell = self.cells[rank]
        if not cell.in_run:
            return True
        if len(self.live) <= 1:
            return False
        cell.in_run, cell.lost_reason, cell.lost_at_s, cell.status = False, reason, time.time(), "lost"
        _note(f"cell {cell.address} (robot rank {cell.robot_rank}) left the run: {reason}; {len(self.live)} go on")
        try:  # a failed loop still holds its env and recorders: release them (a dead worker has nothing to release)
            self.group.execute_on(rank).stop_loop().wait(30)
        except WorkerError:
            pass
        return True

    # ---- what the cells report
    def absorb(self, res: EnvProgress) -> None:
        """One cell's poll: its episodes, operator steps, faults and counters."""
        cell = self.cells[res.rank]
        cell.env_steps, cell.restarts = res.train_steps, res.restarts
        cell.status = res.status if cell.in_run else "lost"
        cell.episodes += len(res.episodes)
        cell.successes += sum(bool(success) for _, success, _, _ in res.episodes)
        cell.intervened_steps += sum(int(n) for _, _, _, n in res.episodes)
        cell.faults += len(res.faults)
        cell.eval_received += len(res.eval_results)

    def lost_steps(self, collected: list[int]) -> int:
        """Train steps collected by cells no longer in the run (``collected``: per cell rank)."""
        return sum(collected[c.rank] for c in self.cells if not c.in_run)

    def fair_share(self, base_steps: int, collected: list[int]) -> tuple[int, int]:
        """The ``(base_steps, num_env)`` the UTD gate's `step_allowance` shares out: the steps of the runs this
        one resumes and of cells that left are not any live cell's, and the rest is shared by the live cells
        alike, so no cell waits on another's share and a lost cell's share is not frozen with it."""
        return base_steps + self.lost_steps(collected), max(1, len(self.live))

    def start_eval(self, per_cell: int) -> None:
        for c in self.cells:
            c.eval_received, c.eval_wanted = 0, per_cell if c.in_run else 0

    def eval_done(self) -> bool:
        """Every cell in the run has handed over the eval episodes asked of it (a lost cell no longer counts)."""
        return all(c.eval_received >= c.eval_wanted for c in self.cells if c.in_run)

    def health(self, timeout: float) -> list[dict]:
        """The loop health of every cell in the run (`EnvWorker.loop_health`, in rank order, each with its
        ``rank``); each cell's figures are updated from it, and a cell that missed more than `DEADLINE_SHARE` of
        its deadlines since the previous look is named on stderr."""
        summaries = self.loop_health().wait(timeout)
        for rank, summary in zip(self.live, summaries, strict=True):
            summary["rank"] = rank
            self._health(self.cells[rank], summary)
        return summaries

    def health_row(self, timeout: float) -> dict[str, float]:
        """The metrics row's loop columns: the worst cell's figures (`loop_metrics`) and each cell's own."""
        row = loop_metrics(self.health(timeout))
        for c in self.cells:
            row.update(c.row())
        return row

    def _health(self, cell: Cell, summary: dict) -> None:
        cell.deadlines = int(summary.get("deadlines") or 0)
        cell.missed = int(summary.get("missed_deadlines") or 0)
        cell.obs_to_action_p99_ms = summary.get("latency_p99_ms")
        had, missed = self._counted[cell.rank]
        now = cell.deadlines - had
        late = cell.missed - missed
        self._counted[cell.rank] = (cell.deadlines, cell.missed)
        if now and late / now > DEADLINE_SHARE:
            _note(
                f"cell {cell.address} (robot rank {cell.robot_rank}) is behind its deadlines: {late} of {now} steps "
                f"late since the last log row; obs->action p99 {cell.obs_to_action_p99_ms:.1f} ms"
            )

    def report(self) -> list[dict]:
        """run.json's ``cells``."""
        return [c.to_json() for c in self.cells]


def _note(text: str) -> None:
    print(f"rlhw train: {text}", file=sys.stderr, flush=True)
