"""The run directory of a short local run, and resuming it (the in-process runner, on a tiny env)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from rlhw.config import load_config_dict
from rlhw.rl.episodes import episode_files
from rlhw.rl.local import train_local
from rlhw.rl.rundir import RunDir, RunStatus
from tests.rl.point_env import PointReachEnv

CLUSTER = {
    "num_nodes": 1,
    "component_placement": {"env,rollout,learner": {"node_group": "node", "placement": "0"}},
    "node_groups": [],
}


def _config(**train):
    base = {
        "runner": "local",
        "max_env_steps": 300,
        "learning_starts": 100,
        "eval_every_steps": 150,
        "eval_episodes": 2,
        "log_every_steps": 50,
        "checkpoint_every_steps": 100,
        "progress": False,
        "sac": {"hidden_sizes": [16, 16], "batch_size": 16},
    }
    base.update(train)
    return load_config_dict({"cluster": CLUSTER, "train": base})


def _env_factory(config, rank):
    return PointReachEnv(seed=config.train.seed)


@pytest.fixture
def finished_run(tmp_path):
    config = _config()
    rd = RunDir(tmp_path / "run")
    rd.write_config(config)
    stop = train_local(config, rd, env_factory=_env_factory)
    return config, rd, stop


@pytest.mark.timeout(120)
def test_a_run_leaves_config_metrics_tensorboard_checkpoint_plot_and_episodes(finished_run):
    config, rd, stop = finished_run
    assert stop.status in ("stopped", "finished")
    snap = yaml.safe_load(rd.config_path.read_text())
    assert snap["train"]["max_env_steps"] == 300 and snap["cluster"]["num_nodes"] == 1
    assert (rd.checkpoints / "latest.pt").exists()
    assert list((rd.path / "tb").glob("events.out.tfevents.*"))
    assert rd.plot_path.exists() and rd.plot_path.read_bytes()[:4] == b"\x89PNG"
    status = json.loads(rd.status_path.read_text())
    assert status["status"] == stop.status and status["env_steps"] >= 300
    train_eps = episode_files(rd.episodes, "train")
    assert train_eps and all(p.suffix == ".npz" for p in train_eps)
    assert episode_files(rd.episodes, "eval")


@pytest.mark.timeout(120)
def test_every_metrics_row_has_env_steps_train_return_and_eval_success(finished_run):
    _, rd, _ = finished_run
    rows = rd.metrics()
    assert len(rows) >= 3
    for row in rows:
        assert {"env_steps", "train/episode_return", "eval/success_rate", "perf/env_steps_per_s"} <= set(row)
    evals = [r for r in rows if r["eval/success_rate"] is not None]
    assert evals and all(0.0 <= r["eval/success_rate"] <= 1.0 for r in evals)
    assert any("losses/qf_loss" in r for r in rows)
    steps = [r["env_steps"] for r in rows]
    assert steps == sorted(steps)


@pytest.mark.timeout(120)
def test_resume_reloads_the_checkpoint_and_every_recorded_transition(finished_run):
    config, rd, _ = finished_run
    recorded = sum(int(np.load(p)["action"].shape[0]) for p in episode_files(rd.episodes, "train"))
    ckpt = rd.load_checkpoint()
    more = _config(max_env_steps=recorded + 60)
    stop = train_local(more, rd, env_factory=_env_factory, resume=True)
    status = json.loads(rd.status_path.read_text())
    assert stop.status == "stopped"
    assert status["env_steps"] >= recorded + 60
    # Counting continued from the recorded data instead of starting over.
    rows = rd.metrics()
    after = [r for r in rows if r["time"] > ckpt.get("time", 0) and r["env_steps"] > recorded]
    assert after and min(r["env_steps"] for r in after) > recorded
    assert status["updates"] > ckpt["updates"]


@pytest.mark.timeout(60)
def test_a_failing_env_marks_the_run_failed_and_still_saves_a_checkpoint(tmp_path):
    class Exploding(PointReachEnv):
        def step(self, action):
            if getattr(self, "n", 0) > 30:
                raise RuntimeError("arm exploded")
            self.n = getattr(self, "n", 0) + 1
            return super().step(action)

    rd = RunDir(tmp_path / "run")
    with pytest.raises(RuntimeError, match="exploded"):
        train_local(_config(), rd, env_factory=lambda c, r: Exploding())
    status = json.loads(rd.status_path.read_text())
    assert status["status"] == "failed" and "exploded" in status["reason"]
    assert (rd.checkpoints / "latest.pt").exists()
    assert episode_files(rd.episodes, "train")  # the interrupted episode is on disk


def test_run_json_is_strict_json_with_null_where_a_value_is_not_a_number_yet(tmp_path):
    rd = RunDir(tmp_path / "run")
    rd.write_status(
        RunStatus.RUNNING,
        best_eval_success=float("nan"),
        loop_health={"p99_ms": float("inf"), "periods": [10.0, np.float64("nan")]},
    )
    status = json.loads(rd.status_path.read_text(), parse_constant=lambda c: pytest.fail(f"{c} in run.json"))
    assert status["best_eval_success"] is None
    assert status["loop_health"] == {"p99_ms": None, "periods": [10.0, None]}


def test_an_eval_episode_an_operator_helped_in_counts_as_a_failure(tmp_path):
    from rlhw.rl.session import TrainingSession

    session = TrainingSession(_config(target_success=0.5), RunDir(tmp_path / "run"))
    # (return, success, length, intervened steps): the second success was the operator's doing
    session.record_eval([(1.0, True, 10, 0), (1.0, True, 10, 3), (0.0, False, 10, 0), (0.0, False, 10, 5)])
    row = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()][-1]
    assert row["eval/success_rate"] == 0.25 and row["eval/intervened_episodes"] == 0.5
    assert session.stop is None, "0.25 of unaided successes must not reach a 0.5 target"
    session.record_eval([(1.0, True, 10, 0), (1.0, True, 10, 0)])
    assert session.stop is not None and session.stop.status is RunStatus.FINISHED


def test_run_json_keeps_each_status_as_the_text_tools_read_and_refuses_one_that_is_not_a_run_status(tmp_path):
    rd = RunDir(tmp_path / "run")
    assert [s.value for s in RunStatus] == ["running", "finished", "stopped", "interrupted", "failed"]
    for status in RunStatus:
        rd.write_status(status, env_steps=3)
        assert rd.read_status()["status"] == status.value and RunStatus(rd.read_status()["status"]) is status
    with pytest.raises(ValueError, match="'done' is not a valid RunStatus"):
        rd.write_status("done")
    assert rd.read_status()["status"] == "failed"  # the refused write left run.json as it was


def test_a_stop_reason_gives_the_exit_status_of_rlhw_train():
    import signal

    from rlhw.rl.session import StopReason

    assert StopReason(RunStatus.FINISHED, "target").exit_code == 0
    assert StopReason(RunStatus.STOPPED, "budget").exit_code == 0
    assert StopReason(RunStatus.FAILED, "exploded").exit_code == 1
    assert StopReason(RunStatus.INTERRUPTED, "Ctrl-C", signal.SIGTERM).exit_code == 143
