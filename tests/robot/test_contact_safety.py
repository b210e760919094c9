"""Contact safety (rules 5 and 6 of rlhw/robot/safety.py): the external wrench bound and the slow
contact zone, on the mock arm with an injected wrench (franky-sim measures no force)."""

from __future__ import annotations

import numpy as np
import pytest

from rlhw.config.env import SafetyConfig
from rlhw.errors import RobotFault
from rlhw.robot.arm import ArmState
from rlhw.robot.pose import Pose
from rlhw.robot.safety import SafetyLayer

pytestmark = pytest.mark.timeout(60)


def state_at(xyz, wrench=None) -> ArmState:
    q = np.array([0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785])
    return ArmState(0.0, q, np.zeros(7), Pose(xyz, (1.0, 0.0, 0.0, 0.0)), 0.04, (), wrench)


class StubArm:
    name = "stub"
    max_gripper_width = 0.08

    def __init__(self):
        self.stops = 0

    def stop(self):
        self.stops += 1


def layer(**limits) -> SafetyLayer:
    return SafetyLayer(StubArm(), SafetyConfig(**limits), control_period_s=0.1)


def test_an_arm_state_built_the_old_way_has_no_wrench_and_passes_the_contact_check():
    safety = layer()
    state = ArmState(0.0, state_at([0.4, 0, 0.3]).q, np.zeros(7), Pose((0.4, 0, 0.3), (1, 0, 0, 0.0)), 0.04)
    assert state.external_wrench is None
    safety.check_state(state)
    assert safety.arm.stops == 0


@pytest.mark.parametrize(
    "wrench, what",
    [([0, 0, 41.0, 0, 0, 0], "41.0 N"), ([0, 0, 0, 6.0, 6.0, 0], "8.49 Nm"), ([np.nan, 0, 0, 0, 0, 0], "nan N")],
)
def test_a_wrench_over_either_bound_stops_the_arm_with_a_contact_fault(wrench, what):
    safety = layer(max_contact_force_n=40.0, max_contact_torque_nm=8.0)
    with pytest.raises(RobotFault, match=what) as caught:
        safety.check_state(state_at([0.4, 0, 0.3], np.array(wrench)))
    assert caught.value.kind == "contact" and safety.arm.stops == 1


def test_a_wrench_within_the_bounds_passes():
    safety = layer(max_contact_force_n=40.0, max_contact_torque_nm=8.0)
    safety.check_state(state_at([0.4, 0, 0.3], np.array([20.0, 20.0, 20.0, 4.0, 4.0, 4.0])))  # 34.6 N, 6.9 Nm
    assert safety.arm.stops == 0


def test_steps_inside_the_contact_zone_or_into_it_are_capped_at_the_zone_speed():
    safety = layer(contact_zone_speed_mps=0.02, max_step_m=0.03)  # zone: 2 mm per 0.1 s step
    safety.set_contact_zone(np.array([0.5, 0.0, 0.1]), 0.05)
    inside = safety.clip_target(np.array([0.5, 0.0, 0.0]), np.array([0.5, 0.0, 0.12]))
    assert inside.step_clipped and inside.target == pytest.approx([0.5, 0.0, 0.118])
    entering = safety.clip_target(np.array([0.5, 0.0, 0.14]), np.array([0.5, 0.0, 0.16]))
    assert entering.target == pytest.approx([0.5, 0.0, 0.158])  # the target is in the zone: slow
    outside = safety.clip_target(np.array([0.3, 0.0, 0.3]), np.array([0.3, 0.0, 0.4]))
    assert outside.target == pytest.approx([0.3, 0.0, 0.37])  # elsewhere: the ordinary 3 cm cap
    safety.set_contact_zone(None)
    assert safety.clip_target(np.array([0.5, 0.0, 0.0]), np.array([0.5, 0.0, 0.12])).target == pytest.approx(
        [0.5, 0.0, 0.1]
    )


def test_the_mock_arm_reports_an_injected_wrench_and_zeros_by_default(mock_env):
    env = mock_env()
    assert np.array_equal(env.arm.state().external_wrench, np.zeros(6))
    env.arm.set_external_wrench([1, 2, 3, 4, 5, 6])
    assert env.arm.state().external_wrench.tolist() == [1, 2, 3, 4, 5, 6]
    with pytest.raises(ValueError, match="6 numbers"):
        env.arm.set_external_wrench([1, 2, 3])


def test_an_injected_wrench_truncates_the_episode_with_fault_contact_and_the_next_reset_recovers(mock_env):
    env = mock_env(safety={"max_contact_force_n": 30.0})
    env.reset()
    env.step(np.zeros(3, np.float32))
    env.arm.set_external_wrench([0, 0, 35.0, 0, 0, 0])
    stops = env.arm.calls.get("stop", 0)
    _, _, terminated, truncated, info = env.step(np.array([0, 0, -1], np.float32)).gym()
    assert truncated and not terminated
    assert info["fault"] == "contact" and "35.0 N" in info["fault_message"]
    assert env.arm.calls["stop"] > stops  # stopped by the safety layer
    assert env.status()["last_fault"]["kind"] == "contact"
    env.arm.set_external_wrench(np.zeros(6))  # the obstacle is gone
    assert env.reset().notes[0].faults == ()
    env.step(np.zeros(3, np.float32))
    assert env.status()["strikes"] == 0


def test_insert_reset_paths_on_the_mock_move_in_slow_bounded_steps_and_end_at_the_start(tmp_path):
    from rlhw.robot import make_env
    from rlhw.robot.poses import RecordedPose, save_pose
    from tests.robot.conftest import make_config

    goal = tmp_path / "goal.json"
    save_pose(
        str(goal), RecordedPose("goal_pose", "mock", 0.0, Pose((0.45, 0.0, 0.25), (1.0, 0, 0, 0)), np.zeros(7), 0.02)
    )
    env = make_env(make_config({"task": "insert", "task_options": {"goal_pose": str(goal), "path_speed_mps": 0.1}}))
    try:
        obs, _ = env.reset(seed=0).gym()
        targets = np.array([m[1] for m in env.arm.motions if m[0] == "command_pose"])
        assert len(targets) > 10  # many small steps, no jump
        assert np.linalg.norm(np.diff(targets, axis=0), axis=1).max() <= 2 * 0.01 + 1e-9  # 0.1 m/s at 10 Hz
        assert targets[-1] == pytest.approx(env.task.start, abs=1e-9)
        assert np.linalg.norm(obs["to_goal"] + (env.task.start - env.task.goal.position)) < 0.003
    finally:
        env.close()


def test_an_approach_that_cannot_arrive_is_a_timeout_fault(mock_env):
    env = mock_env()
    env.reset()
    beyond = Pose((0.9, 0.0, 0.3), (1.0, 0.0, 0.0, 0.0))  # outside the workspace: clipped, never reached
    with pytest.raises(RobotFault, match="did not arrive") as caught:
        env.safety.approach(beyond, env.arm.state(), env.arm.state, env.arm.advance, speed_mps=0.3, timeout_s=2.0)
    assert caught.value.kind == "timeout"


def test_the_first_reset_leaves_the_hole_straight_up_at_the_contact_zone_speed(tmp_path):
    """record-pose leaves the arm AT the goal, in the hole: the very first reset must rise slowly."""
    from drivers.mock import HOME_EE
    from rlhw.robot import make_env
    from rlhw.robot.poses import RecordedPose, save_pose
    from tests.robot.conftest import make_config

    goal = tmp_path / "goal.json"  # the mock's hand starts at HOME_EE: put the goal there
    save_pose(str(goal), RecordedPose("goal_pose", "mock", 0.0, Pose(HOME_EE, (1.0, 0, 0, 0)), np.zeros(7), 0.02))
    env = make_env(make_config({"task": "insert", "task_options": {"goal_pose": str(goal)}}))
    try:
        env.reset(seed=0)
        first = next(m[1] for m in env.arm.motions if m[0] == "command_pose")
        assert first[:2] == pytest.approx(HOME_EE[:2])  # straight up
        assert first[2] - HOME_EE[2] == pytest.approx(env.safety.zone_step)  # 3 mm, not the 1 cm path step
    finally:
        env.close()
