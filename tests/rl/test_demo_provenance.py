"""Demos carry the env config they were recorded with (task, task options, action scale, reward, control
rate), and `train.demos` refuses demos recorded with another one, naming the key; demos from before they
recorded it load with a warning that says what was not checked."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from rlhw.cli.main import main
from rlhw.config import load_config
from rlhw.errors import ConfigError
from rlhw.rl.demos import PROVENANCE_KEY, UncheckedDemoWarning, env_provenance, load_demos, provenance_of
from rlhw.rl.episodes import episode_files, load_episode

ROOT = Path(__file__).resolve().parents[2]
SIM_REACH = str(ROOT / "configs" / "sim_reach.yaml")
FAST = ["env.max_episode_steps=15", "env.teleop.hesitation=0.0"]


@pytest.fixture(scope="module")
def demos(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("provenance") / "demos"
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
    return out


def _shapes(demos: Path):
    ep = load_episode(episode_files(demos, "demo")[0])
    return {k: v.shape[1:] for k, v in ep.obs.items()}, ep.action.shape[1:]


def _provenance(*overrides: str) -> dict:
    return env_provenance(load_config(SIM_REACH, [*FAST, *overrides]).env)


def test_a_recorded_demo_names_the_env_config_it_was_recorded_with(demos):
    meta = load_episode(episode_files(demos, "demo")[0]).meta
    recorded = meta[PROVENANCE_KEY]
    assert recorded["task"] == "reach"  # the whole env section, as `rlhw export-dataset` carries it on
    assert provenance_of(recorded) == _provenance()  # what a run with the same config expects, key for key
    checked = provenance_of(recorded)
    assert checked["env.task"] == "reach" and checked["env.action.scale_m"] == 0.025
    assert {"env.reward.decides", "env.reach.reward_scale_m", "env.control_hz", "env.task_options"} <= set(checked)


def test_demos_of_the_same_env_config_load(demos):
    observations, action = _shapes(demos)
    assert load_demos([str(demos)], observations, action, _provenance())


@pytest.mark.parametrize(
    "override, key",
    [
        ("env.action.scale_m=0.05", "env.action.scale_m"),
        ("env.reach.reward_scale_m=0.2", "env.reach.reward_scale_m"),
        ("env.control_hz=20", "env.control_hz"),
        ("env.reward.decides=success_and_reward", "env.reward.decides"),
    ],
)
def test_demos_recorded_with_another_env_config_are_refused_naming_the_key(demos, override, key):
    observations, action = _shapes(demos)
    with pytest.raises(
        ConfigError,
        match=rf"train.demos\[0\]: demo-000000.npz was recorded with {key}=.*"
        rf"this run has {key}=.*set {key} to the demos' value",
    ):
        load_demos([str(demos)], observations, action, _provenance(override))


def test_demos_without_a_recorded_env_config_load_with_a_warning_naming_what_is_unchecked(demos, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(demos, old)
    path = episode_files(old, "demo")[0]
    ep = load_episode(path)
    meta = {k: v for k, v in ep.meta.items() if k != PROVENANCE_KEY}  # as recorded before demos carried it
    ep = dataclasses.replace(ep, meta=meta)
    np.savez(path, **ep.to_arrays())
    observations, action = _shapes(old)
    with pytest.warns(
        UncheckedDemoWarning,
        match=r"train.demos\[0\]: 1 of 1 episode.*record no env config.*"
        r"env.action.scale_m.*NOT checked.*rlhw record-demos",
    ):
        batches = load_demos([str(old)], observations, action, _provenance())
    assert batches and len(batches[0]["reward"]) == ep.length


@pytest.mark.timeout(180)
def test_rlhw_train_refuses_mismatched_demos_in_one_line_naming_the_key(demos, tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlhw.cli.main",
            "train",
            SIM_REACH,
            "train.runner=local",
            *FAST,
            f"train.demos=[{demos}]",
            "env.action.scale_m=0.05",
            "train.progress=false",
            "--run-dir",
            str(tmp_path / "run"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert r.returncode == 2, r.stderr[-2000:]
    assert "env.action.scale_m" in r.stderr and "train.demos[0]" in r.stderr and "Traceback" not in r.stderr
