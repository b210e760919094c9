"""``train.init_from``: a run starts from a checkpoint's actor, critics and encoder (sim-to-real fine-tuning),
after the same spec check as `rlhw eval`; a missing file or another env's checkpoint is refused by name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from rlhw.config import load_config
from rlhw.errors import ConfigError
from rlhw.rl.rundir import RunDir
from tests.rl.test_eval import ROOT, SMALL, make_checkpoint

# No update runs (learning starts after the budget): the run's checkpoint holds exactly the weights it started from.
NO_UPDATES = [
    "train.max_env_steps=40",
    "train.learning_starts=100000",
    "train.eval_episodes=1",
    "train.progress=false",
    "env.max_episode_steps=20",
    "train.sac.batch_size=16",
]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("init") / "latest.pt")


def same_networks(a: dict, b: dict) -> bool:
    return all(torch.equal(a[net][k], b[net][k]) for net in ("actor", "critic", "critic_target") for k in a[net])


@pytest.mark.timeout(120)
def test_a_local_run_starts_from_the_checkpoints_actor_critics_and_encoder(checkpoint, tmp_path):
    from rlhw.cli.trainer import train

    config = load_config(
        ROOT / "configs/sim_reach.yaml",
        [*SMALL, *NO_UPDATES, "env.sim=mock", "train.runner=local", f"train.init_from={checkpoint}"],
    )
    train(config, RunDir(tmp_path / "run"))
    saved = torch.load(tmp_path / "run" / "checkpoints" / "latest.pt", weights_only=False)
    init = torch.load(checkpoint, weights_only=False)
    assert same_networks(saved["sac"], init["sac"])
    assert saved["sac"]["updates"] == 0  # a new run: counters and optimizers start fresh
    assert saved["spec"] == init["spec"]


@pytest.mark.timeout(240)
def test_a_pipeline_run_starts_from_the_checkpoint(checkpoint, tmp_path):
    from rlhw.cli.trainer import train

    config = load_config(
        ROOT / "configs/sim_reach.yaml", [*SMALL, *NO_UPDATES, "env.sim=mock", f"train.init_from={checkpoint}"]
    )
    train(config, RunDir(tmp_path / "run"))
    saved = torch.load(tmp_path / "run" / "checkpoints" / "latest.pt", weights_only=False)
    assert same_networks(saved["sac"], torch.load(checkpoint, weights_only=False)["sac"])


@pytest.mark.timeout(120)
def test_a_checkpoint_of_another_env_is_refused_naming_init_from_and_the_key(checkpoint, tmp_path):
    from rlhw.cli.trainer import train

    config = load_config(
        ROOT / "configs/sim_reach.yaml",
        [
            *SMALL,
            *NO_UPDATES,
            "env.sim=mock",
            "train.runner=local",
            "env.action.gripper=true",
            f"train.init_from={checkpoint}",
        ],
    )
    with pytest.raises(ConfigError) as e:
        train(config, RunDir(tmp_path / "run"))
    assert e.value.path == "train.init_from" and "action: checkpoint shape (3,), env (4,)" in e.value.message


def test_other_network_widths_are_refused_naming_train_sac(checkpoint, tmp_path):
    from rlhw.rl.checkpoint import PolicyCheckpoint, warm_start
    from rlhw.rl.local import make_agent
    from rlhw.robot import make_env

    config = load_config(ROOT / "configs/sim_reach.yaml", ["env.sim=mock", "train.sac.hidden_sizes=[32]"])
    env = make_env(config)
    try:
        agent = make_agent(config, env.spec, "cpu")
    finally:
        env.close()
    with pytest.raises(ConfigError, match="train.sac") as e:
        warm_start(agent, PolicyCheckpoint.load(checkpoint, "train.init_from"))
    assert e.value.path == "train.init_from"


@pytest.mark.timeout(60)
def test_a_missing_init_from_file_is_a_one_line_error_before_anything_starts(tmp_path):
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "rlhw.cli.main",
            "train",
            "configs/sim_reach.yaml",
            f"train.init_from={tmp_path / 'nope.pt'}",
            "--run-dir",
            str(tmp_path / "run"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 2 and "train.init_from" in r.stderr and "not found" in r.stderr
    assert "Traceback" not in r.stderr and "Ray" not in r.stderr
