"""The mock drivers: deterministic, simulated-time tracking, and every injectable fault."""

from __future__ import annotations

import time

import numpy as np
import pytest

from drivers.mock import HOME_EE, MockArm, MockCamera
from rlhw.errors import RobotFault
from rlhw.robot.pose import Pose
from tests.waiting import wait_until


def connected(**kw) -> MockArm:
    arm = MockArm(**kw)
    arm.connect()
    return arm


def test_the_arm_tracks_a_target_in_simulated_time_only():
    arm = connected()
    target = HOME_EE + np.array([0.05, -0.05, -0.05])
    arm.command_pose(Pose(target, (1, 0, 0, 0)))
    time.sleep(0.05)  # wall time passing is the point: it must move nothing
    assert np.allclose(arm.state().ee_position, HOME_EE)
    arm.advance(0.5)
    assert np.linalg.norm(arm.state().ee_position - target) < 1e-3
    assert arm.sim_time == pytest.approx(0.5)


def test_two_arms_with_the_same_seed_produce_the_same_states():
    a, b = connected(seed=7, state_noise_m=0.001), connected(seed=7, state_noise_m=0.001)
    for arm in (a, b):
        arm.command_pose(Pose((0.4, 0.1, 0.3), (1, 0, 0, 0)))
        arm.advance(0.1)
    assert a.state().pose == b.state().pose


def test_calls_before_connect_are_not_connected_faults():
    with pytest.raises(RobotFault) as err:
        MockArm().state()
    assert err.value.kind == "not_connected"


def test_reflex_leaves_the_arm_in_error_until_recover():
    arm = connected(faults=[{"kind": "reflex", "after": 1}])
    arm.command_pose(Pose((0.4, 0, 0.3), (1, 0, 0, 0)))
    with pytest.raises(RobotFault) as err:
        arm.command_pose(Pose((0.4, 0, 0.3), (1, 0, 0, 0)))
    assert err.value.kind == "reflex" and arm.state().errors == ("cartesian_reflex",)
    with pytest.raises(RobotFault, match="call recover"):
        arm.command_gripper(0.0)
    assert arm.recover() is True and arm.state().errors == ()


@pytest.mark.timeout(10)
def test_hang_blocks_for_the_driver_timeout_then_raises():
    arm = connected(timeout_s=0.15)
    arm.inject("hang")
    t0 = time.monotonic()
    with pytest.raises(RobotFault) as err:
        arm.command_pose(Pose((0.4, 0, 0.3), (1, 0, 0, 0)))
    assert err.value.kind == "hang" and 0.14 <= time.monotonic() - t0 < 0.15 + 5.0  # then raised, with room for load


def test_network_and_timeout_faults_hit_state_reads():
    arm = connected(timeout_s=0.01, faults=[{"kind": "network"}, {"kind": "timeout", "after": 1}])
    kinds = []
    for _ in range(3):
        try:
            arm.state()
            kinds.append(None)
        except RobotFault as e:
            kinds.append(e.kind)
    # call 0: network fires (timeout's window starts at its 2nd call), call 1: timeout, call 2: fine
    assert kinds == ["network", "timeout", None]


def test_recover_fail_keeps_the_errors():
    arm = connected(faults=[{"kind": "reflex"}, {"kind": "recover_fail", "count": 2}])
    with pytest.raises(RobotFault):
        arm.command_pose(Pose((0.4, 0, 0.3), (1, 0, 0, 0)))
    assert arm.recover() is False and arm.recover() is False
    assert arm.recover() is True


def test_move_joints_respects_its_timeout_in_simulated_time():
    arm = connected()
    far = np.array(arm.home_q) + 1.0
    with pytest.raises(RobotFault) as err:
        arm.move_joints(far, speed_factor=0.01, timeout_s=1.0)
    assert err.value.kind == "timeout"
    arm.move_joints(far, speed_factor=0.2, timeout_s=10.0)
    assert np.allclose(arm.state().q, far)


def test_camera_frames_have_increasing_indices_timestamps_and_follow_the_hand():
    arm = connected()
    cam = MockCamera(serial="front", arm=arm, width=64, height=48)
    cam.open()
    f1 = cam.latest()
    arm.command_pose(Pose((0.6, 0.2, 0.3), (1, 0, 0, 0)))
    arm.advance(1.0)
    f2 = cam.latest()
    assert f1.color.shape == (48, 64, 3) and f1.color.dtype == np.uint8
    assert f2.index == f1.index + 1 and f2.timestamp >= f1.timestamp
    assert not np.array_equal(f1.color, f2.color)
    assert cam.intrinsics.width == 64 and cam.fps == 30.0


def test_camera_stall_and_dropped_frames():
    cam = MockCamera(
        faults=[{"kind": "camera_stall", "after": 1}, {"kind": "drop_frames", "after": 3, "count": 2}], timeout_s=0.01
    )
    cam.open()
    a = cam.latest(max_age_s=0.5)
    with pytest.raises(RobotFault) as err:
        cam.latest(max_age_s=0.5)
    assert err.value.kind == "camera_stall"
    b = cam.latest(max_age_s=0.5)
    c = cam.latest(max_age_s=0.5)  # drop window starts at call 3
    d = cam.latest(max_age_s=0.5)
    assert b.index == a.index + 1 and c.index == b.index + 2 and d.index == c.index + 2
    cam.inject("camera_stall", on="wait_frame")
    with pytest.raises(RobotFault):
        cam.wait_frame(timeout_s=0.01)


def test_a_realtime_mock_moves_on_the_wall_clock_and_refuses_advance():
    arm = connected(realtime=True, tau_s=0.01)
    arm.command_pose(Pose((0.4, 0.05, 0.4), (1, 0, 0, 0)))
    assert wait_until(lambda: np.linalg.norm(arm.state().ee_position - [0.4, 0.05, 0.4]) < 2e-3, timeout_s=5)
    with pytest.raises(NotImplementedError):
        arm.advance(0.1)
