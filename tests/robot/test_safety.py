"""Every safety rule, on the mock arm with injected faults (franky-sim cannot raise reflexes)."""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from rlhw.config.env import SafetyConfig
from rlhw.errors import RobotFault, SafetyViolation
from rlhw.robot.arm import ArmState
from rlhw.robot.safety import SafetyLayer
from tests.robot.conftest import greedy_action

pytestmark = pytest.mark.timeout(60)


def motions(env, kind=None):
    return [m for m in env.arm.motions if kind is None or m[0] == kind]


# -- nothing moves unless asked ------------------------------------------------------------------
def test_building_connecting_status_stop_and_close_send_no_motion(mock_env):
    env = mock_env(images=True)
    assert env.connected and env.arm.connected
    json.dumps(env.status())
    env.stop()
    env.close()
    assert env.arm.motion_count == 0


def test_step_before_reset_is_refused_without_motion(mock_env):
    env = mock_env()
    with pytest.raises(SafetyViolation, match="call reset"):
        env.step(np.zeros(3, np.float32))
    assert env.arm.motion_count == 0


def away_from_home(env, offset=0.3):
    q = np.array(env.config.reset.home_q)
    q[0] += offset
    env.arm.set_joint_positions(q)


def test_reset_moves_home_with_reduced_dynamics(mock_env):
    env = mock_env(reset={"speed_factor": 0.15})
    away_from_home(env)
    env.reset()
    kind, q, speed = env.arm.motions[0]
    assert kind == "move_joints" and np.allclose(q, env.config.reset.home_q) and speed == 0.15
    assert len(env.arm.motions) == 1  # no randomization, no gripper: homing only


def test_reset_skips_the_homing_move_when_already_home(mock_env):
    env = mock_env()
    away_from_home(env, offset=0.005)  # within at_home_tolerance_rad (0.01)
    env.reset()
    assert env.arm.motion_count == 0


def test_reset_randomization_stays_in_radius_and_workspace(mock_env):
    env = mock_env(reset={"randomize_radius_m": 0.1})
    starts = []
    for seed in range(6):
        obs, _ = env.reset(seed=seed).gym()
        starts.append(obs["ee_position"])
        assert np.linalg.norm(obs["ee_position"] - np.array([0.307, 0.0, 0.487])) <= 0.1 + 2e-3
        assert np.all(obs["ee_position"] >= np.array(env.config.safety.workspace_low) - 1e-6)
        assert np.all(obs["ee_position"] <= np.array(env.config.safety.workspace_high) + 1e-6)
    assert len({tuple(np.round(s, 4)) for s in starts}) == 6


def test_stop_ends_the_episode_and_the_next_step_needs_reset(mock_env):
    env = mock_env()
    env.reset()
    env.stop()
    assert env.arm.calls["stop"] >= 1
    with pytest.raises(SafetyViolation, match="stopped"):
        env.step(np.zeros(3, np.float32))


# -- command limits ------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_actions_are_refused_and_nothing_is_sent(mock_env, bad):
    env = mock_env()
    env.reset()
    before = env.arm.motion_count
    with pytest.raises(SafetyViolation, match="NaN or inf"):
        env.step(np.array([0.1, bad, 0.0], np.float32))
    assert env.arm.motion_count == before
    env.step(np.zeros(3, np.float32))  # the episode is still usable


def test_non_finite_targets_never_reach_the_driver():
    from drivers.mock import MockArm

    arm = MockArm()
    arm.connect()
    layer = SafetyLayer(arm, SafetyConfig(), 0.1)
    with pytest.raises(SafetyViolation):
        layer.move_to(np.array([0.4, np.nan, 0.3]), arm.state())
    with pytest.raises(SafetyViolation):
        layer.set_gripper(float("inf"))
    assert arm.motion_count == 0


def test_each_step_moves_at_most_max_step(mock_env):
    env = mock_env(action={"scale_m": 0.2}, safety={"max_step_m": 0.02})
    obs, _ = env.reset().gym()
    for _ in range(5):
        ee = obs["ee_position"].astype(float)
        obs, *_, info = env.step(np.ones(3, np.float32)).gym()
        sent = motions(env, "command_pose")[-1][1]
        assert np.linalg.norm(sent - ee) <= 0.02 + 1e-6  # obs are float32
        assert info["clipped"] is True


def test_velocity_limit_caps_the_step_by_the_control_period(mock_env):
    env = mock_env(control_hz=50, action={"scale_m": 0.1}, safety={"max_velocity_mps": 0.25})
    obs, _ = env.reset().gym()
    env.step(np.array([1.0, 0.0, 0.0], np.float32))
    sent = motions(env, "command_pose")[-1][1]
    assert np.linalg.norm(sent - obs["ee_position"]) == pytest.approx(0.25 / 50, abs=1e-6)


def test_targets_are_clipped_to_the_workspace_box(mock_env):
    env = mock_env(max_episode_steps=200)
    env.reset()
    low, high = np.array(env.config.safety.workspace_low), np.array(env.config.safety.workspace_high)
    for direction in ([1, 1, 1], [-1, -1, -1]):
        for _ in range(40):
            obs, _, term, trunc, info = env.step(np.array(direction, np.float32)).gym()
            if term or trunc:
                env.reset()
        sent = np.array([m[1] for m in motions(env, "command_pose")])
        assert np.all(sent >= low - 1e-12) and np.all(sent <= high + 1e-12)
    corner = motions(env, "command_pose")[-1][1]
    assert np.allclose(corner, low)


def test_gripper_width_changes_at_most_the_rate_limit(mock_env):
    env = mock_env(action={"gripper": True}, safety={"gripper_max_speed_mps": 0.05})
    env.reset()
    assert motions(env, "command_gripper")[0][1] == pytest.approx(0.08)  # reset opens the hand
    for _ in range(4):
        env.step(np.array([0, 0, 0, -1.0], np.float32))  # "close now"
    widths = [0.08] + [m[1] for m in motions(env, "command_gripper")[1:]]
    steps = np.diff(widths)
    assert len(steps) == 4 and np.allclose(steps, -0.005)


# -- state checks --------------------------------------------------------------------------------
def test_a_joint_at_its_limit_stops_the_arm_and_truncates(mock_env):
    env = mock_env()
    env.reset()
    q = np.array(env.config.reset.home_q)
    q[3] = env.config.safety.q_max[3] - 0.01  # inside the 0.05 rad margin
    env.arm.set_joint_positions(q)
    stops = env.arm.calls.get("stop", 0)
    obs, reward, term, trunc, info = env.step(np.zeros(3, np.float32)).gym()
    assert trunc and not term and info["fault"] == "limit" and "joint 4" in info["fault_message"]
    assert env.arm.calls["stop"] > stops


def test_joint_speed_over_the_limit_is_a_limit_fault_after_stopping():
    from drivers.mock import MockArm

    arm = MockArm()
    arm.connect()
    layer = SafetyLayer(arm, SafetyConfig(), 0.1)
    s = arm.state()
    fast = ArmState(s.timestamp, s.q, np.array([0, 0, 0, 0, 9.0, 0, 0]), s.pose, s.gripper_width)
    with pytest.raises(RobotFault, match="joint 5 moves at 9.00 rad/s") as err:
        layer.check_state(fast)
    assert err.value.kind == "limit" and arm.calls["stop"] == 1
    nan = ArmState(s.timestamp, s.q * np.nan, s.dq, s.pose, s.gripper_width)
    with pytest.raises(RobotFault, match="non-finite"):
        layer.check_state(nan)


# -- faults --------------------------------------------------------------------------------------
def test_reflex_truncates_with_the_reason_and_the_arm_recovers(mock_env):
    env = mock_env(mock_faults=[{"kind": "reflex", "after": 2}])
    env.reset()
    results = [env.step(np.array([0.5, 0, 0], np.float32)).gym() for _ in range(3)]
    obs, reward, term, trunc, info = results[-1]
    assert trunc and not term and info["fault"] == "reflex" and "reflex" in info["fault_message"]
    assert results[0][4]["fault"] is None and results[1][4]["fault"] is None
    assert env.arm.errors == () and env.status()["last_fault"]["recovered"] is True
    assert set(obs) == set(env.spec.observations)  # the last good observation is returned
    assert env.reset().notes[0].faults == () and not env.safety.locked


@pytest.mark.parametrize("kind, on", [("hang", "command_pose"), ("network", "state"), ("timeout", "state")])
def test_link_faults_truncate_within_the_driver_timeout(mock_env, kind, on):
    env = mock_env(mock_faults=[{"kind": kind, "on": on, "after": 2}], driver_timeout_s=0.2)
    env.reset()  # state() calls: 1 (already home: no homing move)
    t0 = time.monotonic()
    for _ in range(3):
        *_, trunc, info = env.step(np.zeros(3, np.float32)).gym()
        if trunc:
            break
    assert info["fault"] == kind and time.monotonic() - t0 < 3 * 0.2 + 5.0  # not hung: room for a loaded machine


def test_camera_stall_truncates_and_the_camera_is_reopened(mock_env):
    env = mock_env(images=True, mock_faults=[{"kind": "camera_stall", "after": 2}])
    env.reset()  # latest() call 0
    env.step(np.zeros(3, np.float32))  # call 1
    *_, trunc, info = env.step(np.zeros(3, np.float32)).gym()  # call 2 stalls
    assert trunc and info["fault"] == "camera_stall"
    first = env.reset()
    assert first.notes[0].faults == () and first.obs["image_front"].shape == (1, 128, 128, 3)


def test_failed_recoveries_lock_the_env_and_it_says_why(mock_env):
    env = mock_env(mock_faults=[{"kind": "reflex", "after": 1}, {"kind": "recover_fail", "count": 10}])
    env.reset()
    env.step(np.zeros(3, np.float32))
    *_, trunc, info = env.step(np.zeros(3, np.float32)).gym()
    assert trunc and info["fault"] == "locked" and info["fault_cause"] == "reflex"
    assert "3 strikes" in info["fault_message"] and "unlock()" in info["fault_message"]
    assert env.arm.calls["recover"] == 3
    status = env.status()
    assert status["locked"] and "reflex" in status["lock_reason"]
    n = env.arm.motion_count
    with pytest.raises(SafetyViolation, match="locked"):
        env.step(np.zeros(3, np.float32))
    with pytest.raises(SafetyViolation, match="locked"):
        env.reset()
    assert env.arm.motion_count == n  # nothing moved while locked
    env.unlock()
    env.arm.errors = ()
    env.reset()


def test_faults_that_recur_right_after_recovery_lock_the_env(mock_env):
    # every step faults; each recovery "works" but buys no clean step
    env = mock_env(mock_faults=[{"kind": "reflex", "count": 100}])
    faults = []
    with pytest.raises(SafetyViolation, match="locked"):
        for _ in range(10):
            # the very first reset does not command a pose, so it succeeds
            env.reset()
            *_, info = env.step(np.zeros(3, np.float32)).gym()
            faults.append(info["fault"])
    assert faults[-1] == "locked" and faults.count("reflex") == 3


def test_a_clean_step_clears_the_strikes(mock_env):
    env = mock_env(mock_faults=[{"kind": "reflex", "after": 0, "count": 2}])
    env.reset()
    infos = [env.step(np.zeros(3, np.float32)).gym()[-1]]
    env.reset()
    infos.append(env.step(np.zeros(3, np.float32)).gym()[-1])
    assert [i["fault"] for i in infos] == ["reflex", "reflex"] and env.safety.strikes == 1
    env.reset()
    assert env.step(np.zeros(3, np.float32)).gym()[-1]["fault"] is None
    assert env.safety.strikes == 0


def test_a_fault_during_reset_is_recovered_and_the_reset_retried(mock_env):
    env = mock_env(mock_faults=[{"kind": "network", "on": "move_joints"}])
    away_from_home(env)
    faults = env.reset().notes[0].faults
    assert len(faults) == 1 and faults[0].startswith("network: ")
    assert env.arm.calls["move_joints"] == 2


def test_reach_still_works_after_a_fault(mock_env):
    env = mock_env(mock_faults=[{"kind": "hang", "after": 3}], driver_timeout_s=0.1)
    outcomes = []
    for seed in range(3):
        obs, _ = env.reset(seed=seed).gym()
        for _ in range(env.config.max_episode_steps):
            obs, _, term, trunc, info = env.step(greedy_action(obs)).gym()
            if term or trunc:
                break
        outcomes.append(info["fault"] or ("success" if info["success"] else "timeout"))
    assert outcomes == ["hang", "success", "success"]


def test_a_joint_parked_at_its_limit_does_not_block_the_reset_home(mock_env):
    env = mock_env()
    env.reset()
    q = np.array(env.config.reset.home_q)
    q[3] = env.config.safety.q_min[3] + 0.01
    env.arm.set_joint_positions(q)
    *_, info = env.step(np.zeros(3, np.float32)).gym()
    assert info["fault"] == "limit"
    assert env.reset().notes[0].faults == () and env.arm.motions[-1][0] == "move_joints"
    assert np.allclose(env.arm.q, env.config.reset.home_q)


def test_an_unexpected_driver_error_stops_the_arm_and_ends_the_episode(mock_env):
    env = mock_env()
    env.reset()

    def broken(pose):
        raise ZeroDivisionError("driver bug")

    env.arm.command_pose = broken
    stops = env.arm.calls.get("stop", 0)
    with pytest.raises(ZeroDivisionError):
        env.step(np.zeros(3, np.float32))
    assert env.arm.calls["stop"] == stops + 1 and not env.episode_active
    with pytest.raises(SafetyViolation, match="unexpected error"):
        env.step(np.zeros(3, np.float32))
