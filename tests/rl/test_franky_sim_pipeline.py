"""configs/franky_sim.yaml through the whole pipeline: env worker -> `rlhw serve-env` child -> the real
`franka` driver (franky, libfranka's protocol) -> franky-sim on loopback, in real time at 10 Hz."""

from __future__ import annotations

import json

import pytest
import ray

from drivers.franky_sim import FrankySim
from rlhw.config import load_config
from rlhw.rl.episodes import episode_files, load_episode
from rlhw.rl.pipeline.controller import train_pipeline
from rlhw.rl.rundir import RunDir
from rlhw.runtime.cluster import Cluster

pytestmark = [pytest.mark.ray, pytest.mark.slow]


@pytest.fixture(scope="module")
def sim():
    with FrankySim(start_timeout_s=90) as s:
        yield s


@pytest.mark.timeout(300)
def test_franky_sim_config_steps_through_the_pipeline_with_the_real_driver(sim, tmp_path):
    if ray.is_initialized():
        ray.shutdown()
    config = load_config(
        "configs/franky_sim.yaml",
        [
            f"cluster.node_groups[0].hardware.configs[0].robot_ip={sim.host}",
            "env.max_episode_steps=10",
            "train.max_env_steps=20",
            "train.learning_starts=10",
            "train.eval_every_steps=20",
            "train.eval_episodes=1",
            "train.progress=false",
            "train.sac.hidden_sizes=[32,32]",
            "train.sac.batch_size=16",
        ],
    )
    assert config.env.sim is None  # the real driver, not the MuJoCo stand-in
    # No hardware probe: franky-sim briefly refuses connections after a bare TCP probe.
    cluster = Cluster(config, probe_hardware=False)
    try:
        rd = RunDir(tmp_path / "run")
        rd.write_config(config)
        stop = train_pipeline(config, rd, cluster=cluster)
    finally:
        cluster.shutdown()
    status = json.loads(rd.status_path.read_text())
    assert stop.status in ("stopped", "finished"), stop.reason
    assert status["env_steps"] >= 20
    eps = [load_episode(p) for p in episode_files(rd.episodes, "train")]
    assert sum(e.length for e in eps) == status["env_steps"]
    # The hand moved under the policy's commands: positions differ along the episode.
    moved = max(float(abs(e.obs["ee_position"][-1] - e.obs["ee_position"][0]).max()) for e in eps)
    assert moved > 0.005
    server_log = (rd.path / "logs" / "env0-server.log").read_text()
    assert "franka" in server_log.lower() or "listening on" in server_log
    health = status["loop_health"][0]
    assert health["steps"] >= 20
    # The config's default layout: the policy next to the arm, the loop at SCHED_FIFO 80 (or, where the OS
    # refuses real-time priority, the fallback recorded with its fix).
    iso = health["loop_isolation"]
    assert (iso["policy"], iso.get("priority")) == ("SCHED_FIFO", 80) or "falling back" in iso["refused"], iso
