"""`rlhw train` on the command line: user errors are one line and exit 2; a tiny local run works."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def rlhw(*args, timeout=240):
    return subprocess.run([sys.executable, "-m", "rlhw.cli.main", "train", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout)


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
    r = rlhw("train.runner=local", "train.max_env_steps=60", "train.learning_starts=30", "train.eval_every_steps=60",
             "train.eval_episodes=1", "train.progress=false", "env.max_episode_steps=20",
             "train.sac.hidden_sizes=[16,16]", "train.sac.batch_size=16", "--run-dir", str(run))
    assert r.returncode == 0, r.stderr[-2000:]
    status = json.loads((run / "run.json").read_text())
    assert status["status"] == "stopped" and status["env_steps"] >= 60
    assert (run / "config.yaml").exists() and (run / "learning_curve.png").exists()
    assert "run directory" in r.stderr
