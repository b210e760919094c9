"""The command sequences the docs print run as printed: read from README.md and docs/teach_a_task.md, made small
(fewer episodes, fewer epochs, a tiny step budget, small frames), and run through `rlhw`'s own entry point."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from rlhw.cli.main import main
from rlhw.rl.episodes import episode_files
from rlhw.rl.rundir import RunDir

pytestmark = pytest.mark.timeout(420)

ROOT = Path(__file__).resolve().parents[2]


def documented(path: str, *starts: str) -> list[list[str]]:
    """The documented lines (joined across trailing backslashes) that begin with ``starts``, in that order."""
    text = (ROOT / path).read_text().replace("\\\n", " ")
    lines = [line.strip() for line in text.splitlines()]
    found = []
    for start in starts:
        line = next((line for line in lines if line.startswith(start)), None)
        assert line is not None, f"{path} no longer shows a line starting with {start!r}"
        found.append(shlex.split(line.split("  #")[0])[1:])  # drop `rlhw` and a trailing comment
    return found


def small(argv: list[str], tmp: Path, *extra: str) -> list[str]:
    """``argv`` with its directories and files moved under ``tmp``, 2 episodes instead of 20, plus ``extra``."""
    out = []
    for arg in argv:
        for name in ("demos/", "reward/"):
            arg = arg.replace(name, f"{tmp}/{name}")
        out.append(arg)
    if "--episodes" in out:
        out[out.index("--episodes") + 1] = "2"
    elif out[0] == "record-demos":
        out += ["--episodes", "2"]
    return out + list(extra)


def test_the_readme_records_demos_with_frames_and_trains_the_classifier_on_their_directory(tmp_path, capsys):
    record, reward = documented(
        "README.md", "rlhw record-demos configs/sim_insert.yaml", "rlhw train-reward demos/insert"
    )
    assert main(small(record, tmp_path, "--no-live", "env.image_size=[32,32]", "env.sim_camera_meshes=collision")) == 0
    assert len(episode_files(tmp_path / "demos/insert", "demo")) == 2
    assert main(small(reward, tmp_path, "--epochs", "2")) == 0
    assert (tmp_path / "reward/insert.pt").is_file() and "held-out" in capsys.readouterr().out


def test_the_rehearsal_runs_as_documented_and_its_eval_figure_is_the_judges(tmp_path):
    record, reward, train = documented(
        "docs/teach_a_task.md",
        "rlhw record-demos configs/sim_push_cube_pixels.yaml",
        "rlhw train-reward demos/push",
        "rlhw train configs/sim_push_cube_pixels.yaml",
    )
    frames = ["env.image_size=[32,32]"]
    assert main(small(record, tmp_path, "--no-live", *frames)) == 0
    assert main(small(reward, tmp_path, "--epochs", "2")) == 0
    run = tmp_path / "run"
    assert (
        main(
            small(
                train,
                tmp_path,
                "--run-dir",
                str(run),
                *frames,
                "train.max_env_steps=40",
                "train.learning_starts=20",
                "train.eval_every_steps=40",
                "train.eval_episodes=1",
                "train.sac.batch_size=8",
                "train.progress=false",
            )
        )
        == 0
    )
    evals = [r for r in RunDir(run).metrics() if r.get("eval/success_rate") is not None]
    assert evals and "reward/classifier_steps" in evals[-1]  # the classifier against the judge, per period
    assert RunDir(run).read_status()["status"] in ("finished", "stopped")
