"""`rlhw record-pose CONFIG NAME`: saves the live hand pose as a task's goal, moves nothing, and
refuses bad input with one line and exit 2. (Against franky-sim: tests/drivers/test_insert_franky_sim.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlhw.cli.main import main
from rlhw.robot.poses import load_pose

pytestmark = pytest.mark.timeout(120)

ROOT = Path(__file__).resolve().parents[2]
SIM_INSERT = str(ROOT / "configs" / "sim_insert.yaml")
SIM_REACH = str(ROOT / "configs" / "sim_reach.yaml")


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err
    return err


def test_on_mujoco_it_records_where_the_hand_is_to_the_file_the_config_names(tmp_path, capsys):
    out = tmp_path / "poses" / "goal.json"
    assert main(["record-pose", SIM_INSERT, "goal_pose", "--now", f"env.task_options.goal_pose={out}"]) == 0
    pose = load_pose(str(out), "goal_pose")
    from drivers.mujoco import MujocoArm

    arm = MujocoArm(peg=True)  # a fresh sim arm stands at home: nothing was moved
    arm.connect()
    home = arm.state()
    assert pose.pose.isclose(home.pose, 1e-12, 1e-9) and pose.q == pytest.approx(home.q)
    assert pose.name == "goal_pose" and pose.robot == "mujoco-sim0" and pose.gripper_width == pytest.approx(0.02)
    saved = json.loads(out.read_text())
    assert saved["frame"] == "base" and saved["time_iso"]
    assert f"saved 'goal_pose' from mujoco-sim0 to {out}" in capsys.readouterr().err


def test_out_overrides_the_configured_file(tmp_path):
    out = tmp_path / "elsewhere.json"
    assert main(["record-pose", SIM_INSERT, "goal_pose", "--now", "--out", str(out)]) == 0
    assert load_pose(str(out), "goal_pose").pose.vector.shape == (7,)


def test_without_a_terminal_and_without_now_it_says_to_pass_now(tmp_path, capsys):
    # pytest's stdin is not a terminal
    assert main(["record-pose", SIM_INSERT, "goal_pose", "--out", str(tmp_path / "g.json")]) == 2
    assert "pass --now" in one_line_error(capsys)
    assert not (tmp_path / "g.json").exists()


def test_an_unwritable_path_is_refused_before_connecting(tmp_path, capsys):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    assert main(["record-pose", SIM_INSERT, "goal_pose", "--now", "--out", str(blocker / "goal.json")]) == 2
    assert "cannot write the pose file" in one_line_error(capsys)


def test_a_name_the_task_does_not_know_lists_the_known_ones(capsys):
    assert main(["record-pose", SIM_INSERT, "start_pose", "--now"]) == 2
    assert "task 'insert' has no pose option 'start_pose'; known: goal_pose" in one_line_error(capsys)
    assert main(["record-pose", SIM_REACH, "goal_pose", "--now"]) == 2
    assert "task 'reach' has no pose option 'goal_pose'; known: (none)" in one_line_error(capsys)


def test_a_name_that_is_not_a_word_is_refused(tmp_path, capsys):
    assert main(["record-pose", SIM_INSERT, "../goal", "--now", "--out", str(tmp_path / "g.json")]) == 2
    assert "must be a word" in one_line_error(capsys)


def test_the_recorded_pose_is_accepted_by_the_insert_task(tmp_path):
    out = tmp_path / "goal.json"
    assert main(["record-pose", SIM_INSERT, "goal_pose", "--now", "--out", str(out)]) == 0
    from rlhw.config import load_config
    from rlhw.robot.task_registry import make_task

    config = load_config(SIM_INSERT, [f"env.task_options.goal_pose={out}", "env.safety.workspace_high=[0.7,0.3,0.65]"])
    task = make_task("insert", config.env, config.env.task_options)
    assert task.goal == load_pose(str(out), "goal_pose").pose


def test_at_a_terminal_it_shows_the_live_pose_and_records_on_enter(tmp_path):
    import os
    import pty
    import subprocess
    import sys

    out = tmp_path / "goal.json"
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rlhw.cli.main",
            "record-pose",
            SIM_INSERT,
            "goal_pose",
            "--out",
            str(out),
            "env.sim=mock",
        ],  # the mock arm: no model to load in the child
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    os.close(slave)
    try:
        shown = b""
        while b"hand at x=" not in shown:  # the live pose is on screen: the arm is connected
            chunk = proc.stderr.read1(4096)
            assert chunk, f"record-pose ended early: {shown!r}"
            shown += chunk
        assert b"press Enter" in shown and not out.exists()
        os.write(master, b"\n")
        assert proc.wait(timeout=60) == 0
    finally:
        proc.kill()
        os.close(master)
    assert load_pose(str(out), "goal_pose").name == "goal_pose"
