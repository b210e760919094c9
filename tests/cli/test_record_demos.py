"""`rlhw record-demos`: the scripted expert drives, episodes land on disk as demo episodes, replay reproduces."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rlhw.cli.main import main
from rlhw.rl.episodes import episode_files, load_episode

ROOT = Path(__file__).resolve().parents[2]
SIM_REACH = str(ROOT / "configs" / "sim_reach.yaml")
FAST = ["env.max_episode_steps=25", "env.teleop.hesitation=0.0"]


def test_record_demos_on_mujoco_writes_labelled_demo_episodes_of_the_executed_actions_and_replay_reproduces(
    tmp_path, capsys
):
    out = tmp_path / "demos"
    assert (
        main(
            [
                "record-demos",
                SIM_REACH,
                "--episodes",
                "2",
                "--teleop",
                "scripted",
                "--out",
                str(out),
                "--no-live",
                *FAST,
            ]
        )
        == 0
    )
    files = episode_files(out, "demo")
    assert [f.name for f in files] == ["demo-000000.npz", "demo-000001.npz"]
    for index, path in enumerate(files):
        ep = load_episode(path)
        meta = ep.meta
        assert meta["kind"] == "demo" and meta["complete"] and meta["seed"] == index and meta["teleop"] == "scripted"
        assert ep.intervened.all()  # the operator drove every step
        assert np.abs(ep.action).max() > 0.5  # the executed actions, not the zeros the CLI sent as "client"
        assert ep.success[-1] and ep.terminated[-1]  # reach ends on success
    assert "2 success(es)" in capsys.readouterr().out
    for path in files:  # the stored actions, re-executed from the seed, end where the demo ended
        assert main(["record-demos", SIM_REACH, "--replay", str(path), *FAST]) == 0
        assert "reproduced" in capsys.readouterr().out


def test_record_demos_appends_after_existing_episodes(tmp_path):
    out = tmp_path / "demos"
    for _ in range(2):
        assert (
            main(
                [
                    "record-demos",
                    SIM_REACH,
                    "--episodes",
                    "1",
                    "--teleop",
                    "scripted",
                    "--out",
                    str(out),
                    "--no-live",
                    *FAST,
                ]
            )
            == 0
        )
    assert [f.name for f in episode_files(out, "demo")] == ["demo-000000.npz", "demo-000001.npz"]


def test_a_replay_that_does_not_reproduce_exits_1(tmp_path, capsys):
    out = tmp_path / "demos"
    assert (
        main(
            [
                "record-demos",
                SIM_REACH,
                "--episodes",
                "1",
                "--teleop",
                "scripted",
                "--out",
                str(out),
                "--no-live",
                *FAST,
            ]
        )
        == 0
    )
    path = episode_files(out, "demo")[0]
    # a different seed: another target, so the same actions end elsewhere
    assert main(["record-demos", SIM_REACH, "--replay", str(path), *FAST, "env.reach.target_low=[0.32,0.1,0.2]"]) == 1
    assert "NOT reproduced" in capsys.readouterr().out


def test_record_demos_without_an_operator_is_a_one_line_error_with_exit_2(tmp_path, capsys):
    assert main(["record-demos", SIM_REACH, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--teleop" in err


def test_bad_flags_exit_2_naming_the_flag(tmp_path, capsys):
    with pytest.raises(SystemExit) as e:
        main(["record-demos", SIM_REACH, "--episodes", "0"])
    assert e.value.code == 2 and "--episodes must be >= 1" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:
        main(["record-demos", SIM_REACH, "--teleop", "joystick"])
    assert e.value.code == 2 and "invalid choice: 'joystick'" in capsys.readouterr().err
    assert main(["record-demos", SIM_REACH, "--replay", str(tmp_path / "nope.npz")]) == 2
    assert "--replay" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_record_demos_on_the_franka_driver_against_franky_sim(tmp_path, capsys):
    from drivers.franky_sim import FrankySim

    out = tmp_path / "demos"
    with FrankySim() as sim:
        entry = "cluster.node_groups.0.hardware.configs.0"
        code = main(
            [
                "record-demos",
                str(ROOT / "configs" / "franky_sim.yaml"),
                "--episodes",
                "2",
                "--teleop",
                "scripted",
                "--out",
                str(out),
                "--no-live",
                f"{entry}.robot_ip={sim.host}",
                f"{entry}.controller.relative_dynamics_factor=1.0",
                "env.reset.timeout_s=40",
                "env.max_episode_steps=6",
                "env.teleop.hesitation=0.0",
            ]
        )
    assert code == 0, capsys.readouterr().err
    files = episode_files(out, "demo")
    assert len(files) == 2
    for path in files:
        ep = load_episode(path)
        assert ep.length >= 1 and ep.intervened.all()
        start, end = ep.obs["to_target"][0], ep.obs["to_target"][-1]
        assert np.linalg.norm(end) < np.linalg.norm(start)  # the expert drove the real driver toward the target
        assert ep.meta["robot"].startswith("franka@")


def test_a_person_records_a_demo_at_the_keyboard_of_a_paced_simulated_arm_a_motion_then_a_success_label(tmp_path):
    """The README's rehearsal at a laptop, in a pseudo-terminal: the simulated arm steps at env.control_hz, so
    the episode is still running when the person types; without pacing it would be over before the first key."""
    import os
    import subprocess
    import sys
    import time

    from tests.waiting import wait_until

    out = tmp_path / "demos"
    running = out / "demo-000000.steps"
    master, slave = os.openpty()
    cmd = [
        sys.executable,
        "-m",
        "rlhw.cli.main",
        "record-demos",
        SIM_REACH,
        "--teleop",
        "keyboard",
        "--episodes",
        "1",
        "--out",
        str(out),
        "--no-live",
        "env.control_hz=20",
        "env.max_episode_steps=400",
    ]  # 20 s at most
    proc = subprocess.Popen(
        cmd,
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    try:

        def grows(times: int):  # the episode file took `times` more steps: the arm is stepping, paced
            sizes = [running.stat().st_size if running.exists() else 0]
            return lambda: (
                running.exists()
                and running.stat().st_size != sizes[-1]
                and sizes.append(running.stat().st_size) is None
                and len(sizes) > times
            )

        assert wait_until(lambda: running.exists(), timeout_s=60, period_s=0.005), "record-demos never started"
        started = time.monotonic()  # the episode's reset: its steps follow at 20 Hz
        os.write(master, b"w")  # hand +x, for keyboard_hold_s after the press
        assert wait_until(grows(2), timeout_s=10, period_s=0.005)
        os.write(master, b"y")  # success: ends the episode
        assert wait_until(lambda: episode_files(out, "demo") and not running.exists(), timeout_s=30, period_s=0.005)
        elapsed = time.monotonic() - started
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
        os.close(master)
        os.close(slave)
    assert proc.returncode == 0, stderr.decode()[-2000:]
    assert "1 success(es)" in stdout.decode()
    [path] = episode_files(out, "demo")
    ep = load_episode(path)
    assert ep.action[:, 0].max() == pytest.approx(1.0)  # the "w" was executed...
    assert ep.intervened.all() and ep.terminated[-1] and ep.success[-1]  # ...and "y" ended it
    assert ep.length < 400
    # Paced: never faster than env.control_hz (a late step only slows it); unpaced, this arm ran ~150 steps/s.
    assert ep.length / elapsed <= 20 * 1.1, (ep.length, elapsed)
