"""reach through make_env on the MuJoCo arm (the sim-only default): same task code as on the mock."""

from __future__ import annotations

import numpy as np
import pytest

from rlhw.robot import make_env
from tests.robot.conftest import greedy_action, make_config


@pytest.mark.timeout(120)
def test_the_greedy_policy_solves_reach_on_mujoco_without_faults():
    env = make_env(make_config({"sim": "mujoco"}))
    try:
        assert env.realtime is False and env.spec.robot == "mujoco-sim0"
        for seed in range(3):
            obs, info = env.reset(seed=seed).gym()
            assert np.linalg.norm(obs["ee_position"] - [0.307, 0.0, 0.487]) < 0.01  # home
            for _ in range(env.config.max_episode_steps):
                obs, reward, terminated, truncated, info = env.step(greedy_action(obs)).gym()
                if terminated or truncated:
                    break
            assert terminated and info["success"] and info["fault"] is None
    finally:
        env.close()
