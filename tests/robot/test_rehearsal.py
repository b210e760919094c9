"""Rehearsal mode (``env.sim_state: hidden``): the learner reads only what a real cell measures.

The cube's state reaches the scripted operator and the evaluation judge, never an observation, a reward or a
done flag except through the camera frames; a config that would need the hidden state is refused by key.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rlhw.config import load_config
from rlhw.errors import ConfigError
from rlhw.robot import make_env
from rlhw.robot.pose import Pose
from tests.vision.test_classifier_env import constant_classifier

pytestmark = pytest.mark.timeout(120)

PIXELS = str(Path(__file__).resolve().parents[2] / "configs" / "sim_push_cube_pixels.yaml")
SMALL = ["env.image_size=[16,16]", "env.sim_cameras=[front]"]
GOAL = np.array([0.58, 0.0])  # the config's taped square


def rehearsal(tmp_path, *overrides):
    """The shipped rehearsal config, small frames, a real classifier file that never says success."""
    classifier = constant_classifier(tmp_path / "no.pt", -3.0)
    return load_config(PIXELS, [*SMALL, f"env.reward.classifier={classifier}", *overrides])


def steps_with_the_cube(config, cube_xy, n=4):
    """Reset with seed 7, put the cube at ``cube_xy`` (the simulator's hand, as a person places it), take ``n``
    identical steps; returns the env's outputs of each step."""
    env = make_env(config)
    try:
        env.reset(seed=7)
        env.arm.set_object_pose("cube", Pose((*cube_xy, 0.025)))
        return [env.step(np.array([0.3, -0.2, 0.1], np.float32)).gym() for _ in range(n)]
    finally:
        env.close()


def test_two_steps_that_differ_only_in_the_hidden_cube_give_the_learner_the_same_outputs_but_the_frames(tmp_path):
    config = rehearsal(tmp_path)
    away = steps_with_the_cube(config, (0.42, 0.08))
    on_goal = steps_with_the_cube(config, GOAL)
    for (obs_a, r_a, term_a, trunc_a, info_a), (obs_b, r_b, term_b, trunc_b, info_b) in zip(away, on_goal):
        assert obs_a.keys() == obs_b.keys()
        for key in obs_a:
            if not key.startswith("image_"):
                np.testing.assert_array_equal(obs_a[key], obs_b[key], err_msg=key)
        assert (r_a, term_a, trunc_a, info_a["success"]) == (r_b, term_b, trunc_b, info_b["success"])
        assert info_a["judge_success"] is False and info_b["judge_success"] is True  # the judge alone sees it
    assert any(not np.array_equal(a[0]["image_front"], b[0]["image_front"]) for a, b in zip(away, on_goal))


def test_the_same_steps_with_the_state_visible_pay_the_cube_in_the_goal(tmp_path):
    """The contrast that gives the test above its teeth: with the ground truth visible, the reward sees the cube."""
    config = load_config(PIXELS, [*SMALL, "env.sim_state=visible"])
    ((_, r_away, term_away, *_),) = steps_with_the_cube(config, (0.42, 0.08), n=1)
    ((_, r_goal, term_goal, _, info),) = steps_with_the_cube(config, GOAL, n=1)
    assert (r_away, term_away) == (0.0, False) and (r_goal, term_goal) == (1.0, True) and info["judge_success"]


def test_the_rehearsal_task_cannot_read_the_cube_from_its_arm(tmp_path):
    env = make_env(rehearsal(tmp_path))
    try:
        with pytest.raises(AttributeError, match="real cell does not measure"):
            env.task.arm.object_pose("cube")
        assert isinstance(env.arm.object_pose("cube"), Pose)  # the env (the judge's side) still has the simulator
    finally:
        env.close()


@pytest.mark.parametrize(
    "override, key",
    [
        ("env.task_options.observe_cube=true", "env.task_options.observe_cube"),
        ("env.task_options.reward=dense", "env.task_options.reward"),
    ],
)
def test_a_task_configured_to_read_hidden_state_is_refused_by_key(tmp_path, override, key):
    with pytest.raises(ConfigError) as e:
        make_env(rehearsal(tmp_path, override), connect=False)
    assert e.value.path == key and "env.sim_state=hidden" in e.value.message


def test_a_success_nobody_can_judge_is_refused_naming_the_classifier(tmp_path):
    with pytest.raises(ConfigError) as e:
        make_env(load_config(PIXELS, SMALL), connect=False)
    assert e.value.path == "env.reward.classifier" and "rlhw train-reward" in e.value.message


def test_a_rehearsal_of_a_batch_of_simulators_is_refused_naming_num_envs():
    """A batch reports no judge's verdict, and eval/success_rate is the judge's (the pipeline runs a rehearsal:
    tests/rl/test_pipeline_rehearsal.py)."""
    with pytest.raises(ConfigError) as e:
        load_config(PIXELS, ["env.num_envs=2"])
    assert e.value.path == "env.num_envs"


def test_the_scripted_operator_recording_demos_marks_success_as_a_person_would(tmp_path):
    config = load_config(
        PIXELS,
        [
            *SMALL,
            "env.teleop.device=scripted",
            "env.teleop.always_active=true",
            "env.teleop.mode=demo",
            "env.teleop.noise=0",
            "env.teleop.hesitation=0",
        ],
    )
    env = make_env(config)
    try:
        env.reset(seed=1)
        done, steps = False, 0
        while not done:
            _, reward, terminated, truncated, info = env.step(np.zeros(3, np.float32)).gym()
            done, steps = terminated or truncated, steps + 1
        assert info["operator_label"] == "success" and terminated and reward == 1.0 and info["judge_success"]
        assert steps < config.env.max_episode_steps
        # well onto the tape, not at the judge's 3 cm edge, where a 64 px frame barely tells in from near
        cube = np.asarray(env.arm.object_pose("cube").position[:2])
        assert np.linalg.norm(cube - GOAL) < env.task.operator_success_m == 0.015
    finally:
        env.close()


def test_an_operator_mark_the_judge_would_not_agree_with_is_refused_by_key(tmp_path):
    with pytest.raises(ConfigError) as e:
        make_env(rehearsal(tmp_path, "env.task_options.operator_success_m=0.05"), connect=False)
    assert e.value.path == "env.task_options.operator_success_m" and "success_m" in e.value.message


def test_every_episode_starts_with_the_hand_at_the_configured_start_inside_the_task_box(tmp_path):
    """The lab's reset pose (env.task_options.hand_start) is where the first observation finds the hand, and the
    task box (env.safety.workspace_high z = 12 cm) keeps a policy that pulls up from leaving the table."""
    env = make_env(rehearsal(tmp_path))
    try:
        for seed in (0, 1):
            obs, _ = env.reset(seed=seed).gym()
            np.testing.assert_allclose(obs["ee_position"], [0.35, 0.0, 0.10], atol=0.003)
            for _ in range(10):
                obs, *_ = env.step(np.array([0.0, 0.0, 1.0], np.float32)).gym()
            assert obs["ee_position"][2] <= 0.12 + 1e-3
    finally:
        env.close()


@pytest.mark.parametrize(
    "start, why", [([0.35, 0.0, 0.30], "inside the safety workspace"), ([0.35, 0.0, 0.05], "must clear the cube's top")]
)
def test_a_hand_start_outside_the_box_or_into_the_cube_is_refused_by_key(tmp_path, start, why):
    with pytest.raises(ConfigError) as e:
        make_env(rehearsal(tmp_path, f"env.task_options.hand_start={start}"), connect=False)
    assert e.value.path == "env.task_options.hand_start" and why in e.value.message


def test_the_reach_target_box_does_not_constrain_another_tasks_workspace():
    """env.reach.* configures reach only: push_cube's 12 cm box is valid although reach's default targets lie above it."""
    config = load_config(PIXELS, SMALL)
    assert config.env.safety.workspace_high[2] < config.env.reach.target_low[2]
    with pytest.raises(ConfigError) as e:
        load_config(
            PIXELS,
            [*SMALL, "env.task=reach", "env.sim_state=visible", "env.task_options={}", "env.reward.classifier=null"],
        )
    assert e.value.path == "env.reach.target_low"
