"""The fleet's bookkeeping without Ray: how the UTD gate is shared between cells, when an evaluation is complete,
which failure takes a cell out of the run, and which cell the log names for missed deadlines. The cells are those of configs/sim_fleet.yaml as the
placement plans them; only the env worker group (and a rollout worker's poll) is a stand-in
(tests/rl/test_fleet.py runs the real ones)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlhw.config import load_config
from rlhw.errors import WorkerError
from rlhw.placement import plan
from rlhw.rl.loop_health import LoopTimer
from rlhw.rl.pipeline.env_worker import EnvWorker
from rlhw.rl.pipeline.fleet import Fleet
from rlhw.rl.pipeline.launch import Pipeline
from rlhw.rl.pipeline.messages import EnvProgress, RolloutProgress
from rlhw.rl.utd_gate import step_allowance, updates_owed

FLEET_YAML = Path(__file__).resolve().parents[2] / "configs" / "sim_fleet.yaml"


class _Answer:
    """A group call's answers, one per worker, or ``error`` raised by ``wait`` (a dead worker's `WorkerError`)."""

    def __init__(self, *values, error: Exception | None = None):
        self.values, self.error = list(values), error

    def wait(self, timeout=None):
        if self.error is not None:
            raise self.error
        return self.values


class _Group:
    """The env worker group's surface that the fleet's bookkeeping uses: addresses, placements, stop_loop, and
    poll (each cell's ``polled`` answer)."""

    worker_cls = EnvWorker

    def __init__(self, placements):
        self.placements = placements
        self.addresses = [f"env:{p.rank}" for p in placements]
        self.stopped: list[int] = []
        self.polled: dict[int, EnvProgress] = {}

    def execute_on(self, rank):
        group = self

        class _One:
            def stop_loop(self):
                group.stopped.append(rank)
                return _Answer()

            def poll(self):
                return _Answer(group.polled[rank])

        return _One()


def fleet_of(cells: int) -> tuple[Fleet, _Group]:
    arms = ", ".join(f"{{robot_ip: '172.16.{i}.2', node_rank: 0}}" for i in range(cells))
    overrides = [
        f"cluster.node_groups.0.hardware.configs=[{arms}]",
        f"cluster.component_placement.env.placement=0-{cells - 1}",
    ]
    config = load_config(FLEET_YAML, overrides)
    group = _Group(plan(config.cluster)["env"][:cells])
    return Fleet(group), group


def progress(rank: int, steps: int, **kw) -> EnvProgress:
    return EnvProgress(rank=rank, train_steps=steps, idle=False, status="episode", restarts=0, eval_pending=0, **kw)


def test_the_shipped_fleet_gives_each_cell_its_own_franka_rank():
    fleet, _ = fleet_of(2)
    assert [(c.address, c.robot_rank, c.node_rank) for c in fleet.cells] == [("env:0", 0, 0), ("env:1", 1, 0)]


def test_a_lost_cells_share_goes_to_the_cells_left_so_collection_never_stalls():
    """Async collection simulated step by step: each live cell collects up to its allowance, the learner runs
    the updates owed. With cell 1 lost at 300 steps, the old even split over all cells would cap the run."""
    fleet, group = fleet_of(2)
    utd, starts, slack = 0.5, 100, 20
    collected = [0, 0]
    updates = 0
    for _ in range(2000):
        if collected[1] >= 300 and fleet.cells[1].in_run:
            assert fleet.drop(1, "killed") and group.stopped == [1]
        base, n = fleet.fair_share(0, collected)
        allowance = step_allowance(updates, utd, starts, slack, base, n)
        for rank in fleet.live:
            if collected[rank] < allowance:
                collected[rank] += 1
        updates += updates_owed(sum(collected), updates, utd, starts)
    assert collected[1] == 300 and collected[0] > 1500
    assert updates == pytest.approx(utd * (sum(collected) - starts), abs=1)  # the UTD held throughout


def test_the_last_cell_is_never_dropped():
    fleet, group = fleet_of(2)
    assert fleet.drop(0, "first")
    assert not fleet.drop(1, "second") and fleet.live == [1] and group.stopped == [0]
    assert fleet.cells[0].lost_reason == "first" and fleet.report()[0]["in_run"] is False


class _Rollouts:
    """One rollout worker acting for every cell (``train.policy_at: rollout``): its poll answers, or raises
    ``died`` as a dead worker's does."""

    addresses = ["rollout:0"]

    def __init__(self, died: WorkerError | None = None):
        self.died = died

    def poll(self):
        return _Answer(RolloutProgress(rank=0, served=10, batches=5, weights_version=3), error=self.died)


def pipeline_of(cells: int, rollouts: _Rollouts) -> tuple[Pipeline, _Group]:
    """A launched pipeline's cells and rollout workers, without Ray (the controller's view of them)."""
    fleet, group = fleet_of(cells)
    pipe = Pipeline.__new__(Pipeline)
    pipe.envs, pipe.rollouts = fleet, rollouts
    return pipe, group


LANE_BROKEN = "LaneError: rollout worker 0 at 10.0.0.1:4000 closed the step lane (Connection reset by peer)"


def test_a_cell_whose_loop_failed_leaves_the_run_while_its_rollout_worker_serves_the_others():
    pipe, group = pipeline_of(2, _Rollouts())
    group.polled = {0: progress(0, 40), 1: progress(1, 30, error="RobotFault: reflex")}
    assert [r.rank for r in pipe.poll_envs()] == [0, 1]  # the failed cell's last poll is still handed over
    assert pipe.envs.live == [0] and group.stopped == [1]
    assert pipe.envs.cells[1].lost_reason == "RobotFault: reflex"


def test_a_dead_rollout_worker_ends_the_run_naming_it_and_no_cell_is_blamed_for_the_lanes_it_broke():
    """Its death fails every cell's lane at once; without asking it first, the cells polled first would leave
    the run one by one and the last would end it under its own name (seen in tests/rl/test_fleet.py)."""
    pipe, group = pipeline_of(2, _Rollouts(died=WorkerError("rollout:0", "the actor died")))
    group.polled = {r: progress(r, 40, error=LANE_BROKEN) for r in (0, 1)}
    with pytest.raises(WorkerError) as e:
        pipe.poll_envs()
    assert e.value.address == "rollout:0"
    assert pipe.envs.live == [0, 1] and group.stopped == []
    assert [c.lost_reason for c in pipe.envs.cells] == [None, None]


def test_an_evaluation_waits_for_the_cells_in_the_run_only():
    fleet, _ = fleet_of(4)
    fleet.start_eval(3)
    for rank in (0, 1, 2):
        fleet.absorb(progress(rank, 10, eval_results=[(1.0, True, 5, 0)] * 3))
    assert not fleet.eval_done()  # cell 3 owes three
    fleet.drop(3, "died mid-eval")
    assert fleet.eval_done()


def test_each_cell_counts_its_own_episodes_interventions_and_faults():
    fleet, _ = fleet_of(2)
    fleet.absorb(progress(0, 40, episodes=[(1.0, True, 20, 5), (0.0, False, 20, 0)], faults=["contact"]))
    fleet.absorb(progress(1, 20, episodes=[(0.5, False, 20, 2)]))
    fleet.absorb(progress(0, 60, episodes=[(1.0, True, 20, 1)]))
    c0, c1 = fleet.report()
    assert (c0["env_steps"], c0["episodes"], c0["successes"], c0["intervened_steps"], c0["faults"]) == (60, 3, 2, 6, 1)
    assert (c1["env_steps"], c1["episodes"], c1["successes"], c1["intervened_steps"], c1["faults"]) == (20, 1, 0, 2, 0)


def timed_loop(timer: LoopTimer, steps: int, late: int) -> dict:
    """``steps`` more steps through a real `LoopTimer`, the first ``late`` of them 50 ms late; its summary."""
    timer.episode_started()
    for i in range(steps):
        timer.actions_received()
        timer.stepped({"late": 0.05 if i < late else 0.0})
    return timer.summary(1)


def test_a_cell_behind_its_deadlines_is_named_in_the_log_and_a_punctual_one_is_not(capsys):
    fleet, _ = fleet_of(2)
    clock = iter(range(10**6))
    timers = [LoopTimer(clock=lambda: next(clock) * 1e-3) for _ in range(2)]
    # Cell 0 misses 2 of 1,000 (within the 99.5 % bar), cell 1 misses 40.
    health = [timed_loop(timers[0], 1000, 2), timed_loop(timers[1], 1000, 40)]
    fleet.loop_health = lambda: _Answer(*map(dict, health))  # fresh copies, as each call's answers are
    row = fleet.health_row(5)
    err = capsys.readouterr().err
    assert "cell env:1 (robot rank 1) is behind its deadlines: 40 of 1000" in err and "env:0" not in err
    assert row["cell0/deadline_hit_rate"] == pytest.approx(0.998) and row["cell1/deadline_hit_rate"] == 0.96
    assert row["loop/late_step_share"] == pytest.approx(42 / 2000)  # the fleet's columns are still the worst's
    # The next row judges only the steps since: cell 1 kept all 500 of its new deadlines.
    health[:] = [timed_loop(timers[0], 500, 0), timed_loop(timers[1], 500, 0)]
    fleet.health_row(5)
    assert "behind" not in capsys.readouterr().err
