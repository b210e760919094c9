"""How MujocoArm steps physics: split mj_step1/mj_step2 stepping is the same physics as one
mj_step call, states report the new state's kinematics, and fault checks read consistent forces."""

from __future__ import annotations

import mujoco
import numpy as np
import pytest

import drivers.mujoco  # noqa: F401  (chooses the GL backend before mujoco is imported)
from drivers.mujoco import MujocoArm
from rlhw.robot.pose import Pose

pytestmark = pytest.mark.timeout(120)

DOWN = np.array([1.0, 0.0, 0.0, 0.0])  # xyzw: gripper pointing at the table


def fresh_copy(arm: MujocoArm) -> mujoco.MjData:
    d = mujoco.MjData(arm.model)
    for field in ("qpos", "qvel", "act", "ctrl", "qacc_warmstart", "mocap_pos", "mocap_quat"):
        getattr(d, field)[:] = getattr(arm.data, field)
    d.time = arm.data.time
    return d


@pytest.mark.parametrize("cube", [False, True])
def test_advance_is_bit_for_bit_the_physics_of_one_mj_step_call_per_control_step(cube):
    arm = MujocoArm(cube=cube)
    arm.connect()
    if cube:
        arm.set_object_pose("cube", Pose((0.5, 0.0, 0.03)))
    bare = fresh_copy(arm)
    mujoco.mj_forward(arm.model, bare)
    rng = np.random.default_rng(0)
    start = arm.state().pose
    nstep = int(round(0.1 / arm.model.opt.timestep))
    for i in range(40):
        arm.command_pose(start.with_position(start.position + rng.uniform(-0.08, 0.08, size=3)))
        if i == 20:
            arm.command_gripper(0.02)
        bare.ctrl[:] = arm.data.ctrl
        arm.advance(0.1)
        mujoco.mj_step(arm.model, bare, nstep)
    np.testing.assert_array_equal(arm.data.qpos, bare.qpos)
    np.testing.assert_array_equal(arm.data.qvel, bare.qvel)
    assert arm.data.time == bare.time


def test_state_after_advance_reports_the_kinematics_of_the_new_state():
    arm = MujocoArm()
    arm.connect()
    home = arm.state().pose
    pose = home.with_position(home.position + [0.05, -0.05, -0.05])
    for _ in range(5):
        arm.command_pose(pose)
        arm.advance(0.1)
        state = arm.state()
        check = fresh_copy(arm)
        mujoco.mj_kinematics(arm.model, check)
        np.testing.assert_array_equal(state.pose.position, check.site_xpos[arm.layout.tcp])
        quat = np.zeros(4)
        mujoco.mju_mat2Quat(quat, check.site_xmat[arm.layout.tcp])
        np.testing.assert_array_equal(state.pose.quaternion, [*quat[1:], quat[0]])  # MuJoCo's w-first, flipped once
        np.testing.assert_array_equal(state.q, check.qpos[:7])


def test_recover_right_after_a_step_judges_a_table_contact_on_its_real_force():
    # Pressed into the table with a threshold too high to trip: no fault, the step ends normally
    # (its next substep already half computed). Then, with a threshold below the pressing force
    # (measured on a fresh forward pass), recover() must see that force and refuse to clear.
    arm = MujocoArm(collision_force_n=1e9)
    arm.connect()
    below_table = Pose([0.45, 0.0, -0.10], DOWN)
    for _ in range(30):
        arm.command_pose(below_table)
        arm.advance(0.1)
    check = fresh_copy(arm)
    mujoco.mj_forward(arm.model, check)
    force, strongest = np.zeros(6), 0.0
    for i in range(check.ncon):
        mujoco.mj_contactForce(arm.model, check, i, force)
        strongest = max(strongest, abs(force[0]))
    assert strongest > 5.0, "the arm should press on the table"
    arm.collision_force_n = strongest / 2
    assert arm.recover() is False and "collision" in arm.errors
    arm.collision_force_n = strongest * 2  # the same contact, judged against a higher threshold
    assert arm.recover() is True
