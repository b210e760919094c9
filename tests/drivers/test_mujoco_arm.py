"""The simulated Franka (drivers.mujoco): model, Cartesian tracking, gripper, joint moves, faults, many arms."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

import drivers.mujoco  # noqa: F401  (chooses the GL backend before mujoco is imported)
from drivers.mujoco import MujocoArm, scene
from rlhw.errors import RobotFault
from rlhw.robot.arm import HOME_Q
from rlhw.robot.pose import Pose

pytestmark = pytest.mark.timeout(120)

#: TCP of the FR3 + Franka Hand at HOME_Q (forward kinematics of franky-sim's model).
HOME_TCP = np.array([0.3069, 0.0, 0.4869])
DOWN = np.array([1.0, 0.0, 0.0, 0.0])  # xyzw: gripper pointing at the table


def quat_angle(a: np.ndarray, b: np.ndarray) -> float:
    return 2 * np.arccos(min(1.0, abs(float(np.dot(a, b)))))


@pytest.fixture
def arm():
    a = MujocoArm(name="test")
    a.connect()
    yield a
    a.close()


def track(arm: MujocoArm, pose: Pose, seconds: float, period: float = 0.1) -> None:
    for _ in range(int(round(seconds / period))):
        arm.command_pose(pose)
        arm.advance(period)


def test_model_comes_from_the_installed_franky_sim_wheel_with_arm_hand_and_scene():
    import franky_sim

    assert scene.ARM_XML.startswith(os.path.dirname(franky_sim.__file__))
    assert os.path.isdir(scene.MESH_DIR)
    m = scene.scene_model()
    assert [m.joint(j).name for j in scene.ARM_JOINTS] == list(scene.ARM_JOINTS)
    assert m.actuator(scene.GRIPPER_ACTUATOR).id == 7 and m.nu == 8
    assert {m.camera(i).name for i in range(m.ncam)} == set(scene.CAMERA_NAMES)
    assert m.opt.timestep == pytest.approx(0.002)
    assert m.site("tcp").id >= 0 and m.body("target").mocapid[0] >= 0


def test_connect_starts_at_home_at_rest_with_gripper_open_and_no_errors(arm):
    before = time.time()
    st = arm.state()
    np.testing.assert_allclose(st.q, HOME_Q, atol=1e-9)
    np.testing.assert_allclose(st.dq, 0.0, atol=1e-9)
    np.testing.assert_allclose(st.ee_position, HOME_TCP, atol=1e-3)
    assert quat_angle(st.pose.quaternion, DOWN) < 1e-3
    assert st.gripper_width == pytest.approx(0.08)
    assert st.errors == ()
    assert arm.realtime is False
    assert abs(st.timestamp - before) < 5.0


def test_advance_steps_simulated_time_and_timestamps_are_the_wall_clock_when_it_got_there(arm):
    t0, s0 = arm.sim_time, arm.state().timestamp
    before = time.time()
    arm.advance(0.1)
    after = time.time()
    assert arm.sim_time - t0 == pytest.approx(0.1, abs=1e-9)
    assert s0 < before <= arm.state().timestamp <= after  # wall-clock, not connect time + sim time
    arm.advance(0.0)  # zero is allowed and does nothing
    assert arm.sim_time - t0 == pytest.approx(0.1, abs=1e-9)
    with pytest.raises(ValueError, match="dt"):
        arm.advance(float("nan"))


def test_nothing_moves_without_a_command(arm):
    q0 = arm.state().q
    arm.advance(2.0)
    np.testing.assert_allclose(arm.state().q, q0, atol=2e-3)


def test_cartesian_target_is_reached_within_5_mm_and_orientation_held(arm):
    target = Pose(HOME_TCP + [0.12, 0.10, -0.20], DOWN)
    track(arm, target, seconds=1.5)
    st = arm.state()
    assert np.linalg.norm(st.ee_position - target.position) < 0.005
    assert quat_angle(st.pose.quaternion, DOWN) < 0.02
    assert st.errors == ()


def test_cartesian_target_with_a_rotated_hand_is_reached(arm):
    # 30 degrees of yaw about the base z axis, composed with pointing down.
    yaw = np.deg2rad(30)
    rotated = np.array([np.cos(yaw / 2), np.sin(yaw / 2), 0.0, 0.0])  # xyzw of Rz(yaw) * Rx(pi)
    target = Pose([0.45, -0.05, 0.30], rotated)
    track(arm, target, seconds=2.0)
    st = arm.state()
    assert np.linalg.norm(st.ee_position - target.position) < 0.005
    assert quat_angle(st.pose.quaternion, rotated) < 0.03


def test_gripper_closes_opens_and_holds_an_intermediate_width(arm):
    arm.close_gripper()
    arm.advance(1.0)
    assert arm.state().gripper_width < 0.002
    arm.command_gripper(0.03)
    arm.advance(1.0)
    assert arm.state().gripper_width == pytest.approx(0.03, abs=0.002)
    arm.open_gripper()
    arm.advance(1.0)
    assert arm.state().gripper_width == pytest.approx(0.08, abs=0.002)


def test_move_joints_reaches_the_target_in_bounded_simulated_time(arm):
    goal = HOME_Q + np.array([0.3, 0.2, -0.2, 0.3, 0.2, -0.2, 0.3])
    t0 = arm.sim_time
    arm.move_joints(goal, speed_factor=0.5, timeout_s=10.0)
    np.testing.assert_allclose(arm.state().q, goal, atol=5e-3)
    assert arm.sim_time - t0 < 5.0


def test_move_joints_slower_speed_factor_takes_longer(arm):
    goal = HOME_Q + 0.3
    t0 = arm.sim_time
    arm.move_joints(goal, speed_factor=0.5)
    fast = arm.sim_time - t0
    t0 = arm.sim_time
    arm.move_joints(HOME_Q, speed_factor=0.1)
    slow = arm.sim_time - t0
    assert slow > 2 * fast


def test_move_joints_times_out_with_a_robot_fault_when_the_budget_is_too_short(arm):
    with pytest.raises(RobotFault) as e:
        arm.move_joints(HOME_Q + 0.5, speed_factor=0.1, timeout_s=0.2)
    assert e.value.kind == "timeout"
    assert arm.errors == ()  # a timeout is not an arm error: the next move may go on


def test_move_joints_refuses_a_target_outside_the_fr3_joint_limits(arm):
    bad = HOME_Q.copy()
    bad[3] = 0.5  # joint 4 range is [-3.04, -0.15]
    with pytest.raises(RobotFault, match=r"q\[3\]") as e:
        arm.move_joints(bad)
    assert e.value.kind == "limit"
    np.testing.assert_allclose(arm.state().q, HOME_Q, atol=1e-6)


def test_commands_with_nan_or_wrong_shape_are_rejected_before_anything_moves(arm):
    # A pose target cannot even be made bad: Pose refuses NaN, wrong lengths and zero quaternions.
    with pytest.raises(ValueError, match="pose position"):
        Pose.from_vector([0.4, 0.0, np.nan, 1, 0, 0, 0])
    with pytest.raises(ValueError, match="pose"):
        Pose.from_vector(np.zeros(3))
    with pytest.raises(ValueError, match="quaternion"):
        Pose.from_vector([0.4, 0.0, 0.3, 0, 0, 0, 0])
    with pytest.raises(ValueError, match="width"):
        arm.command_gripper(float("inf"))
    with pytest.raises(ValueError, match="q"):
        arm.move_joints(np.full(7, np.nan))
    arm.advance(0.5)
    np.testing.assert_allclose(arm.state().q, HOME_Q, atol=2e-3)


def test_stop_holds_the_pose_reached_so_far(arm):
    target = Pose(HOME_TCP + [0.15, 0.0, -0.2], DOWN)
    arm.command_pose(target)
    arm.advance(0.1)
    arm.stop()
    at_stop = arm.state().ee_position
    arm.advance(1.0)
    st = arm.state()
    assert np.linalg.norm(st.ee_position - at_stop) < 0.03  # braking distance of the servos
    assert np.linalg.norm(st.ee_position - target.position) > 0.1  # it did not go on to the target
    assert np.abs(st.dq).max() < 0.01
    arm.stop()  # stopping a stopped arm is fine


def test_pressing_into_the_table_latches_a_collision_reflex_until_recover(arm):
    below_table = Pose([0.45, 0.0, -0.10], DOWN)
    with pytest.raises(RobotFault, match="collision") as e:
        track(arm, below_table, seconds=5.0)
    assert e.value.kind == "reflex"
    assert "collision" in arm.state().errors
    with pytest.raises(RobotFault) as refused:
        arm.command_pose(Pose([0.45, 0.0, 0.3], DOWN))
    assert refused.value.kind == "reflex"
    with pytest.raises(RobotFault):
        arm.move_joints(HOME_Q)
    arm.advance(0.5)  # stopped: holds where the reflex caught it, no new fault
    assert arm.recover() is True
    assert arm.state().errors == ()
    arm.move_joints(HOME_Q, speed_factor=0.3)
    np.testing.assert_allclose(arm.state().q, HOME_Q, atol=5e-3)


def test_calls_before_connect_or_after_close_report_not_connected():
    a = MujocoArm()
    for call in (a.state, lambda: a.command_pose(Pose(HOME_TCP, DOWN)), lambda: a.advance(0.1)):
        with pytest.raises(RobotFault) as e:
            call()
        assert e.value.kind == "not_connected"
    a.stop()  # never raises
    a.connect()
    a.close()
    a.close()  # twice is fine
    with pytest.raises(RobotFault):
        a.state()


def test_many_arms_share_one_model_but_move_independently():
    arms = [MujocoArm(name=f"a{i}") for i in range(3)]
    for a in arms:
        a.connect()
    assert all(a.model is arms[0].model for a in arms)
    assert len({id(a.data) for a in arms}) == 3
    goals = [HOME_TCP + [0.1, 0.1, -0.1], HOME_TCP + [0.1, -0.1, -0.2], None]
    for _ in range(12):
        for a, g in zip(arms, goals):
            if g is not None:
                a.command_pose(Pose(g, DOWN))
            a.advance(0.1)
    for a, g in zip(arms, goals):
        pos = a.state().ee_position
        assert np.linalg.norm(pos - (HOME_TCP if g is None else g)) < 0.01
    # A cube scene is a different model; arms of equal options share theirs.
    c1, c2 = MujocoArm(cube=True), MujocoArm(cube=True)
    assert c1.model is c2.model and c1.model is not arms[0].model


def test_cube_is_a_sim_only_object_with_pose_accessors():
    plain = MujocoArm()
    plain.connect()
    assert plain.objects == ()
    with pytest.raises(ValueError, match="cube=True"):
        plain.object_pose("cube")
    a = MujocoArm(cube=True)
    a.connect()
    assert a.objects == ("cube",)
    a.set_object_pose("cube", Pose((0.5, 0.1, scene.CUBE_HALF_SIZE)))
    a.advance(0.5)
    pose = a.object_pose("cube")
    np.testing.assert_allclose(pose.position, [0.5, 0.1, scene.CUBE_HALF_SIZE], atol=2e-3)  # rests on the table
    assert pose.angle_to(Pose()) < 0.05  # upright: it settled flat
    a.set_target_marker(np.array([0.4, -0.1, 0.05]))
    np.testing.assert_allclose(a.data.mocap_pos[0], [0.4, -0.1, 0.05])


def test_constructor_rejects_bad_options_naming_the_field():
    with pytest.raises(ValueError, match="timestep"):
        MujocoArm(timestep=0.5)
    with pytest.raises(ValueError, match="home_q"):
        MujocoArm(home_q=(0.0, 1.0))
    with pytest.raises(ValueError, match="collision_force_n"):
        MujocoArm(collision_force_n=0)


def test_compiled_scene_is_cached_on_disk_and_reloads_identically(tmp_path, monkeypatch):
    monkeypatch.setenv("RLHW_MUJOCO_CACHE", str(tmp_path))
    options = scene.SceneOptions(timestep=0.001)  # a scene no other test built
    monkeypatch.setattr(scene, "_CACHE", {})
    built = scene.scene_model(options)
    files = list(tmp_path.glob("scene-*.mjb"))
    assert len(files) == 1
    monkeypatch.setattr(scene, "_CACHE", {})
    loaded = scene.scene_model(options)
    assert loaded is not built
    for field in ("nq", "nv", "nu", "nbody", "ngeom", "ncam", "nmesh", "nsite"):
        assert getattr(loaded, field) == getattr(built, field), field
    assert loaded.opt.timestep == pytest.approx(0.001)
    files[0].write_bytes(b"not a model")  # a corrupt cache file is rebuilt, not fatal
    monkeypatch.setattr(scene, "_CACHE", {})
    assert scene.scene_model(options).nq == built.nq


def test_tracking_an_unreachable_corner_stops_short_of_the_joint_limits(arm):
    # Close to the base and low: the elbow (joint 4) would have to fold past its limit.
    corner = Pose([0.22, 0.10, 0.12], DOWN)
    track(arm, corner, seconds=3.0)
    st = arm.state()
    margin_to_limit = np.minimum(st.q - arm.joint_low, arm.joint_high - st.q)
    assert margin_to_limit.min() > 0.05  # outside the safety layer's default margin: no "limit" fault
    assert st.errors == ()


def test_an_out_of_reach_target_is_approached_as_far_as_possible_without_diving(arm):
    # The safety workspace's far upper corner is beyond reach with the hand pointing down: joints
    # saturate. The arm must stop near the target, not swing the hand into the table.
    corner = np.array([0.70, -0.30, 0.60])
    for _ in range(60):
        here = arm.state().ee_position
        delta = corner - here
        step = here + delta * min(1.0, 0.03 / max(np.linalg.norm(delta), 1e-9))  # as the safety layer bounds it
        arm.command_pose(Pose(step, DOWN))
        arm.advance(0.1)
        assert arm.state().ee_position[2] > 0.3  # never heads for the table
    st = arm.state()
    assert st.errors == ()
    assert np.linalg.norm(st.ee_position - corner) < 0.15


def test_solve_ik_plans_a_posture_without_moving_the_arm(arm):
    goal = np.array([0.5, 0.1, 0.25])
    q = arm.solve_ik(Pose(goal, DOWN), arm.state().q)
    np.testing.assert_allclose(arm.state().q, HOME_Q, atol=1e-9)  # planning left the arm alone
    arm.move_joints(q, speed_factor=0.5)
    st = arm.state()
    assert np.linalg.norm(st.ee_position - goal) < 0.003
    assert quat_angle(st.pose.quaternion, DOWN) < 0.01
