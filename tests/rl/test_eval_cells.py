"""`rlhw eval --robot all`: one evaluation over a fleet's cells, each cell on held-out seeds of its own.

configs/sim_fleet.yaml places two cells (Franka hardware ranks 0 and 1, simulated). The checkpoint is the
reach actor of tests/rl/test_eval.py (fitted in the test, saved in rlhw train's format); sim_fleet's task has
the same spec. Each cell's env is the real one (MuJoCo, or the mock where only the bookkeeping is checked).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlhw.config import load_config
from rlhw.errors import ConfigError
from rlhw.rl.episodes import episode_files, load_episode
from rlhw.rl.eval_cells import CellShare, cell_ranks, robot_ranks, share_episodes
from rlhw.rl.evaluate import EVAL_SEED_BASE, wilson_interval
from rlhw.rl.rundir import RunStatus
from tests.rl.test_eval import ROOT, SMALL, eval_in_process, make_checkpoint, rlhw_eval

FLEET = "configs/sim_fleet.yaml"


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("ckpt") / "latest.pt")


def fleet(*overrides: str):
    return load_config(ROOT / FLEET, [*SMALL, *overrides])


@pytest.mark.parametrize("episodes, cells", [(5, 2), (4, 2), (20, 3), (3, 3), (7, 4)])
def test_the_episodes_are_shared_in_disjoint_blocks_that_together_are_a_one_cell_evals(episodes, cells):
    shares = share_episodes(episodes, tuple(range(cells)))
    indices = [k for s in shares for k in s.indices]
    assert indices == list(range(episodes))  # no index twice, none left out: the seeds of a one-cell eval
    assert max(s.episodes for s in shares) - min(s.episodes for s in shares) <= 1
    assert all(s.episodes >= 1 for s in shares)


def test_fewer_episodes_than_cells_is_refused_naming_episodes():
    with pytest.raises(ConfigError) as e:
        share_episodes(1, (0, 1))
    assert e.value.path == "--episodes" and "at least 2" in e.value.message


def test_all_is_the_cells_the_env_placement_runs():
    assert cell_ranks(fleet()) == (0, 1)
    assert cell_ranks(load_config(ROOT / "configs/sim_reach.yaml", SMALL)) == (0,)
    assert robot_ranks(fleet(), "all") == (0, 1)
    assert robot_ranks(fleet(), "0-1") == robot_ranks(fleet(), "1,0") == (0, 1)
    assert robot_ranks(fleet(), "1") == (1,)


@pytest.mark.timeout(300)  # the first test here to use it pays for the module's checkpoint
def test_one_eval_over_two_cells_reports_each_cell_on_its_own_seeds_and_the_pooled_rate(checkpoint, tmp_path):
    out, run = tmp_path / "eval.json", tmp_path / "run"
    r = rlhw_eval(
        FLEET,
        "--checkpoint",
        str(checkpoint),
        "--robot",
        "all",
        "--episodes",
        "5",
        "--json",
        str(out),
        "--run-dir",
        str(run),
        "env.pace=free",  # the arms need not keep a real arm's time to be judged
    )
    assert r.returncode == 0, r.stderr[-3000:]
    result = json.loads(out.read_text())
    cells = result["cells"]
    assert [c["robot_rank"] for c in cells] == [0, 1]
    assert [c["num_episodes"] for c in cells] == [3, 2]
    seeds = [[e["seed"] for e in c["episodes"]] for c in cells]
    assert seeds == [[EVAL_SEED_BASE + k for k in range(3)], [EVAL_SEED_BASE + k for k in range(3, 5)]]
    assert not set(seeds[0]) & set(seeds[1])  # no two cells run the same target
    for c in cells:
        assert c["successes"] == sum(e["success"] for e in c["episodes"])
        assert c["ci95"] == pytest.approx(list(wilson_interval(c["successes"], c["num_episodes"])))
        assert c["loop_health"]["steps"] == sum(e["steps"] for e in c["episodes"])
    pooled = sum(c["successes"] for c in cells)
    assert result["status"] == "finished" and result["num_episodes"] == 5 and result["successes"] == pooled
    assert result["success_rate"] == pooled / 5 == 1.0  # the fitted controller reaches every target, on both arms
    assert result["ci95"] == pytest.approx(list(wilson_interval(pooled, 5)))
    assert "robot rank 0: success rate 3/3" in r.stdout and "robot rank 1: success rate 2/2" in r.stdout
    assert "pooled over 2 cell(s): success rate 5/5" in r.stdout
    # each cell's episodes recorded under its own env<rank>, by that cell's arm
    for rank, want in enumerate(seeds):
        files = episode_files(run / "episodes" / f"env{rank}", "eval")
        assert len(files) == len(want) and all(load_episode(f).meta["robot_rank"] == rank for f in files)
    assert json.loads((run / "eval.json").read_text())["cells"] == cells


@pytest.mark.timeout(120)
def test_one_robot_rank_other_than_0_is_evaluated_as_before(checkpoint, tmp_path, capsys, monkeypatch):
    """One rank keeps the one-cell report (no ``cells``) and the seeds from the base."""
    monkeypatch.chdir(ROOT)
    out = tmp_path / "eval.json"
    args = ["--checkpoint", str(checkpoint), "--robot", "1", "--episodes", "2", "--json", str(out)]
    code, err = eval_in_process(capsys, FLEET, *args, "--run-dir", str(tmp_path / "run"), "env.sim=mock")
    assert code == 0, err[-3000:]
    result = json.loads(out.read_text())
    assert "cells" not in result and [e["seed"] for e in result["episodes"]] == [EVAL_SEED_BASE, EVAL_SEED_BASE + 1]
    assert len(episode_files(tmp_path / "run" / "episodes" / "env1", "eval")) == 2


@pytest.mark.timeout(120)
def test_an_interrupt_in_one_cell_stops_there_and_the_later_cells_are_not_run(checkpoint, tmp_path):
    """Ctrl-C after the first cell's first episode: that cell's arm is stopped, the second cell never opens,
    and the pooled figure is over the finished episode alone."""
    from rlhw.rl.checkpoint import PolicyCheckpoint
    from rlhw.rl.eval_cells import evaluate_cells
    from rlhw.rl.rundir import RunDir

    opened: list[CellShare] = []

    def ctrl_c(_episode):
        raise KeyboardInterrupt

    report = evaluate_cells(
        fleet("env.sim=mock", "env.pace=free"),
        PolicyCheckpoint.load(checkpoint, "--checkpoint"),
        4,
        RunDir(tmp_path / "run"),
        (0, 1),
        on_episode=ctrl_c,
        on_cell=opened.append,
    )
    assert [s.robot_rank for s in opened] == [0]
    assert report.status is RunStatus.INTERRUPTED and report.signal == 2
    assert "robot rank 0: Ctrl-C after 1 of 2 episodes" in report.reason and "robot rank(s) 1 not run" in report.reason
    assert len(report.pooled.episodes) == 1 and list(report.cells) == [0]
    assert [c["robot_rank"] for c in report.to_json()["cells"]] == [0]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    "config, args, words",
    [
        (FLEET, ["--robot", "2"], ["--robot", "robot rank 2 is out of range", "ranks 0-1", "or all"]),
        (FLEET, ["--robot", "0-2"], ["--robot", "robot rank 2 is out of range", "or all"]),
        ("configs/sim_reach.yaml", ["--robot", "1"], ["--robot", "not a cell of this config", "place more env"]),
        (FLEET, ["--robot", "x"], ["--robot", "is not a rank", "or write all"]),
        (FLEET, ["--robot", "-1"], ["--robot", "must be a robot rank >= 0"]),
        (FLEET, ["--robot", "all", "--episodes", "1"], ["--episodes", "over 2 cells", "at least 2"]),
    ],
)
def test_a_robot_rank_the_config_lacks_is_a_one_line_error_naming_the_flag_and_the_fix(
    checkpoint, tmp_path, capsys, monkeypatch, config, args, words
):
    monkeypatch.chdir(ROOT)
    run = tmp_path / "run"
    code, err = eval_in_process(capsys, config, "--checkpoint", str(checkpoint), *args, "--run-dir", str(run))
    assert code == 2 and len(err.strip().splitlines()) == 1, err
    assert all(w in err for w in words), err
    assert not run.exists()  # refused before any env opened
