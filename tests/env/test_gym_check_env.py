"""Envs keep their own contract: gymnasium's check_env passes on the in-process env and on
RemoteEnv for every task (MuJoCo, no images) with their defaults, as a user's first act calls it;
observations stay inside their declared space, seeded resets are reproducible, and capture times are
wall-clock. The per-call measurements (timestamps, timing) are in ``last_measurements`` by default, and
in ``info`` too on request: the one thing check_env then objects to."""

from __future__ import annotations

import time

import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from rlhw.config.server import ServerConfig
from rlhw.env.client import RemoteEnv
from rlhw.env.server import EnvServer
from rlhw.robot import make_env
from rlhw.robot.gym import GymRobotEnv
from tests.robot.conftest import make_config

TASKS = {
    "reach": {},
    # push_cube needs the hand down to the table (its own config check says so)
    "push_cube": {"safety": {"workspace_low": [0.25, -0.3, 0.02]}},
}


def _mujoco(task: str):
    return make_env(make_config({"sim": "mujoco", "task": task, **TASKS[task]}))


@pytest.fixture(params=list(TASKS), scope="module")
def task(request):
    return request.param


@pytest.fixture
def local(task):
    env = GymRobotEnv(_mujoco(task))  # the defaults, as a user writes it
    yield env
    env.close()


@pytest.fixture
def remote(task):
    server = EnvServer(_mujoco(task), ServerConfig(port=0)).start()
    env = RemoteEnv(server.address)  # the defaults: a user's first act is check_env(RemoteEnv(addr))
    yield env
    env.close()
    server.stop(grace_s=0.5)


@pytest.mark.timeout(120)
def test_gymnasium_check_env_passes_on_the_in_process_env(local):
    check_env(local)
    assert local.last_measurements["timing"]["total"] > 0  # set apart, not lost


@pytest.mark.timeout(120)
def test_gymnasium_check_env_passes_on_remote_env(remote):
    check_env(remote)
    assert remote.last_measurements["timing"]["server"] > 0  # set apart, not lost


@pytest.mark.timeout(120)
def test_measurements_in_info_on_request_are_what_check_env_objects_to():
    server = EnvServer(_mujoco("reach"), ServerConfig(port=0)).start()
    envs = [
        GymRobotEnv(_mujoco("reach"), measurements_in_info=True),
        RemoteEnv(server.address, measurements_in_info=True),
    ]
    try:
        for env in envs:
            env.reset(seed=0)
            info = env.step(np.zeros(env.action_space.shape, np.float32))[4]
            assert info["timing"] == env.last_measurements["timing"] and info["timestamps"]
            with pytest.raises(AssertionError, match="step info are not equivalent"):
                check_env(env)
    finally:
        for env in envs:
            env.close()
        server.stop(grace_s=0.5)


@pytest.mark.timeout(120)
def test_observations_stay_inside_their_declared_space_gripper_width_included(local):
    obs, _ = local.reset(seed=0)
    seen = [obs]
    local.action_space.seed(0)
    for _ in range(10):
        seen.append(local.step(local.action_space.sample())[0])
    for obs in seen:
        assert local.observation_space.contains(obs), {k: v for k, v in obs.items()}
        assert obs["gripper_width"][0] <= np.float32(0.08)


@pytest.mark.timeout(120)
def test_a_seeded_reset_does_not_depend_on_the_previous_episode(local):
    push = np.ones(local.action_space.shape, np.float32)
    runs = []
    for moves in (0, 8, 3):  # different previous episodes leave the arm in different places
        for _ in range(moves):
            local.step(push * (-1) ** moves)
        first, _ = local.reset(seed=123)
        after = local.step(0.5 * push)[0]
        runs.append((first, after))
    for first, after in runs[1:]:
        for name in first:
            assert np.array_equal(first[name], runs[0][0][name]), name
            assert np.array_equal(after[name], runs[0][1][name]), name


@pytest.mark.timeout(120)
def test_mujoco_capture_times_are_wall_clock_even_after_many_steps():
    env = GymRobotEnv(_mujoco("reach"))
    try:
        env.reset(seed=0)
        zero = np.zeros(env.action_space.shape, np.float32)
        for _ in range(90):  # 9 s of simulated time, computed in well under that
            before = time.time()
            _, _, _, truncated, _ = env.step(zero)
            after = time.time()
            stamps = env.last_measurements["timestamps"]
            if truncated:
                env.reset()
        assert stamps and all(before - 0.05 <= t <= after for t in stamps.values()), (before, stamps, after)
    finally:
        env.close()
