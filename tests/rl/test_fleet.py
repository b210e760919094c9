"""A fleet of cells feeding one learner, on a real Ray cluster of two raylets (ray.cluster_utils).

Each cell is an env worker with its own simulated Franka (hardware ranks 0 and 1 of one `franka` group, one
per node), paced like a real arm and acting next to it; one learner on node 0 serves both. What a fleet promises:

- one cell's env worker dies mid-run: the other cell goes on collecting, the dead one is reported by name in
  run.json, metrics.jsonl and on stderr, and its recorded episodes stay; the same with ``train.policy_at:
  rollout``, one rollout worker (on node 0) acting for both cells;
- the learner dies: every arm stops where it is (no step is recorded after the stop), and the run resumes
  from its checkpoint with every recorded episode.
"""

from __future__ import annotations

import json
import threading
import time

import numpy as np
import pytest
import ray

from rlhw.config import load_config_dict
from rlhw.rl.episodes import episode_files, load_episode
from rlhw.rl.pipeline.controller import train_pipeline
from rlhw.rl.rundir import RunDir
from rlhw.runtime.cluster import Cluster
from tests.waiting import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def fleet_config(policy_at: str = "env", **train) -> dict:
    """Two cells, one per node: Franka ranks 0 (node 0) and 1 (node 1), simulated; the learner on node 0, and
    with ``policy_at: rollout`` one rollout worker there too, acting for both cells."""
    placement = {
        "env": {"node_group": "franka", "placement": "0-1"},
        "learner": {"node_group": "node", "placement": "0"},
    }
    if policy_at == "rollout":
        placement["rollout"] = {"node_group": "node", "placement": "0"}
    return {
        "cluster": {
            "num_nodes": 2,
            "component_placement": placement,
            "node_groups": [
                {
                    "label": "franka",
                    "node_ranks": "0-1",
                    "hardware": {
                        "type": "Franka",
                        "configs": [
                            {"robot_ip": "172.16.0.2", "node_rank": 0},
                            {"robot_ip": "172.16.1.2", "node_rank": 1},
                        ],
                    },
                }
            ],
        },
        # Paced like real arms (on the clock, the UTD gate between episodes only), at 50 Hz to keep the test short.
        "env": {"sim": "mujoco", "max_episode_steps": 20, "pace": "real_time", "control_hz": 50},
        "train": {
            "policy_at": policy_at,
            "mode": "async",
            "learning_starts": 60,
            "utd_ratio": 0.25,
            "utd_slack": 50,
            "weights_every_updates": 5,
            "eval_every_steps": 100_000,
            "eval_episodes": 2,
            "log_every_steps": 40,
            "checkpoint_every_steps": 100,
            "progress": False,
            "sac": {"hidden_sizes": [32, 32], "batch_size": 32},
            **train,
        },
    }


def cell_episodes(rd: RunDir, cell: int) -> list:
    """The cell's train episodes on disk, the running one too (read while the run writes them)."""
    out = []
    for p in episode_files(rd.episodes / f"env{cell}", "train"):
        try:
            ep = load_episode(p)
        except FileNotFoundError:  # a running episode's .steps, replaced by its .npz since it was listed
            ep = load_episode(p.with_suffix(".npz"))
        if ep:
            out.append(ep)
    return out


def recorded_steps(rd: RunDir, cell: int) -> int:
    return sum(ep.length for ep in cell_episodes(rd, cell))


def acted_with_learned_weights(rd: RunDir, cell: int) -> bool:
    return any((ep.policy_version > 0).any() for ep in cell_episodes(rd, cell))


def start(ray_nodes, raw: dict, run_path, resume: bool = False):
    config = load_config_dict(raw)
    cluster = Cluster(config, address=ray_nodes.address, probe_hardware=False)
    assert [p.node_rank for p in cluster.placements["env"]] == [0, 1]  # a cell on each raylet
    assert [p.hardware_ranks for p in cluster.placements["env"]] == [(0,), (1,)]  # each with its own arm
    rd = RunDir(run_path)
    rd.write_config(config)
    result: dict = {}
    t = threading.Thread(
        target=lambda: result.update(stop=train_pipeline(config, rd, cluster=cluster, resume=resume)), daemon=True
    )
    t.start()
    return rd, t, result


@pytest.mark.timeout(300)
@pytest.mark.parametrize("policy_at", ["env", "rollout"])
def test_a_dead_cell_leaves_the_run_and_the_other_cell_goes_on_learning(ray_nodes, tmp_path, capsys, policy_at):
    """The same whether each cell acts next to its arm or one rollout worker acts for both: that worker drops
    the dead cell's lane and goes on serving the other."""
    rd, t, result = start(ray_nodes, fleet_config(policy_at, max_env_steps=700), tmp_path / "run")
    # Both cells act with weights the learner sent them before one of them dies.
    assert wait_until(
        lambda: acted_with_learned_weights(rd, 0) and acted_with_learned_weights(rd, 1), timeout_s=180, period_s=0.5
    ), "the learner's weights never reached both cells"
    ray.kill(ray.get_actor("rlhw.worker:env:1", namespace="rlhw"), no_restart=True)
    killed_at = time.time()
    steps_1 = recorded_steps(rd, 1)
    t.join(240)
    assert not t.is_alive(), "the run hung after one of its cells died"
    assert "stop" in result, "train_pipeline raised instead of returning (see the thread's exception above)"
    stop = result["stop"]
    assert stop.status in ("stopped", "finished"), stop.reason
    status = json.loads(rd.status_path.read_text())
    cells = status["cells"]
    assert [c["address"] for c in cells] == ["env:0", "env:1"]
    assert [c["robot_rank"] for c in cells] == [0, 1] and [c["node_rank"] for c in cells] == [0, 1]
    assert cells[0]["in_run"] and cells[0]["lost_reason"] is None
    assert not cells[1]["in_run"] and "env:1" in cells[1]["lost_reason"]
    # The surviving cell's episodes kept flowing into the run after the other one died ...
    after = [ep for ep in cell_episodes(rd, 0) if ep.time[0] > killed_at]
    assert after and sum(ep.length for ep in after) >= 40
    assert any((ep.policy_version > 0).any() for ep in after)  # acted on by the learned policy, not a stand-in
    assert status["env_steps"] >= 700
    # ... and the dead cell's episodes are kept: on disk, loadable, counted.
    assert recorded_steps(rd, 1) >= steps_1 > 0
    assert cells[1]["env_steps"] > 0 and cells[1]["episodes"] > 0
    assert (
        cells[0]["env_steps"] + cells[1]["env_steps"]
        <= status["env_steps"]
        <= recorded_steps(rd, 0) + recorded_steps(rd, 1)
    )
    # Each cell's figures are logged under its own keys; the last row says cell 1 left the run.
    last = rd.metrics()[-1]
    assert last["cell0/in_run"] == 1 and last["cell1/in_run"] == 0
    assert 0 < last["cell0/episodes"] <= cells[0]["episodes"] and last["cell0/obs_to_action_p99_ms"] > 0
    assert "rlhw train: cell env:1 (robot rank 1) left the run" in capsys.readouterr().err


@pytest.mark.timeout(300)
def test_a_dead_rollout_worker_acting_for_every_cell_ends_the_run_naming_it_and_blames_no_cell(ray_nodes, tmp_path):
    """Its death breaks every cell's lane at once; that is no cell's fault: no cell leaves the run for it, every
    arm stops, and run.json names the rollout worker."""
    rd, t, result = start(ray_nodes, fleet_config("rollout", max_env_steps=100_000), tmp_path / "run")
    assert wait_until(lambda: recorded_steps(rd, 0) > 0 and recorded_steps(rd, 1) > 0, timeout_s=180, period_s=0.5), (
        "the cells never stepped"
    )
    ray.kill(ray.get_actor("rlhw.worker:rollout:0", namespace="rlhw"), no_restart=True)
    t.join(120)
    assert not t.is_alive(), "the controller hung after the rollout worker died"
    assert "stop" in result, "train_pipeline raised instead of returning (see the thread's exception above)"
    stop = result["stop"]
    assert stop.status == "failed" and "rollout:0" in stop.reason, stop.reason
    status = json.loads(rd.status_path.read_text())
    assert [(c["in_run"], c["lost_reason"]) for c in status["cells"]] == [(True, None), (True, None)]
    last_step = max(float(ep.time[-1]) for c in (0, 1) for ep in cell_episodes(rd, c))
    assert last_step <= status["arms_stopped_at"]
    assert status["env_steps"] <= recorded_steps(rd, 0) + recorded_steps(rd, 1)


@pytest.mark.timeout(600)
def test_when_the_learner_dies_every_arm_stops_and_the_run_resumes_with_every_recorded_episode(ray_nodes, tmp_path):
    rd, t, result = start(ray_nodes, fleet_config(max_env_steps=100_000), tmp_path / "run")
    assert wait_until(
        lambda: (rd.checkpoints / "latest.pt").exists() and recorded_steps(rd, 0) > 0 and recorded_steps(rd, 1) > 0,
        timeout_s=180,
        period_s=0.5,
    ), "the run never checkpointed"
    ray.kill(ray.get_actor("rlhw.worker:learner:0", namespace="rlhw"), no_restart=True)
    killed_at = time.time()
    t.join(120)
    assert not t.is_alive(), "the controller hung after the learner died"
    assert "stop" in result, "train_pipeline raised instead of returning (see the thread's exception above)"
    stop = result["stop"]
    assert stop.status == "failed" and "learner:0" in stop.reason
    status = json.loads(rd.status_path.read_text())
    # Every arm stopped: no cell recorded a step after the controller stopped them, which it did at once.
    stopped_at = status["arms_stopped_at"]
    assert killed_at < stopped_at < killed_at + 60
    last_step = max(float(ep.time[-1]) for c in (0, 1) for ep in cell_episodes(rd, c))
    assert last_step <= stopped_at
    assert all(c["in_run"] for c in status["cells"])
    recorded = recorded_steps(rd, 0) + recorded_steps(rd, 1)
    assert status["env_steps"] <= recorded

    # The run resumes from its checkpoint; its counters start from every recorded step of both cells.
    rd2, t2, result2 = start(ray_nodes, fleet_config(max_env_steps=recorded + 60), rd.path, resume=True)
    t2.join(240)
    assert not t2.is_alive()
    assert result2["stop"].status == "stopped", result2["stop"].reason
    status2 = json.loads(rd2.status_path.read_text())
    assert status2["env_steps"] >= recorded + 60
    rows = rd2.metrics()
    first_resumed = next(r for r in rows if r["env_steps"] > recorded)
    assert first_resumed["train/replay_size"] >= recorded  # the learner's replay holds every recorded step
    assert np.isfinite(status2["updates"]) and status2["updates"] >= status["updates"]
