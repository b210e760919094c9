"""`rlhw eval` of an image policy on MuJoCo cameras, with the env in its process and in a `rlhw serve-env` child.

Eval opens the env as an env worker does (in process for a simulator with no arm placed, in a server child for a
simulated stand-in for a placed arm, tests/placed_arm.py) and closes it from a thread of its own; a
MuJoCo GL context belongs to one thread (drivers/mujoco/render.py). The checkpoint is an untrained SAC actor
for the spec with the wrist camera: the policy's quality is not the point, the frames and the clean run are.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from rlhw.config import load_config
from rlhw.rl.checkpoint import checkpoint_state, policy_contract
from rlhw.rl.episodes import episode_files, load_episode
from rlhw.rl.sac import SAC
from rlhw.rl.session import Counters
from rlhw.rl.spaces import AgentSpace
from tests.placed_arm import placed_arm_file

ROOT = Path(__file__).resolve().parents[2]
IMAGES = [
    "env.images=true",
    "env.sim_cameras=[wrist]",
    "env.image_size=[32,32]",
    "env.max_episode_steps=8",
    "train.sac.hidden_sizes=[32,32]",
]


@pytest.fixture(scope="module")
def image_checkpoint(tmp_path_factory) -> Path:
    import drivers.mujoco  # noqa: F401  (chooses the GL backend before mujoco is imported)
    from rlhw.robot import make_env

    config = load_config(ROOT / "configs/sim_reach.yaml", IMAGES)
    env = make_env(config)
    try:
        spec = env.spec
    finally:
        env.close()
    space = AgentSpace.from_spec(spec)
    agent = SAC(space.layout, space.low, space.high, config.train.sac)
    path = tmp_path_factory.mktemp("ckpt") / "latest.pt"
    torch.save(checkpoint_state(agent, policy_contract(spec, config.train.sac), Counters()), path)
    return path


@pytest.mark.timeout(240)
@pytest.mark.parametrize("arm_placed", [False, True], ids=["in_process", "server"])
def test_rlhw_eval_runs_an_image_policy_on_rendered_wrist_frames(arm_placed, image_checkpoint, tmp_path, monkeypatch):
    from rlhw.cli.main import main

    monkeypatch.chdir(ROOT)  # the config path, as a user types it in the repository
    out, run = tmp_path / "eval.json", tmp_path / "run"
    config = str(placed_arm_file(ROOT / "configs/sim_reach.yaml", tmp_path)) if arm_placed else "configs/sim_reach.yaml"
    args = [config, *IMAGES, "--checkpoint"]
    code = main(["eval", *args, str(image_checkpoint), "--episodes", "2", "--json", str(out), "--run-dir", str(run)])
    assert code == 0
    episodes = json.loads(out.read_text())["episodes"]
    assert len(episodes) == 2 and all(e["fault"] is None for e in episodes)
    frames = np.concatenate([load_episode(p).obs["image_wrist"] for p in episode_files(run / "episodes", "eval")])
    assert frames.shape[1:] == (32, 32, 3) and len(frames) == sum(e["steps"] + 1 for e in episodes)
    assert (frames.reshape(len(frames), -1).std(axis=1) > 10).all()  # drawn scenes, not cleared buffers
    assert (run / "logs" / "env0-server.log").exists() == arm_placed  # the placed arm's env was served
