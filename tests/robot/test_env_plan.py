"""`EnvPlan.simulated`: the one answer to "is this env simulated?", which the env worker's transport, the
env server's watchdog, ``env.num_envs`` and the smoke test all read."""

from __future__ import annotations

import copy

import pytest

from rlhw.errors import ConfigError
from rlhw.robot import make_batched_env, plan_env
from rlhw.robot.factory import declares_real_arm
from tests.robot.conftest import FRANKA_CLUSTER, make_config

# A Franka declared in a group that does not host the env component: `auto` falls back to MuJoCo there.
FRANKA_BESIDE = copy.deepcopy(FRANKA_CLUSTER)
FRANKA_BESIDE["component_placement"] = {"env": {"node_group": "node", "placement": "0"}}


@pytest.mark.parametrize(
    "env", [{"sim": "mock"}, {"sim": "mujoco"}, {"sim": None, "driver": "mujoco"}, {"sim": None, "driver": "auto"}]
)
def test_a_simulator_the_config_chose_is_simulated(env):
    assert plan_env(make_config(env), 0).simulated


def test_a_franka_is_not_simulated_and_env_sim_makes_it_so():
    assert not plan_env(make_config({"sim": None}, FRANKA_CLUSTER), 0).simulated
    assert plan_env(make_config({"sim": "mujoco"}, FRANKA_CLUSTER), 0).simulated


def test_an_auto_fallback_beside_a_declared_franka_keeps_a_real_arms_guards():
    config = make_config({"sim": None, "driver": "auto"}, FRANKA_BESIDE)
    plan = plan_env(config, 0)
    assert declares_real_arm(config) and plan.arm_driver == "mujoco" and not plan.simulated
    assert plan_env(make_config({"sim": None, "driver": "mujoco"}, FRANKA_BESIDE), 0).simulated


def test_several_instances_need_a_simulated_plan():
    config = make_config({"sim": None, "driver": "auto", "num_envs": 2}, FRANKA_BESIDE)
    with pytest.raises(ConfigError, match="num_envs=2 needs a simulator") as err:
        make_batched_env(config, connect=False)
    assert err.value.path == "env.num_envs"


def test_a_config_without_hardware_declares_no_real_arm():
    assert not declares_real_arm(make_config({"sim": "mock"}))
    assert declares_real_arm(make_config({"sim": "mock"}, FRANKA_CLUSTER))
