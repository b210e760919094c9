"""The learner component's old name: ``actor`` in ``cluster.component_placement`` is still read as ``learner``,
with one warning per process that says what to write."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from rlhw.config import component_placement, load_config, load_config_dict
from rlhw.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))


@pytest.fixture
def fresh_process(monkeypatch):
    """No alias warned about yet, as in a new process."""
    monkeypatch.setattr(component_placement, "_said", set())


def load(placement: dict):
    return load_config_dict({"cluster": {"num_nodes": 2, "component_placement": placement}})


def test_actor_is_read_as_learner_with_one_warning_naming_the_new_name(fresh_process):
    with pytest.warns(FutureWarning, match="component 'actor' is now called 'learner'; write 'learner'") as seen:
        cfg = load({"env": "0", "rollout,actor": "1"})
    assert len(seen) == 1
    assert set(cfg.cluster.components()) == {"env", "rollout", "learner"}
    assert list(cfg.cluster.component_placement) == ["env", "rollout,learner"]  # what it round-trips to
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = load({"actor": {"node_group": "node", "placement": "1"}})  # once per process: no second warning
    assert again.cluster.components()["learner"][0] == "learner"


def test_learner_gives_no_warning(fresh_process):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert "learner" in load({"env": "0", "learner": "1"}).cluster.components()


def test_actor_and_learner_together_place_the_learner_twice(fresh_process):
    with pytest.warns(FutureWarning), pytest.raises(ConfigError) as e:
        load({"learner": "0", "rollout,actor": "1"})
    assert e.value.path == "cluster.component_placement.rollout,actor"
    assert "component 'learner' (written 'actor', its old name) is already placed by key 'learner'" in e.value.message


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_shipped_configs_write_the_new_name(path, fresh_process):
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        cfg = load_config(path)
    assert "actor" not in cfg.cluster.components()


@pytest.mark.timeout(120)
def test_a_user_of_an_old_config_sees_the_warning_once_and_the_plan_names_the_learner(tmp_path):
    old = tmp_path / "old.yaml"
    old.write_text("cluster:\n  num_nodes: 2\n  component_placement:\n    env,rollout: 0\n    actor: 1\n")
    out = subprocess.run(
        [sys.executable, "-m", "rlhw.cli.main", "placement", str(old), "--dry-run", "--json"],
        capture_output=True,
        text=True,
        timeout=100,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert out.stderr.count("write 'learner'") == 1
    assert list(json.loads(out.stdout)["components"]) == ["env", "rollout", "learner"]
