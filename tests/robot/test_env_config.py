"""The env: config section: safe defaults, and a clear error naming the field for every bad value."""

from __future__ import annotations

import pytest

from rlhw.config.env import FR3_Q_MAX, FR3_Q_MIN, EnvConfig
from rlhw.errors import ConfigError
from tests.robot.conftest import make_config


def test_defaults_are_a_slow_bounded_10hz_reach():
    env = EnvConfig()
    assert env.task == "reach" and env.control_hz == 10.0 and env.max_episode_steps == 50
    assert env.safety.max_step_m <= 0.05 and env.safety.max_velocity_mps <= 0.5
    assert env.safety.max_recoveries == 3 and env.reset.speed_factor <= 0.3
    assert env.safety.q_min == FR3_Q_MIN and env.safety.q_max == FR3_Q_MAX
    assert env.image_size == (128, 128) and env.images is False and env.num_envs == 1


def test_a_config_without_env_section_gets_the_defaults():
    from rlhw.config import load_config_dict

    cfg = load_config_dict({"cluster": {"num_nodes": 1}})
    assert cfg.env == EnvConfig()


@pytest.mark.parametrize(
    "env, path, words",
    [
        ({"safety": {"workspace_low": [0.8, 0.0, 0.1]}}, "env.safety.workspace_low", "low.x=0.8 must be < high.x"),
        (
            {"safety": {"workspace_high": [0.7, 0.3]}},
            "env.safety.workspace_high",
            "expected 3 numbers [x, y, z], got 2",
        ),
        ({"safety": {"max_step_m": 0}}, "env.safety.max_step_m", "greater than 0"),
        ({"safety": {"max_step_m": float("nan")}}, "env.safety.max_step_m", "finite"),
        ({"safety": {"max_velocity_mps": -1}}, "env.safety.max_velocity_mps", "greater than 0"),
        ({"safety": {"gripper_max_speed_mps": 0}}, "env.safety.gripper_max_speed_mps", "greater than 0"),
        ({"safety": {"max_recoveries": 0}}, "env.safety.max_recoveries", "greater than or equal to 1"),
        ({"safety": {"dq_max": [1, 1, 1, 1, 1, 1, 0]}}, "env.safety.dq_max", "must be > 0"),
        (
            {"safety": {"q_min": [0, 0, 0, 0, 0, 0, 0], "q_max": [0.05, 1, 1, 1, 1, 1, 1]}},
            "env.safety.q_min",
            "joint 1",
        ),
        ({"control_hz": 0}, "env.control_hz", "greater than 0"),
        ({"control_hz": "fast"}, "env.control_hz", "number"),
        ({"num_envs": 0}, "env.num_envs", "greater than or equal to 1"),
        ({"max_episode_steps": 0}, "env.max_episode_steps", "greater than or equal to 1"),
        ({"image_size": [4, 4]}, "env.image_size", "between 8 and 4096"),
        ({"driver": "ur5"}, "env.driver", "'auto', 'franka', 'mujoco' or 'mock'"),
        ({"camera_driver": "zed"}, "env.camera_driver", "realsense"),
        ({"sim": "gazebo"}, "env.sim", "mujoco"),
        ({"task": "re ach"}, "env.task", "must be a word"),
        ({"sim_cameras": ["front", "front"]}, "env.sim_cameras", "duplicate"),
        ({"reach": {"success_m": -0.01}}, "env.reach.success_m", "greater than 0"),
        (
            {"reach": {"target_low": [0.6, 0.0, 0.2], "target_high": [0.5, 0.1, 0.3]}},
            "env.reach.target_low",
            "swap or widen",
        ),
        ({"reach": {"target_high": [0.9, 0.1, 0.3]}}, "env.reach.target_low", "leaves the safety workspace"),
        ({"reset": {"home_q": [0, 0, 0, 0, 0, 0, 0]}}, "env.reset.home_q", "joint 4"),
        ({"reset": {"speed_factor": 1.0}}, "env.reset.speed_factor", "less than or equal to 0.5"),
        ({"reset": {"randomize_radius_m": -0.1}}, "env.reset.randomize_radius_m", "greater than or equal to 0"),
        ({"action": {"scale_m": 0}}, "env.action.scale_m", "greater than 0"),
        ({"mock_faults": [{"kind": "meteor"}]}, "env.mock_faults[0].kind", "reflex"),
        ({"drvier": "mock"}, "env.drvier", "did you mean 'driver'"),
        ({"safety": {"workspace": [0, 0, 0]}}, "env.safety.workspace", "did you mean"),
    ],
)
def test_each_bad_field_is_named_with_a_fix(env, path, words):
    with pytest.raises(ConfigError) as err:
        make_config(env)
    assert err.value.path == path, str(err.value)
    assert words in str(err.value)


def test_overrides_reach_env_fields():
    from rlhw.config import load_config_dict

    cfg = load_config_dict({"cluster": {"num_nodes": 1}, "env": {"control_hz": 20, "safety": {"max_step_m": 0.01}}})
    assert cfg.env.control_hz == 20 and cfg.env.safety.max_step_m == 0.01
