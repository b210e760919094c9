"""Write configs/poses/sim_insert_goal.json: the goal of configs/sim_insert.yaml, recorded in MuJoCo.

On a real cell the operator guides the arm into the hole and runs `rlhw record-pose`; in MuJoCo the
hole block goes wherever the goal is (scene.py), so this script puts the hand where the block then
stands on the table (TCP at x=0.5, y=0, z=0.07 with the home orientation: the peg's tip 2 cm deep in
a 4 cm hole) by a planned joint move, and records it with the same code as `rlhw record-pose`.

    PYTHONPATH=. python tools/sim_insert_goal.py [OUT]
"""

from __future__ import annotations

import sys

import numpy as np

from drivers.mujoco import MujocoArm
from rlhw.robot.poses import RecordedPose, save_pose

GOAL_XYZ = (0.5, 0.0, 0.07)


def main(out: str = "configs/poses/sim_insert_goal.json") -> None:
    arm = MujocoArm(name="mujoco-sim0", peg=True)
    arm.connect()
    home = arm.state()
    q = arm.solve_ik(home.pose.with_position(GOAL_XYZ), home.q, iterations=100)
    arm.move_joints(q, speed_factor=0.5)
    state = arm.state()
    assert np.linalg.norm(state.ee_position - GOAL_XYZ) < 5e-3, state.ee_position  # servo steady state: a few mm
    save_pose(out, RecordedPose.from_state("goal_pose", arm.name, state))
    print(f"saved {out}: ee_pose {np.round(state.ee_pose, 5).tolist()}")


if __name__ == "__main__":
    main(*sys.argv[1:])
