"""A long sim-only run with the mock arm does not grow: the arm keeps a bounded window of recent motion
commands (what tests read) and a count of all of them, not every command of the run."""

from __future__ import annotations

import tracemalloc

import numpy as np

from drivers.mock import MockArm
from rlhw.robot.arm import HOME_Q
from rlhw.robot.pose import Pose


def _drive(arm: MockArm, steps: int) -> None:
    for i in range(steps):
        arm.command_pose(Pose(np.array([0.4, 0.0, 0.3]) + 1e-4 * (i % 7), (1.0, 0.0, 0.0, 0.0)))
        if i % 10 == 0:
            arm.command_gripper(0.04)


def test_the_mock_keeps_the_most_recent_motions_and_counts_them_all():
    arm = MockArm(keep_motions=50)
    arm.connect()
    _drive(arm, 300)
    arm.move_joints(np.asarray(HOME_Q), speed_factor=0.2)
    assert arm.motion_count == 300 + 30 + 1
    assert len(arm.motions) == 50
    assert arm.motions[-1][0] == "move_joints" and arm.motions[-2][0] == "command_pose"


def test_the_mock_memory_stays_flat_over_a_long_run():
    arm = MockArm()  # the default window, as a sim-only server uses it
    arm.connect()
    tracemalloc.start()
    try:
        _drive(arm, 2 * arm.motions.maxlen)  # fill the window first (traced, so its turnover nets out)
        before, _ = tracemalloc.get_traced_memory()
        _drive(arm, 20 * arm.motions.maxlen)  # ~90,000 commands: unbounded, that kept ~15 MiB more
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert arm.motion_count > 20 * arm.motions.maxlen
    assert after - before < 64 * 1024, f"grew by {after - before} bytes"
