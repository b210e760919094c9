"""The MuJoCo arm behind the full RobotEnv (make_env with env.sim=mujoco): reach, push_cube, images."""

from __future__ import annotations

import numpy as np
import pytest

import drivers.mujoco  # noqa: F401  (chooses the GL backend before mujoco is imported)
from drivers.mock import MockArm
from drivers.mujoco import MujocoArm
from rlhw.config import load_config
from rlhw.errors import ConfigError
from rlhw.robot import make_env
from rlhw.robot.pose import Pose
from rlhw.robot.tasks.push_cube import PushCube

pytestmark = pytest.mark.timeout(180)

SIM = "configs/sim_reach.yaml"
PUSH = [
    "env.sim=mujoco",
    "env.task=push_cube",
    "env.safety.workspace_low=[0.25,-0.3,0.02]",
    "env.max_episode_steps=100",
]


def scripted_push(obs: dict, state: dict, scale: float) -> np.ndarray:
    """Go behind the cube (seen from the goal), descend, push along the cube-goal line."""
    ee, cube, goal = obs["ee_position"], obs["cube_position"], obs["goal_position"]
    u = (goal - cube)[:2]
    u = u / max(np.linalg.norm(u), 1e-6)
    behind = cube[:2] - u * 0.07
    off_line = abs(u[0] * (ee[1] - cube[1]) - u[1] * (ee[0] - cube[0]))
    if state["phase"] == "approach":
        target = np.r_[behind, 0.10]
        if np.linalg.norm(ee[:2] - behind) < 0.01:
            state["phase"] = "descend"
    if state["phase"] == "descend":
        target = np.r_[behind, 0.03]
        if ee[2] < 0.04:
            state["phase"] = "push"
    if state["phase"] == "push":
        target = np.r_[cube[:2] - u * 0.01, 0.03]
        if off_line > 0.02:
            state["phase"] = "approach"
    return np.clip((target - ee) / scale, -1, 1).astype(np.float32)


def test_reach_on_the_mujoco_arm_succeeds_with_a_scripted_policy():
    env = make_env(load_config(SIM, ["env.sim=mujoco"]))
    try:
        assert isinstance(env.arm, MujocoArm) and env.realtime is False
        obs, _ = env.reset(seed=1).gym()
        for _ in range(50):
            action = np.clip(obs["to_target"] / env.config.action.scale_m, -1, 1).astype(np.float32)
            obs, reward, terminated, truncated, info = env.step(action).gym()
            if terminated or truncated:
                break
        assert info["success"] and terminated
        assert np.linalg.norm(obs["to_target"]) < env.config.reach.success_m
        assert info["timing"]["wait"] >= 0 and info["fault"] is None
    finally:
        env.close()


def test_push_cube_rewards_progress_and_flags_success_when_the_cube_reaches_the_goal():
    env = make_env(load_config(SIM, PUSH))
    try:
        assert isinstance(env.task, PushCube) and env.arm.objects == ("cube",)
        assert set(env.spec.observations) >= {"cube_position", "goal_position", "cube_to_goal", "ee_to_cube"}
        first = env.reset(seed=3)
        obs, _ = first.gym()
        start_gap = np.linalg.norm(obs["cube_to_goal"][:2])
        assert start_gap >= 0.08 - 1e-6 and not first.success[0]
        np.testing.assert_allclose(
            env.arm.data.mocap_pos[0][:2], obs["goal_position"][:2], atol=1e-6
        )  # marker shows the goal
        state, rewards = {"phase": "approach"}, []
        for _ in range(100):
            obs, reward, terminated, truncated, info = env.step(
                scripted_push(obs, state, env.config.action.scale_m)
            ).gym()
            rewards.append(reward)
            if terminated or truncated:
                break
        assert info["success"] and terminated and info["fault"] is None
        assert np.linalg.norm(obs["cube_to_goal"][:2]) < 0.03
        assert rewards[-1] > rewards[0] + 1.0  # dense reward grew as hand and cube got there
        assert obs["gripper_width"][0] < 0.01  # fingers closed as a pusher
    finally:
        env.close()


def test_a_cube_pushed_out_of_reach_truncates_the_episode_and_is_not_an_end_state():
    """Every push_cube reward is negative: were this terminal, its value 0 would pay the policy to knock
    the cube off the table. Truncated, the learner bootstraps from it as at the time limit."""
    env = make_env(load_config(SIM, PUSH))
    try:
        env.reset(seed=3)
        far = env.task.ws_high[:2] + 0.1
        env.arm.set_object_pose("cube", Pose(np.r_[far, 0.025]))
        obs, reward, terminated, truncated, info = env.step(np.zeros(env.spec.action.shape, np.float32)).gym()
        assert truncated and not terminated and not info["success"] and info["fault"] is None
        assert reward < 0 and env.task.cube_out_of_reach()
    finally:
        env.close()


def test_push_cube_goals_differ_between_episodes_and_start_at_the_sampled_cube_pose():
    env = make_env(load_config(SIM, PUSH))
    try:
        goals = []
        for seed in (0, 1):
            obs, _ = env.reset(seed=seed).gym()
            goals.append(obs["goal_position"].copy())
            np.testing.assert_allclose(obs["cube_position"], env.arm.object_pose("cube").position, atol=1e-6)
        assert np.linalg.norm(goals[0] - goals[1]) > 1e-3
    finally:
        env.close()


def test_push_cube_explains_how_to_fix_a_workspace_that_cannot_reach_the_cube():
    with pytest.raises(ConfigError, match="workspace_low") as e:
        make_env(load_config(SIM, ["env.sim=mujoco", "env.task=push_cube"]))
    assert "z <= 0.04" in str(e.value)


def test_push_cube_on_a_driver_without_object_poses_is_refused_with_the_fix():
    with pytest.raises(ConfigError, match="mujoco"):
        make_env(load_config(SIM, ["env.sim=mock", "env.task=push_cube", "env.safety.workspace_low=[0.25,-0.3,0.02]"]))
    task = PushCube(load_config(SIM, PUSH[1:]).env)
    with pytest.raises(ConfigError, match="object_pose"):
        task.bind(MockArm())  # a driver without the capability


def test_push_cube_rejects_unknown_or_malformed_options():
    with pytest.raises(ConfigError, match="cube_lo"):
        make_env(load_config(SIM, PUSH + ["env.task_options={cube_lo: [0.4, 0.0]}"]))
    with pytest.raises(ConfigError, match="cube_low"):
        make_env(load_config(SIM, PUSH + ["env.task_options={cube_low: [0.4]}"]))


def test_env_with_images_returns_rendered_camera_observations_stamped_with_the_proprio_instant():
    env = make_env(
        load_config(
            SIM, ["env.sim=mujoco", "env.images=true", "env.image_size=[48,64]", "env.sim_cameras=[front,wrist]"]
        )
    )
    try:
        assert set(env.cameras) == {"front", "wrist"}
        first = env.reset(seed=0)
        obs2, *_, info2 = env.step(np.zeros(3, np.float32)).gym()
        for key in ("image_front", "image_wrist"):
            assert obs2[key].shape == (48, 64, 3) and obs2[key].dtype == np.uint8 and obs2[key].std() > 5
            # The image is stamped with the same instant as the proprio reading (wall-clock).
            assert info2["timestamps"][key] == info2["timestamps"]["ee_position"]
            assert 0 < info2["timestamps"][key] - first.stamps[key][0] < 5.0
    finally:
        env.close()


def test_batched_mujoco_envs_in_one_process_share_the_model_and_step_independently():
    from rlhw.robot import make_batched_env

    batch = make_batched_env(load_config(SIM, ["env.sim=mujoco", "env.num_envs=3"]))
    try:
        arms = [e.arm for e in batch.envs]
        assert len({id(a.data) for a in arms}) == 3 and all(a.model is arms[0].model for a in arms)
        obs = batch.reset(seed=0).obs
        assert obs["ee_position"].shape == (3, 3)
        assert len({tuple(t) for t in obs["target_position"].round(4)}) == 3  # own seeds, own goals
        actions = np.zeros((3, 3), np.float32)
        actions[0] = [1.0, 0.0, 0.0]  # only env 0 moves
        for _ in range(5):
            obs = batch.step(actions).obs
        moved = np.linalg.norm(obs["ee_position"] - obs["ee_position"][1], axis=1)
        assert moved[0] > 0.05 and moved[2] < 1e-3
    finally:
        batch.close()
