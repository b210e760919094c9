"""`insert` on the MuJoCo arm (configs/sim_insert.yaml): the peg-in-hole scene, reset, success by
the scripted expert, the measured contact wrench and the contact fault, and the `--sim` rehearsal
of the real-cell config."""

from __future__ import annotations

import numpy as np
import pytest

import drivers.mujoco  # noqa: F401  (chooses the GL backend before mujoco is imported)
from drivers.mujoco import scene
from drivers.teleop.scripted import expert_action
from rlhw.config import load_config
from rlhw.robot import make_env

pytestmark = pytest.mark.timeout(180)

SIM = "configs/sim_insert.yaml"


@pytest.fixture(scope="module")
def env():
    e = make_env(load_config(SIM))
    yield e
    e.close()


def run_expert(env, steps=50):
    for _ in range(steps):
        obs, reward, terminated, truncated, info = env.step(expert_action(env.operator_view)).gym()
        if terminated or truncated:
            return obs, reward, terminated, truncated, info
    raise AssertionError("the expert did not finish within the episode")


def test_reset_puts_the_peg_over_the_hole_at_a_start_in_the_box_with_the_goal_orientation(env):
    first = env.reset(seed=3)
    task, state, (obs, _) = env.task, env.arm.state(), first.gym()
    assert first.notes[0].faults == ()
    offset = state.ee_position - task.goal.position
    assert np.all(offset >= task.start_low - 0.003) and np.all(offset <= task.start_high + 0.003)
    assert np.linalg.norm(obs["orientation_error"]) < 0.02
    assert obs["to_goal"] == pytest.approx(-offset, abs=1e-4)
    assert np.array_equal(obs["external_wrench"], np.zeros(6))  # no contact in the air
    # the block stands where the recorded goal puts the peg 2 cm deep in its hole
    top, _ = scene.hole_block_pose(task.goal, task.depth)
    block = env.arm.data.mocap_pos[env.arm.model.body("hole_block").mocapid[0]]
    assert block == pytest.approx(top)
    assert env.status()["limits"]["contact_zone"]["radius_m"] == task.zone_m


def test_the_scripted_expert_inserts_the_peg_and_success_ends_the_episode(env):
    env.reset(seed=4)
    obs, reward, terminated, truncated, info = run_expert(env)
    assert terminated and not truncated and info["success"]
    assert np.linalg.norm(obs["to_goal"]) < env.task.success_m
    assert reward == pytest.approx(1.0 - np.linalg.norm(obs["to_goal"]) / env.task.reward_scale)  # dense_reward: true
    # the next reset lifts the peg straight out of the hole before homing: no contact on the way
    first = env.reset(seed=5)
    assert first.notes[0].faults == () and first.obs["to_goal"][0, 2] < -0.035


def test_pressing_the_peg_on_the_block_is_measured_and_past_the_bound_is_a_contact_fault():
    e = make_env(load_config(SIM, ["env.safety.max_contact_force_n=8"]))
    try:
        e.reset(seed=0)
        beside = e.task.goal.position + [0.03, 0.0, 0.0]  # over the block's wall, beside the hole
        info = {}
        for _ in range(50):
            hand = e.arm.state().ee_position
            target = beside if np.linalg.norm((beside - hand)[:2]) > 0.002 else hand - [0, 0, 0.02]
            action = np.clip((target - hand) / e.config.action.scale_m, -1, 1).astype(np.float32)
            obs, _, terminated, truncated, info = e.step(action).gym()
            if truncated or terminated:
                break
        assert truncated and not terminated and info["fault"] == "contact", info
        assert "over the bound 8.0 N" in info["fault_message"]
        measured = e.arm.state().external_wrench  # the contact the fault saw (the arm now holds still)
        assert measured[2] > 8.0 and abs(measured[2]) > 3 * np.abs(measured[:2]).max()  # the block pushes up (+z)
        e.reset(seed=1)  # recovers: out of the zone, home, back over the hole
        e.step(np.zeros(3, np.float32))
        assert e.status()["strikes"] == 0
    finally:
        e.close()


def test_the_real_cell_config_rehearses_on_mujoco_with_sim(tmp_path):
    config = load_config(
        "configs/franka_insert.yaml",
        ["env.sim=mujoco", "env.image_size=[32,32]", f"env.task_options.goal_pose={scene_goal()}"],
    )
    e = make_env(config)
    try:
        assert type(e.arm).__name__ == "MujocoArm" and e.spec.cameras == ("000000000001", "000000000002")
        first = e.reset(seed=0)
        assert first.obs["image_000000000001"].shape == (1, 32, 32, 3) and first.notes[0].faults == ()
        obs, *_ = e.step(expert_action(e.operator_view)).gym()
        assert obs["to_goal"].shape == (3,)
    finally:
        e.close()


def scene_goal() -> str:
    return "configs/poses/sim_insert_goal.json"


def test_the_scripted_teleop_device_drives_insert_through_the_takeover_to_success():
    """`rlhw record-demos --teleop scripted` on insert: the registered expert acts as the operator."""
    e = make_env(
        load_config(
            SIM,
            ["env.teleop.device=scripted", "env.teleop.mode=demo", "env.teleop.noise=0.05", "env.teleop.hesitation=0"],
        )
    )
    try:
        e.reset(seed=1)
        for _ in range(e.config.max_episode_steps):
            _, _, terminated, truncated, info = e.step(np.zeros(e.spec.action.shape, np.float32)).gym()
            assert info["intervened"], "in demo mode the operator drives every step"
            if terminated or truncated:
                break
        assert terminated and info["success"], f"the expert ended without success: {info['fault']}"
    finally:
        e.close()
