"""RemoteVectorEnv: many servers (single or batched) as one gymnasium vector env with same-step autoreset."""

from __future__ import annotations

import numpy as np
import pytest

from rlhw.env.client import RemoteEnv, RemoteVectorEnv
from rlhw.env.fake_env import FakeEnv


@pytest.mark.timeout(60)
def test_vector_env_over_a_single_and_a_batched_server_steps_and_autoresets_in_the_same_step(serve):
    single = serve(FakeEnv(episode_length=3))
    batched = serve(FakeEnv(episode_length=3, num_envs=2))
    venv = RemoteVectorEnv([single.address, batched.address])
    try:
        assert venv.num_envs == 3
        assert venv.single_action_space.shape == (7,) and venv.action_space.shape == (3, 7)
        obs, info = venv.reset(seed=5)
        assert obs["joint_pos"].shape == (3, 7)
        action = np.full((3, 7), 0.5, np.float32)
        for _ in range(2):
            obs, reward, terminated, truncated, info = venv.step(action)
            assert reward.shape == (3,) and not truncated.any() and "final_observation" not in info
        moved = obs["joint_pos"].copy()
        assert (moved > 0).all()  # the actions reached every instance
        obs, reward, terminated, truncated, info = venv.step(action)
        assert truncated.all() and info["_final_observation"].all()
        np.testing.assert_allclose(info["final_observation"]["joint_pos"], moved + 0.005, rtol=1e-5)
        np.testing.assert_array_equal(obs["joint_pos"], 0.0)  # the first observation of the next episode
    finally:
        venv.close()
    assert single.env_host.resets == 2 and batched.env_host.resets == 1  # the batched server reset itself


@pytest.mark.timeout(60)
def test_vector_env_refuses_servers_with_different_specs(serve):
    a = serve(FakeEnv())
    b = serve(FakeEnv(cameras=1))
    with pytest.raises(ValueError, match="a vector env needs identical specs"):
        RemoteVectorEnv([a.address, b.address])


@pytest.mark.timeout(60)
def test_remote_env_spaces_come_from_the_spec_and_contain_what_the_server_returns(serve, clients):
    server = serve(FakeEnv(cameras=1, image_hw=(16, 16)))
    env = clients(RemoteEnv(server.address))
    assert env.observation_space["cam0"].shape == (16, 16, 3) and env.observation_space["cam0"].dtype == np.uint8
    assert env.observation_space["gripper"].high[0] == np.float32(0.08)
    obs, _ = env.reset(seed=3)
    assert env.observation_space.contains(obs)
    for _ in range(5):
        obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
        assert env.observation_space.contains(obs) and isinstance(reward, float)


@pytest.mark.timeout(120)
def test_a_batched_mujoco_server_autoresets_in_the_same_step_and_ships_final_observations(serve, clients):
    from rlhw.config import load_config
    from rlhw.robot import make_batched_env

    config = load_config("configs/sim_reach.yaml", ["env.sim=mujoco", "env.num_envs=2", "env.max_episode_steps=3"])
    server = serve(make_batched_env(config))
    env = clients(RemoteEnv(server.address))
    assert env.num_envs == 2 and env.action_space.shape == (2, 3)
    assert env.observation_space["ee_position"].shape == (2, 3)
    obs, _ = env.reset(seed=0)
    action = np.full((2, 3), 0.5, np.float32)
    for _ in range(2):
        obs, reward, terminated, truncated, info = env.step(action)
        assert reward.shape == (2,) and not (terminated | truncated).any()
    last_target = obs["target_position"].copy()
    obs, reward, terminated, truncated, info = env.step(action)
    assert (terminated | truncated).all() and info["_final_observation"].all()
    final = info["final_observation"]
    assert final["ee_position"].shape == (2, 3)
    np.testing.assert_allclose(final["target_position"], last_target)  # the finished episode's target
