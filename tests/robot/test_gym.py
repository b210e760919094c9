"""A local RobotEnv behind GymRobotEnv passes gymnasium's passive env checks, and the same seed and
actions give the same observations (the full ``check_env``: tests/env/test_gym_check_env.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from gymnasium.utils.passive_env_checker import (
    check_action_space,
    check_observation_space,
    env_reset_passive_checker,
    env_step_passive_checker,
)

from rlhw.robot import make_env
from rlhw.robot.gym import GymRobotEnv
from rlhw.robot.spec import EnvSpec, TensorSpec
from tests.robot.conftest import make_config


@pytest.fixture
def gym_env():
    env = GymRobotEnv(make_env(make_config({"images": True, "image_size": [16, 16]})))
    yield env
    env.close()


@pytest.mark.timeout(60)
def test_gymnasium_passive_checks_accept_reach_on_the_mock(gym_env):
    check_observation_space(gym_env.observation_space)
    check_action_space(gym_env.action_space)
    obs, info = env_reset_passive_checker(gym_env, seed=1)
    assert gym_env.observation_space.contains(obs)
    for _ in range(3):
        obs, reward, terminated, truncated, info = env_step_passive_checker(gym_env, gym_env.action_space.sample())
        assert gym_env.observation_space.contains(obs)
    assert gym_env.action_space.shape == (3,) and np.all(gym_env.action_space.high == 1.0)


@pytest.mark.timeout(60)
def test_same_seed_and_actions_give_the_same_observations(gym_env):
    runs = []
    for _ in range(2):
        obs, _ = gym_env.reset(seed=4)
        seq = [obs]
        for a in ([0.5, -0.5, 0.2], [1.0, 0.0, -1.0]):
            seq.append(gym_env.step(np.array(a, np.float32))[0])
        runs.append(seq)
    for a, b in zip(*runs):
        for k in a:
            assert np.array_equal(a[k], b[k]), k


def test_a_bool_tensor_is_a_bool_box_from_false_to_true_single_and_batched():
    from rlhw.robot.gym import box

    flags = TensorSpec("contact", "bool", (2,))
    single, batched = box(flags), box(flags, (3,))
    assert single.dtype == np.bool_ and not single.low.any() and single.high.all()
    assert single.contains(np.array([True, False])) and single.sample().dtype == np.bool_
    assert batched.shape == (3, 2) and batched.dtype == np.bool_


def test_unbounded_tensors_get_their_dtypes_full_range():
    from rlhw.robot.gym import box

    counts = box(TensorSpec("count", "int64", (1,)))
    assert counts.low[0] == np.iinfo(np.int64).min and counts.high[0] == np.iinfo(np.int64).max
    force = box(TensorSpec("force", "float32", (3,)))
    assert np.all(np.isneginf(force.low)) and np.all(np.isposinf(force.high))


def test_a_batched_spec_puts_num_envs_in_front_of_every_space():
    from rlhw.robot.gym import spaces_from_spec

    spec = EnvSpec(
        {"q": TensorSpec("q", "float32", (7,), -3.0, 3.0)},
        TensorSpec("action", "float32", (3,), -1.0, 1.0),
        control_hz=10.0,
        num_envs=4,
    )
    observations, action = spaces_from_spec(spec)
    assert observations["q"].shape == (4, 7) and action.shape == (4, 3) and np.all(action.high == 1.0)
    assert spaces_from_spec(spec, batched=False)[1].shape == (3,)
