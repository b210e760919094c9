"""The pipeline trains from MuJoCo camera images, with the env in the env worker's process (a simulator with no
arm placed) and in a server child (a simulated stand-in for a placed arm, tests/placed_arm.py).

`rlhw train configs/sim_insert.yaml env.images=true 'env.sim_cameras=[wrist]'` once failed at its first step:
the camera's GL context was made on the thread that built the env and the env worker renders on others (the
Ray actor's loop thread in process, a gRPC pool thread in a `rlhw serve-env` child). Here a short run on a
real two-raylet Ray cluster (env and rollout on node 0, the learner on node 1) must get rendered frames into
its recorded episodes and learner updates out, both ways. 32 px, one camera, 100 steps: rendering is slow.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from rlhw.config import load_config_dict
from rlhw.rl.episodes import episode_files, load_episode
from rlhw.rl.pipeline.controller import train_pipeline
from rlhw.rl.rundir import RunDir
from rlhw.runtime.cluster import Cluster
from tests.placed_arm import placed_arm

pytestmark = [pytest.mark.ray, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
STEPS = 100


def images_config(arm_placed: bool):
    """configs/sim_insert.yaml with the wrist camera at 32 px, a tiny learner, on two nodes; ``arm_placed``: the
    env on a Franka node group, simulated (served from a child)."""
    raw = yaml.safe_load((ROOT / "configs/sim_insert.yaml").read_text())
    raw["cluster"] = {
        "num_nodes": 2,
        "component_placement": {
            "env,rollout": {"node_group": "node", "placement": "0"},
            "learner": {"node_group": "node", "placement": "1"},
        },
        "node_groups": [],
    }
    raw["env"].update(images=True, sim_cameras=["wrist"], image_size=[32, 32], max_episode_steps=25)
    raw["train"] = {
        **raw.get("train", {}),
        "runner": "pipeline",
        "max_env_steps": STEPS,
        "learning_starts": 50,
        "eval_every_steps": 100_000,
        "steps_per_iteration": 25,
        "log_every_steps": 50,
        "progress": False,
        "utd_ratio": 0.25,
        "sac": {"hidden_sizes": [32, 32], "batch_size": 8},
    }
    return load_config_dict(placed_arm(raw, learner="1", num_nodes=2) if arm_placed else raw)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("arm_placed", [False, True], ids=["in_process", "server"])
def test_a_pipeline_run_records_rendered_wrist_frames_and_learns_from_them(
    arm_placed, ray_nodes, tmp_path, monkeypatch
):
    monkeypatch.chdir(ROOT)  # the config's goal pose file is relative to the repository
    config = images_config(arm_placed)
    rd = RunDir(tmp_path / "run")
    rd.write_config(config)
    stop = train_pipeline(config, rd, cluster=Cluster(config, address=ray_nodes.address, probe_hardware=False))
    assert stop.status in ("stopped", "finished"), stop.reason
    status = json.loads(rd.status_path.read_text())
    assert status["env_steps"] >= STEPS and status["updates"] > 0  # the learner sampled image batches
    frames = np.concatenate([load_episode(p).obs["image_wrist"] for p in episode_files(rd.episodes, "train")])
    assert frames.shape[1:] == (32, 32, 3) and len(frames) >= STEPS
    # every frame a drawn scene (not a cleared buffer), and the view changes as the hand moves
    assert (frames.reshape(len(frames), -1).std(axis=1) > 10).all()
    assert np.abs(np.diff(frames.astype(int), axis=0)).mean(axis=(1, 2, 3)).max() > 2
    if arm_placed:
        assert "listening on" in (rd.path / "logs" / "env0-server.log").read_text()
