"""`insert` and `rlhw record-pose` on the real franka driver path, against franky-sim.

franky-sim has no peg and no hole and measures no force (FIELD-NOTES), but everything pose-based is
real: the test moves the arm with franky itself, records the pose with `rlhw record-pose`, then runs
insert's reset (out of the "hole", home, over the goal, down to the start) and a few expert steps.
"""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from drivers.teleop.scripted import expert_action
from rlhw.cli.main import main
from rlhw.config import load_config
from rlhw.robot import make_env
from rlhw.robot.poses import load_pose

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ENTRY = "cluster.node_groups.0.hardware.configs.0"


MOVE_WITH_FRANKY = """
import json, sys
import franky
robot = franky.Robot(sys.argv[1], realtime_config=franky.RealtimeConfig.Ignore)
robot.relative_dynamics_factor = 0.2
quat = robot.current_cartesian_state.pose.end_effector_pose.quaternion
robot.move(franky.CartesianMotion(franky.Affine(json.loads(sys.argv[2]), quat)))
pose = robot.current_cartesian_state.pose.end_effector_pose
print(json.dumps(list(pose.translation) + list(pose.quaternion)))
"""


def move_with_franky(host: str, position) -> np.ndarray:
    """Move the simulated arm's hand to ``position`` (orientation kept) with franky, as an operator
    would by hand-guiding; returns franky's own reading of the pose (x, y, z, qx, qy, qz, qw).

    franky runs in a process of its own: libfranka's Robot switches the thread that creates it to
    SCHED_FIFO 99 (root or CAP_SYS_NICE, as on CI), and in pytest's main thread every process the
    suite starts afterwards would inherit that priority.
    """
    r = subprocess.run(
        [sys.executable, "-c", MOVE_WITH_FRANKY, host, json.dumps([float(v) for v in position])],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return np.array(json.loads(r.stdout.strip().splitlines()[-1]))


def driver_pose(host: str):
    from drivers.franka import FrankaArm
    from rlhw.hardware.types.franka import FrankaController

    arm = FrankaArm(host, FrankaController(realtime="ignore"))
    arm.connect()
    try:
        return arm.state().pose
    finally:
        arm.close()


def test_record_pose_then_insert_against_franky_sim(tmp_path, capsys):
    from drivers.franky_sim import FrankySim

    out = tmp_path / "goal.json"
    with FrankySim() as sim:
        overrides = [
            f"{ENTRY}.robot_ip={sim.host}",
            f"{ENTRY}.controller.relative_dynamics_factor=1.0",
            "env.task=insert",
            f"env.task_options.goal_pose={out}",
            "env.reset.timeout_s=40",
            # quicker reset paths (real time): faster moves, a lower approach height
            "env.task_options.path_speed_mps=0.25",
            "env.task_options.approach_height_m=0.07",
            "env.safety.contact_zone_speed_mps=0.05",
        ]
        move_with_franky(sim.host, [0.45, 0.05, 0.3])

        assert main(["record-pose", "configs/franky_sim.yaml", "goal_pose", "--now", *overrides]) == 0
        assert f"from franka@{sim.host}" in capsys.readouterr().err
        goal = load_pose(str(out), "goal_pose")
        # what the env's own driver reads there (its EE frame is the one the task compares against)
        now = driver_pose(sim.host)
        assert goal.pose.position == pytest.approx(now.position, abs=1e-3)
        assert abs(float(np.dot(goal.pose.quaternion, now.quaternion))) == pytest.approx(1.0, abs=1e-4)
        assert np.linalg.norm(goal.pose.position - [0.307, 0.0, 0.487]) > 0.1  # where franky moved it, not home

        env = make_env(load_config("configs/franky_sim.yaml", overrides))
        try:
            assert type(env.arm).__name__ == "FrankaArm"
            first = env.reset(seed=0)  # the hand starts AT the goal: it must rise first
            assert first.notes[0].faults == ()
            obs, _ = first.gym()
            offset = -obs["to_goal"]
            assert np.all(offset >= env.task.start_low - 0.005) and np.all(offset <= env.task.start_high + 0.005)
            assert np.array_equal(obs["external_wrench"], np.zeros(6))  # franky-sim measures no force
            assert env.arm.state().external_wrench.shape == (6,)
            start = np.linalg.norm(obs["to_goal"])
            for _ in range(10):
                obs, reward, terminated, truncated, info = env.step(expert_action(env.operator_view)).gym()
                assert info["fault"] is None, info["fault_message"]
                if terminated or truncated:  # franky-sim has no hole: the expert may arrive within 10 steps
                    assert terminated and info["success"] and reward == 1.0
                    break
            assert np.linalg.norm(obs["to_goal"]) < start - 0.005  # on its way down to the goal, or there
        finally:
            env.close()
