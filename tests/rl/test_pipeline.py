"""The distributed pipeline on a real multi-node Ray cluster (ray.cluster_utils: two raylets here).

Node 0 runs the env worker (its MuJoCo arm in process, or in an env server child process where a test places
a simulated stand-in for an arm, tests/placed_arm.py) and the rollout worker;
node 1 runs the learner group with two processes that all-reduce their gradients over gloo.
"""

from __future__ import annotations

import json
import os
import threading
import time

import pytest
import ray

from rlhw.config import load_config_dict
from rlhw.rl.episodes import episode_files, load_episode
from rlhw.rl.pipeline.controller import train_pipeline
from rlhw.rl.rundir import RunDir
from rlhw.runtime.cluster import Cluster
from tests.placed_arm import placed_arm
from tests.waiting import wait_until

pytestmark = [pytest.mark.ray, pytest.mark.slow]

FAST_TRAIN = {
    "max_env_steps": 200,
    "learning_starts": 100,
    "eval_every_steps": 200,
    "eval_episodes": 2,
    "steps_per_iteration": 50,
    "log_every_steps": 100,
    "progress": False,
    "utd_ratio": 0.25,
    "sac": {"hidden_sizes": [32, 32], "batch_size": 32},
}


def two_node_config(**train) -> dict:
    return {
        "cluster": {
            "num_nodes": 2,
            "component_placement": {
                "env,rollout": {"node_group": "node", "placement": "0"},
                "learner": {"node_group": "node", "placement": "1:0-1"},  # node 1, two processes
            },
            "node_groups": [],
        },
        "env": {"max_episode_steps": 25},
        "train": {**FAST_TRAIN, **train},
    }


@pytest.mark.timeout(300)
def test_two_learner_processes_on_another_node_train_with_identical_weights(ray_nodes, tmp_path):
    raw = two_node_config()
    loop_cpu = max(os.sched_getaffinity(0))  # the robot loop's isolation settings take effect in the env worker
    raw["cluster"]["node_groups"] = [
        {
            "label": "robot",
            "node_ranks": 0,
            "env_configs": [{"node_ranks": 0, "loop_cpus": str(loop_cpu), "loop_priority": {"nice": 3}}],
        }
    ]
    config = load_config_dict(raw)
    cluster = Cluster(config, address=ray_nodes.address, probe_hardware=False)
    placements = cluster.placements
    assert [p.node_rank for p in placements["learner"]] == [1, 1]
    assert [p.node_rank for p in placements["env"]] == [0]
    rd = RunDir(tmp_path / "run")
    rd.write_config(config)
    stop = train_pipeline(config, rd, cluster=cluster)
    status = json.loads(rd.status_path.read_text())
    assert stop.status in ("stopped", "finished"), stop.reason
    assert status["env_steps"] >= 200 and status["updates"] > 0
    d0, d1 = status["learner_weight_digests"]
    assert d0 == d1  # all-reduce kept the two ranks bit-identical (a hash of the weights' bytes)
    # The placement gave the learners no accelerator, so CUDA is hidden from them: run.json says where they trained.
    assert status["learner_devices"] == ["cpu", "cpu"]
    assert (rd.checkpoints / "latest.pt").exists()
    steps_on_disk = sum(load_episode(p).length for p in episode_files(rd.episodes, "train"))
    assert steps_on_disk == status["env_steps"]  # every collected transition is on disk
    rows = rd.metrics()
    assert any(r["eval/success_rate"] is not None for r in rows)
    health = status["loop_health"][0]
    assert health["steps"] >= 200 and health["latency_p99_ms"] > 0
    assert health["loop_isolation"] == {"affinity": [loop_cpu], "policy": "SCHED_OTHER", "nice": 3}
    # The rollout worker on the same node serves the loop: its loop thread takes the same isolation.
    assert status["rollout_isolation"] == [{"affinity": [loop_cpu], "policy": "SCHED_OTHER", "nice": 3}]


@pytest.mark.timeout(300)
def test_in_async_mode_the_simulator_waits_for_the_learner_so_the_configured_utd_holds(ray_nodes, tmp_path):
    # Ungated, this MuJoCo arm outran two all-reducing learner processes (sim_insert: a UTD of 0.24 against 1).
    config = load_config_dict(
        two_node_config(
            mode="async", utd_ratio=1.0, utd_slack=25, max_env_steps=400, learning_starts=100, eval_every_steps=100_000
        )
    )
    rd = RunDir(tmp_path / "run")
    rd.write_config(config)
    stop = train_pipeline(config, rd, cluster=Cluster(config, address=ray_nodes.address, probe_hardware=False))
    assert stop.status in ("stopped", "finished"), stop.reason
    utd = json.loads(rd.status_path.read_text())["utd"]
    assert utd["configured"] == 1.0 and utd["env_steps"] >= 400
    # The robots run at most utd_slack updates' worth ahead: 25 of the ~300 steps after learning_starts.
    assert 0.85 <= utd["achieved"] <= 1.0, utd
    assert utd["updates"] / (utd["env_steps"] - 100) == pytest.approx(utd["achieved"], abs=1e-3)
    logged = [r["train/utd"] for r in rd.metrics() if r.get("train/utd") is not None]
    assert logged and all(0 <= v <= 1.0 for v in logged)


def start_run_in_background(ray_nodes, config: dict, run_path, min_episodes: int):
    """Start a pipeline run in a thread; return once ``min_episodes`` train episodes are on disk."""
    config = load_config_dict(config)
    cluster = Cluster(config, address=ray_nodes.address, probe_hardware=False)
    rd = RunDir(run_path)
    rd.write_config(config)
    result: dict = {}
    t = threading.Thread(target=lambda: result.update(stop=train_pipeline(config, rd, cluster=cluster)), daemon=True)
    t.start()
    assert wait_until(lambda: len(episode_files(rd.episodes, "train")) >= min_episodes, timeout_s=180, period_s=0.5), (
        "the run never got going"
    )
    return rd, t, result


@pytest.mark.timeout(300)
def test_a_killed_env_worker_stops_the_run_cleanly_with_checkpoint_and_data(ray_nodes, tmp_path):
    rd, t, result = start_run_in_background(
        ray_nodes, two_node_config(max_env_steps=100_000, mode="async"), tmp_path / "run", min_episodes=3
    )
    victim = ray.get_actor("rlhw.worker:env:0", namespace="rlhw")
    ray.kill(victim, no_restart=True)
    killed_at = time.monotonic()
    t.join(120)
    assert not t.is_alive(), "the controller hung after its env worker died"
    assert time.monotonic() - killed_at < 90
    stop = result["stop"]
    assert stop.status == "failed" and "env:0" in stop.reason
    status = json.loads(rd.status_path.read_text())
    assert status["status"] == "failed" and "env:0" in status["reason"]
    assert (rd.checkpoints / "latest.pt").exists()
    files = episode_files(rd.episodes, "train")
    assert all(load_episode(p).length > 0 for p in files if p.suffix == ".npz")
    recorded = sum(ep.length for p in files if (ep := load_episode(p)))
    assert recorded >= status["env_steps"] - 1  # at most the step in flight is missing from disk
    # ... and the run resumes from that checkpoint and those episodes.
    more = load_config_dict(two_node_config(max_env_steps=recorded + 50, eval_every_steps=100_000))
    stop2 = train_pipeline(
        more, rd, resume=True, cluster=Cluster(more, address=ray_nodes.address, probe_hardware=False)
    )
    status2 = json.loads(rd.status_path.read_text())
    assert stop2.status == "stopped", stop2.reason
    assert status2["env_steps"] >= recorded + 50
    assert status2["updates"] >= status["updates"]


@pytest.mark.timeout(300)
def test_a_dead_env_server_child_is_restarted_and_the_run_carries_on(ray_nodes, tmp_path):
    import os
    import signal

    rd, t, result = start_run_in_background(
        ray_nodes,
        placed_arm(
            two_node_config(max_env_steps=250, eval_every_steps=100_000, env_restarts=1), learner="1:0-1", num_nodes=2
        ),  # a child to kill: a placed arm's, simulated (a simulator with no arm placed runs in process)
        tmp_path / "run",
        min_episodes=2,
    )
    worker = ray.get_actor("rlhw.worker:env:0", namespace="rlhw")
    first_pid = ray.get(worker.server_pid.remote(), timeout=30)
    os.kill(first_pid, signal.SIGKILL)  # the robot-side process dies mid-episode
    t.join(240)
    assert not t.is_alive()
    stop = result["stop"]
    assert stop.status in ("stopped", "finished"), stop.reason
    status = json.loads(rd.status_path.read_text())
    assert status["env_steps"] >= 250
    log = (rd.path / "logs" / "env0-server.log").read_text()
    assert sum(line.startswith("listening on") for line in log.splitlines()) == 2  # a second server started
    assert status["env_restarts"] == [1]


def _record_mujoco_demos(config, directory, episodes: int) -> int:
    """Demo episodes on the same MuJoCo task, in this process (random actions stand in for an operator's)."""
    import numpy as np

    from rlhw.rl.demos import PROVENANCE_KEY, recorded_env
    from rlhw.rl.episodes import EpisodeRecorder
    from rlhw.robot import make_env

    rec = EpisodeRecorder(directory, meta={PROVENANCE_KEY: recorded_env(config.env)})
    env, rng, steps = make_env(config, 0), np.random.default_rng(0), 0
    try:
        for _ in range(episodes):
            obs, _ = env.reset(seed=int(rng.integers(1000))).gym()
            rec.begin(obs, kind="demo", meta={"success": False})
            done = False
            while not done:
                action = rng.uniform(env.spec.action.low, env.spec.action.high, env.spec.action.shape).astype(
                    np.float32
                )
                obs, reward, terminated, truncated, info = env.step(action).gym()
                rec.step(action, reward, terminated, truncated, obs, bool(info.get("success")), intervened=True)
                steps += 1
                done = terminated or truncated
            rec.end()
    finally:
        env.close()
    return steps


@pytest.mark.timeout(420)
def test_every_learner_rank_loads_the_demos_again_on_resume_and_steps_carry_their_policy_version(ray_nodes, tmp_path):
    demos = tmp_path / "demos"
    config = load_config_dict(two_node_config(demos=[str(demos)], max_env_steps=100, learning_starts=50))
    demo_steps = _record_mujoco_demos(config, demos, episodes=1)
    rd = RunDir(tmp_path / "run")
    rd.write_config(config)
    stop = train_pipeline(config, rd, cluster=Cluster(config, address=ray_nodes.address, probe_hardware=False))
    assert stop.status in ("stopped", "finished"), stop.reason
    sizes = {r["train/demo_buffer_size"] for r in rd.metrics() if r.get("train/demo_buffer_size") is not None}
    assert sizes == {demo_steps}  # rank 0's demo buffer: all the demos (no operator in this run)
    eps = [load_episode(p) for p in episode_files(rd.episodes, "train")]
    versions = [int(v) for ep in eps for v in ep.policy_version]
    assert versions[:50] == [-1] * 50  # uniform random warm-up: no policy acted
    assert versions[-1] >= 0 and versions[50:] == sorted(versions[50:])  # then the published weights' versions
    assert not any(ep.intervened.any() for ep in eps)

    more = load_config_dict(
        two_node_config(
            demos=[str(demos)], max_env_steps=status_steps(rd) + 50, learning_starts=50, eval_every_steps=100_000
        )
    )
    rows_before = len(rd.metrics())
    stop2 = train_pipeline(
        more, rd, resume=True, cluster=Cluster(more, address=ray_nodes.address, probe_hardware=False)
    )
    assert stop2.status == "stopped", stop2.reason
    resumed = [r["train/demo_buffer_size"] for r in rd.metrics()[rows_before:] if r.get("train/demo_buffer_size")]
    assert resumed and set(resumed) == {demo_steps}


def status_steps(rd: RunDir) -> int:
    return int(json.loads(rd.status_path.read_text())["env_steps"])


# ------------------------------------------------------------------------- the direct step lane, across nodes


def across_nodes_config(**train) -> dict:
    """The env worker on node 0; its rollout worker and the learner on node 1: every step crosses raylets."""
    raw = two_node_config(**train)
    raw["cluster"]["component_placement"] = {
        "env": {"node_group": "node", "placement": "0"},
        "rollout,learner": {"node_group": "node", "placement": "1"},
    }
    return raw


@pytest.mark.timeout(300)
def test_the_direct_lane_carries_every_step_between_raylets_and_loses_no_transition(ray_nodes, tmp_path):
    config = load_config_dict(across_nodes_config())
    cluster = Cluster(config, address=ray_nodes.address, probe_hardware=False)
    env_node, rollout_node = cluster.placements["env"][0].node_rank, cluster.placements["rollout"][0].node_rank
    assert cluster.node_id(env_node) != cluster.node_id(rollout_node)  # two raylets
    rd = RunDir(tmp_path / "run")
    rd.write_config(config)
    stop = train_pipeline(config, rd, cluster=cluster)
    assert stop.status in ("stopped", "finished"), stop.reason
    status = json.loads(rd.status_path.read_text())
    recorded = sum(load_episode(p).length for p in episode_files(rd.episodes, "train"))
    assert status["env_steps"] >= 200 and recorded == status["env_steps"]
    health = status["loop_health"][0]
    assert health["steps"] >= 200 and 0 < health["latency_p50_ms"] <= health["latency_p99_ms"]


@pytest.mark.timeout(300)
def test_a_killed_rollout_worker_stops_the_run_cleanly_naming_the_lane_with_every_step_on_disk(ray_nodes, tmp_path):
    rd, t, result = start_run_in_background(
        ray_nodes,
        across_nodes_config(max_env_steps=100_000, mode="async"),
        tmp_path / "run",
        min_episodes=3,
    )
    ray.kill(ray.get_actor("rlhw.worker:rollout:0", namespace="rlhw"), no_restart=True)
    killed_at = time.monotonic()
    t.join(120)
    assert not t.is_alive(), "the controller hung after its rollout worker died"
    assert time.monotonic() - killed_at < 60
    stop = result["stop"]
    assert stop.status == "failed" and "rollout" in stop.reason, stop.reason
    assert (rd.checkpoints / "latest.pt").exists()
    status = json.loads(rd.status_path.read_text())
    recorded = sum(ep.length for p in episode_files(rd.episodes, "train") if (ep := load_episode(p)))
    assert recorded >= status["env_steps"] - 1  # at most the step in flight is missing from disk


# ------------------------------------------------------------------------ acting next to the arm


@pytest.mark.timeout(300)
def test_an_env_worker_that_acts_next_to_its_arm_learns_from_weights_sent_across_nodes(ray_nodes, tmp_path):
    raw = two_node_config(policy_at="env", max_env_steps=250, learning_starts=100, weights_every_updates=5)
    raw["cluster"]["component_placement"] = {
        "env": {"node_group": "node", "placement": "0"},
        "learner": {"node_group": "node", "placement": "1"},
    }  # no rollout group
    config = load_config_dict(raw)
    rd = RunDir(tmp_path / "run")
    rd.write_config(config)
    stop = train_pipeline(config, rd, cluster=Cluster(config, address=ray_nodes.address, probe_hardware=False))
    assert stop.status in ("stopped", "finished"), stop.reason
    status = json.loads(rd.status_path.read_text())
    assert status["updates"] > 0 and any(r["eval/success_rate"] is not None for r in rd.metrics())
    eps = [load_episode(p) for p in episode_files(rd.episodes, "train")]
    versions = [int(v) for ep in eps for v in ep.policy_version]
    assert len(versions) == status["env_steps"]  # every transition on disk, with the version that acted
    assert versions[:100] == [-1] * 100  # warm-up: uniform random
    assert versions[-1] > 0 and versions[100:] == sorted(versions[100:])  # then the learner's weights, as they came


def test_without_a_rollout_group_the_config_error_points_at_acting_next_to_the_arm(tmp_path):
    from rlhw.errors import ConfigError
    from rlhw.rl.pipeline.launch import Pipeline

    raw = two_node_config()
    raw["cluster"]["component_placement"] = {
        "env": {"node_group": "node", "placement": "0"},
        "learner": {"node_group": "node", "placement": "1"},
    }
    with pytest.raises(ConfigError, match="needs env, rollout, learner placed.*train.policy_at=env"):
        Pipeline(load_config_dict(raw), RunDir(tmp_path / "run"), cluster=object())
