"""`rlhw train` on the command line: user errors are one line and exit 2; a tiny local run works."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.placed_arm import placed_arm_file

ROOT = Path(__file__).resolve().parents[2]


def rlhw(*args, timeout=240):
    return subprocess.run(
        [sys.executable, "-m", "rlhw.cli.main", "train", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.timeout(60)
def test_resume_without_a_run_dir_is_a_one_line_error():
    r = rlhw("--resume")
    assert r.returncode == 2
    assert "--resume" in r.stderr and "--run-dir" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.timeout(60)
def test_a_bad_train_value_names_the_field():
    r = rlhw("train.mode=fast")
    assert r.returncode == 2 and "train.mode" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.timeout(60)
def test_resume_of_a_directory_that_is_not_a_run_says_so(tmp_path):
    r = rlhw("--run-dir", str(tmp_path), "--resume")
    assert r.returncode == 2 and "not a run directory" in r.stderr


@pytest.mark.timeout(240)
def test_a_short_local_run_on_the_default_config_writes_its_run_directory(tmp_path):
    run = tmp_path / "run"
    r = rlhw(
        "train.runner=local",
        "train.max_env_steps=60",
        "train.learning_starts=30",
        "train.eval_every_steps=60",
        "train.eval_episodes=1",
        "train.progress=false",
        "env.max_episode_steps=20",
        "train.sac.hidden_sizes=[16,16]",
        "train.sac.batch_size=16",
        "--run-dir",
        str(run),
    )
    assert r.returncode == 0, r.stderr[-2000:]
    status = json.loads((run / "run.json").read_text())
    assert status["status"] == "stopped" and status["env_steps"] >= 60
    assert status["loop_isolation"]["learner_threads"] == 1  # rlhw.cli.trainer's default; no env_configs here
    assert status["loop_isolation"]["affinity"] and status["loop_isolation"]["policy"] == "SCHED_OTHER"
    assert (run / "config.yaml").exists() and (run / "learning_curve.png").exists()
    assert "run directory" in r.stderr
    # a run's episodes may be a later run's demos: each records the env config it was recorded with
    from rlhw.config import load_config
    from rlhw.rl.demos import PROVENANCE_KEY, recorded_env
    from rlhw.rl.episodes import episode_files, load_episode

    episode = load_episode(episode_files(run / "episodes", "train")[0])
    assert episode.meta[PROVENANCE_KEY] == recorded_env(load_config(run / "config.yaml").env)


SMALL = (
    "train.sac.hidden_sizes=[16,16]",
    "train.sac.batch_size=16",
    "train.progress=false",
    "train.log_every_steps=50",
    "train.max_env_steps=1000000",
)


#: `rlhw` as a terminal's foreground job gets it: SIGINT raises KeyboardInterrupt. A suite started in the
#: background by a non-interactive shell (`pytest ... &`, nohup) starts with SIGINT ignored, its children
#: inherit that, and Python honours it: Ctrl-C would do nothing, as the shell intends for background jobs.
WITH_CTRL_C = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv[0] = 'rlhw'; runpy.run_module('rlhw.cli.main', run_name='__main__', alter_sys=True)"
)


def ctrl_c_after_first_log(run: Path, *args) -> tuple[int, str]:
    """Start `rlhw train`, wait for its first metrics row, then Ctrl-C it the way a terminal does
    (SIGINT to the whole process group, Ray's processes included); returns (exit code, stderr)."""
    return signal_after_first_log(run, lambda pid: os.killpg(pid, signal.SIGINT), *args)


def sigterm_after_first_log(run: Path, *args) -> tuple[int, str]:
    """As `ctrl_c_after_first_log`, but SIGTERM to `rlhw train`'s own process only, as `kill PID` and a
    service manager that signals the main process (systemd's KillMode=mixed) do."""
    return signal_after_first_log(run, lambda pid: os.kill(pid, signal.SIGTERM), *args)


def signal_after_first_log(run: Path, send, *args) -> tuple[int, str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", WITH_CTRL_C, "train", *args, "--run-dir", str(run)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 150
        metrics = run / "metrics.jsonl"
        while not (metrics.exists() and metrics.read_text().strip()):
            assert proc.poll() is None, proc.stderr.read()[-2000:]
            assert time.monotonic() < deadline, "no metrics row within 150 s"
            time.sleep(0.5)  # a polling interval (the deadline above bounds the wait)
        send(proc.pid)
        try:
            _, err = proc.communicate(timeout=90)
        except subprocess.TimeoutExpired as e:
            raise AssertionError(
                f"no exit within 90 s of the signal; the child's signal state: {signal_state(proc.pid)}"
            ) from e
        return proc.returncode, err
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def signal_state(pid: int) -> str:
    """The kernel's view of a process's signals (ignored, blocked, caught, pending) and of its threads'
    states: what a SIGINT that was not acted on needs to be explained."""
    try:
        status = Path(f"/proc/{pid}/status").read_text().splitlines()
        keys = ("State", "SigQ", "SigPnd", "ShdPnd", "SigBlk", "SigIgn", "SigCgt", "Threads")
        lines = [line for line in status if line.split(":")[0] in keys]
        threads = [
            (t.name, (t / "stat").read_text().split(") ")[1][:1], (t / "wchan").read_text())
            for t in sorted(Path(f"/proc/{pid}/task").iterdir())
        ]
        return "; ".join(lines) + f"; threads (tid, state, wchan): {threads}"
    except OSError as e:
        return f"unreadable: {e}"


def assert_interrupted_with_a_checkpoint(run: Path, code: int, err: str, by: signal.Signals = signal.SIGINT) -> None:
    import torch

    assert code == 128 + by, err[-2000:]  # 130 after Ctrl-C, 143 after SIGTERM, as a shell reports them
    status = json.loads((run / "run.json").read_text())  # strict JSON: no NaN before the first eval
    assert status["status"] == "interrupted" and status["signal"] == by.name, status
    assert "checkpoint saved" in status["reason"] and "--resume" in status["reason"], status["reason"]
    said = "Ctrl-C" if by is signal.SIGINT else by.name
    assert f"rlhw train: interrupted: {said} at" in err and "Traceback" not in err, err[-2000:]
    saved = torch.load(run / "checkpoints" / "latest.pt", weights_only=False)
    assert saved["env_steps"] == status["env_steps"] > 0


@pytest.mark.timeout(240)
def test_ctrl_c_ends_a_local_run_as_interrupted_with_a_checkpoint_to_resume_from(tmp_path):
    run = tmp_path / "run"
    code, err = ctrl_c_after_first_log(run, "train.runner=local", "train.learning_starts=30", *SMALL)
    assert_interrupted_with_a_checkpoint(run, code, err)
    r = rlhw("--run-dir", str(run), "--resume", "train.max_env_steps=1", "train.progress=false")
    assert r.returncode == 0 and "stopped" in r.stderr, r.stderr[-2000:]


@pytest.mark.timeout(300)
def test_ctrl_c_stops_the_pipeline_robots_and_saves_a_checkpoint(tmp_path):
    run = tmp_path / "run"
    code, err = ctrl_c_after_first_log(run, "train.learning_starts=30", *SMALL)
    assert_interrupted_with_a_checkpoint(run, code, err)
    assert "stopping the robots" in err


@pytest.mark.timeout(240)
def test_sigterm_ends_a_local_run_like_ctrl_c_with_a_checkpoint_to_resume_from(tmp_path):
    run = tmp_path / "run"
    code, err = sigterm_after_first_log(run, "train.runner=local", "train.learning_starts=30", *SMALL)
    assert_interrupted_with_a_checkpoint(run, code, err, by=signal.SIGTERM)
    r = rlhw("--run-dir", str(run), "--resume", "train.max_env_steps=1", "train.progress=false")
    assert r.returncode == 0 and "stopped" in r.stderr, r.stderr[-2000:]


@pytest.mark.timeout(300)
def test_sigterm_stops_the_pipeline_robots_and_saves_a_checkpoint(tmp_path):
    """SIGTERM to the driver alone (Ray's own handler would exit at once, as 'failed'): the robots are stopped
    first, as on Ctrl-C, and the env server child (where a placed arm runs, here simulated) stopped its arm."""
    run, config = tmp_path / "run", placed_arm_file(ROOT / "configs/sim_reach.yaml", tmp_path)
    code, err = sigterm_after_first_log(run, str(config), "train.learning_starts=30", *SMALL)
    assert_interrupted_with_a_checkpoint(run, code, err, by=signal.SIGTERM)
    assert "interrupted (SIGTERM): stopping the robots" in err
    server_log = (run / "logs" / "env0-server.log").read_text()
    assert "shutting down: stopping the arm first" in server_log and server_log.rstrip().endswith("stopped"), server_log
