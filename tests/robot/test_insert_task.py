"""The `insert` task's checks at the edge: the recorded goal pose file and the task options."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlhw.config import load_config
from rlhw.errors import ConfigError
from rlhw.robot.arm import ArmState
from rlhw.robot.pose import Pose
from rlhw.robot.poses import RecordedPose, load_pose, save_pose
from rlhw.robot.task_registry import make_task
from tests.robot.conftest import make_config

GOAL = Pose((0.5, 0.0, 0.12), (1.0, 0.0, 0.0, 0.0))
Q = np.array([0.0, 0.3, 0.0, -2.4, 0.0, 2.7, 0.785])


def goal_file(tmp_path, pose=GOAL) -> str:
    path = str(tmp_path / "goal.json")
    save_pose(path, RecordedPose("goal_pose", "mock-sim0", 1.0e9, pose, Q, 0.02))
    return path


def insert_task(tmp_path, options=None, **env):
    config = make_config(
        {"task": "insert", "task_options": {"goal_pose": goal_file(tmp_path), **(options or {})}, **env}
    )
    return make_task("insert", config.env, config.env.task_options)


def state_at(xyz, quat=(1.0, 0.0, 0.0, 0.0)) -> ArmState:
    return ArmState(0.0, Q, np.zeros(7), Pose(xyz, quat), 0.02)


def test_a_saved_pose_loads_back_exactly(tmp_path):
    pose = load_pose(goal_file(tmp_path), "env.task_options.goal_pose")
    assert pose.pose == GOAL and pose.q.tolist() == Q.tolist()
    assert pose.name == "goal_pose" and pose.robot == "mock-sim0" and pose.gripper_width == 0.02


def test_a_missing_goal_file_names_the_option_and_the_record_pose_command(tmp_path):
    config = make_config({"task": "insert", "task_options": {"goal_pose": str(tmp_path / "nope.json")}})
    with pytest.raises(ConfigError, match="does not exist; record it with `rlhw record-pose CONFIG goal_pose`") as e:
        make_task("insert", config.env, config.env.task_options)
    assert e.value.path == "env.task_options.goal_pose"


def test_a_config_without_a_goal_file_says_how_to_name_one():
    config = make_config({"task": "insert"})
    with pytest.raises(ConfigError, match="set env.task_options.goal_pose to a path"):
        make_task("insert", config.env, config.env.task_options)


@pytest.mark.parametrize(
    "content",
    [
        "{not json",
        json.dumps({"format": "other"}),
        json.dumps({"format": "rlhw-pose/1", "name": "g"}),
        json.dumps(
            {
                "format": "rlhw-pose/1",
                "name": "g",
                "robot": "r",
                "time": 0,
                "ee_pose": [0.5, 0, 0.1, 0, 0, 0, 0],
                "q": [0] * 7,
                "gripper_width": 0,
            }
        ),
    ],
)
def test_a_garbled_goal_file_is_a_config_error_with_the_fix(tmp_path, content):
    path = tmp_path / "goal.json"
    path.write_text(content)
    with pytest.raises(ConfigError, match="rlhw record-pose") as e:
        load_pose(str(path), "env.task_options.goal_pose")
    assert e.value.path == "env.task_options.goal_pose"


@pytest.mark.parametrize(
    "options, env, path",
    [
        ({}, {"action": {"gripper": True}}, "env.action.gripper"),
        ({}, {"reset": {"randomize_radius_m": 0.05}}, "env.reset.randomize_radius_m"),
        ({"start_low": [-0.02, -0.02, 0.01]}, {}, "env.task_options.start_low"),
        ({"start_low": [0.02, 0.0, 0.05], "start_high": [0.01, 0.0, 0.06]}, {}, "env.task_options.start_low"),
        ({"start_high": [0.02, 0.02, 0.5]}, {}, "env.task_options.approach_height_m"),
        ({"approach_height_m": 0.6}, {}, "env.safety.workspace_low"),
        ({"success_m": 0}, {}, "env.task_options.success_m"),
        ({"dense_reward": "yes"}, {}, "env.task_options.dense_reward"),
        ({"terminate_on_success": "no"}, {}, "env.task_options.terminate_on_success"),
        ({"hole_size": 1}, {}, "env.task_options.hole_size"),
    ],
)
def test_options_that_cannot_work_are_refused_with_the_field_named(tmp_path, options, env, path):
    with pytest.raises(ConfigError) as e:
        insert_task(tmp_path, options, **env)
    assert e.value.path == path


def test_a_goal_whose_hole_leans_away_from_vertical_is_refused(tmp_path):
    leaning = [0.5, 0.0, 0.12, np.cos(0.15), 0.0, 0.0, np.sin(0.15)]  # 180 deg about x, then 0.3 rad more
    config = make_config(
        {"task": "insert", "task_options": {"goal_pose": goal_file(tmp_path, Pose.from_vector(leaning))}}
    )
    with pytest.raises(ConfigError, match="leans 17 deg from straight down") as e:
        make_task("insert", config.env, config.env.task_options)
    assert e.value.path == "env.task_options.goal_pose"


def test_success_needs_both_the_position_and_the_orientation_within_tolerance(tmp_path):
    task = insert_task(tmp_path)
    assert task.success(state_at(GOAL.position + [0.0, 0.0, 0.005]))
    assert not task.success(state_at(GOAL.position + [0.0, 0.0, 0.012]))
    tilted = (np.cos(0.1), 0.0, 0.0, -np.sin(0.1))  # 0.2 rad away from the goal's [1, 0, 0, 0]
    assert not task.success(state_at(GOAL.position, tilted))
    assert task.reward(state_at(GOAL.position)) == 1.0 and task.reward(state_at(GOAL.position + 0.05)) == 0.0


def test_success_ends_the_episode_unless_terminate_on_success_is_false(tmp_path):
    at_goal, above = state_at(GOAL.position), state_at(GOAL.position + [0.0, 0.0, 0.03])
    task = insert_task(tmp_path)
    assert task.terminated(at_goal) and not task.terminated(above)
    running_on = insert_task(tmp_path, {"terminate_on_success": False})
    assert running_on.success(at_goal) and not running_on.terminated(at_goal)


def test_dense_shaping_is_off_by_default_and_adds_minus_distance_when_on(tmp_path):
    assert insert_task(tmp_path).reward(state_at(GOAL.position + [0, 0, 0.05])) == 0.0
    dense = insert_task(tmp_path, {"dense_reward": True, "reward_scale_m": 0.05})
    assert dense.reward(state_at(GOAL.position + [0, 0, 0.05])) == pytest.approx(-1.0)


def test_the_observations_are_all_measurable_on_a_real_arm(tmp_path):
    task = insert_task(tmp_path)
    obs = task.observe(
        ArmState(
            0.0, Q, np.zeros(7), Pose((0.51, 0.0, 0.15), (1, 0, 0, 0.0)), 0.02, (), np.array([0, 0, 20.0, 0, 0, 4.0])
        ),
        {},
    )
    assert (
        set(obs)
        == set(task.observation_specs())
        == {"to_goal", "orientation_error", "gripper_width", "external_wrench"}
    )
    assert obs["to_goal"] == pytest.approx([-0.01, 0.0, -0.03])
    assert obs["external_wrench"] == pytest.approx([0, 0, 0.5, 0, 0, 0.5])  # over the bounds 40 N and 8 Nm
    assert all(v.dtype == np.float32 for v in obs.values())


def test_the_reset_path_rises_out_of_the_hole_before_homing_and_comes_down_over_the_start(tmp_path):
    task = insert_task(tmp_path)
    in_hole = state_at(GOAL.position)
    (up,) = task.retreat_path(in_hole)
    assert up.position == pytest.approx(GOAL.position + [0, 0, 0.1])  # straight up to the approach height
    assert task.retreat_path(state_at([0.3, 0.0, 0.45])) == []  # elsewhere: homing is safe
    task.reset(state_at([0.3, 0.0, 0.45]), np.random.default_rng(1))
    over, start = task.approach_path(state_at([0.3, 0.0, 0.45]))
    assert over.position[:2] == pytest.approx(start.position[:2]) and over.position[2] == pytest.approx(
        GOAL.position[2] + 0.1
    )
    offset = start.position - GOAL.position
    assert np.all(offset >= [-0.02, -0.02, 0.04]) and np.all(offset <= [0.02, 0.02, 0.06])
    assert start.quaternion == pytest.approx(GOAL.quaternion)


@pytest.mark.parametrize("path", ["configs/sim_insert.yaml", "configs/franka_insert.yaml"])
def test_the_insert_configs_load(path):
    config = load_config(path)
    assert config.env.task == "insert" and config.env.task_options["goal_pose"]
