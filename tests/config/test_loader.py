"""Loading YAML + overrides into a Config, and the one-error-with-a-path contract."""

from __future__ import annotations

import typing
from pathlib import Path

import pytest
from pydantic import BaseModel, ValidationError

from rlhw.config import Config, load_config, load_config_dict
from rlhw.config.root import Config as RootConfig
from rlhw.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))


def write(tmp_path, text: str) -> Path:
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


MINIMAL = "cluster:\n  num_nodes: 2\n"


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_config_loads_and_plans(path):
    from rlhw.placement import plan

    cfg = load_config(path)
    placements = plan(cfg.cluster)
    assert placements and all(records for records in placements.values())


def test_sections_other_than_cluster_have_defaults(tmp_path):
    cfg = load_config(write(tmp_path, MINIMAL))
    assert isinstance(cfg, Config)
    assert cfg.cluster.num_nodes == 2 and cfg.cluster.node_groups == () and cfg.cluster.component_placement == {}


def test_config_is_frozen(tmp_path):
    cfg = load_config(write(tmp_path, MINIMAL))
    with pytest.raises(ValidationError):
        cfg.cluster.num_nodes = 3


def test_dotted_overrides_replace_values(tmp_path):
    cfg = load_config(
        ROOT / "configs/hetero_18node.yaml", ["cluster.num_nodes=20", "cluster.component_placement.env.placement=1"]
    )
    assert cfg.cluster.num_nodes == 20
    assert cfg.cluster.component_placement["env"].entries[0].placement == "1"


def test_override_can_add_a_key_that_the_file_lacks(tmp_path):
    cfg = load_config(write(tmp_path, MINIMAL), ["cluster.component_placement.agent=0-1"])
    assert cfg.cluster.component_placement["agent"].entries[0].placement == "0-1"


def test_override_can_index_into_a_list():
    cfg = load_config(ROOT / "configs/hetero_18node.yaml", ["cluster.node_groups.0.accelerators_per_node=4"])
    assert cfg.cluster.node_groups[0].accelerators_per_node == 4


def test_override_without_equals_names_the_override(tmp_path):
    with pytest.raises(ConfigError, match=r"override 'cluster\.num_nodes' is not key=value"):
        load_config(write(tmp_path, MINIMAL), ["cluster.num_nodes"])


@pytest.mark.parametrize("bad", ["=3", ".a=1", "a..b=1", "a b=1"])
def test_override_without_a_valid_key_is_refused(tmp_path, bad):
    with pytest.raises(ConfigError, match="override"):
        load_config(write(tmp_path, MINIMAL), [bad])


def test_override_with_an_invalid_value_reports_the_field(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, MINIMAL), ["cluster.num_nodes=zero"])
    assert e.value.path == "cluster.num_nodes"


def test_misspelled_override_key_gets_a_suggestion(tmp_path):
    with pytest.raises(ConfigError, match="did you mean 'num_nodes'"):
        load_config(write(tmp_path, MINIMAL), ["cluster.num_node=3"])


def test_missing_file_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(tmp_path / "nope.yaml")
    with pytest.raises(ConfigError, match="directory"):
        load_config(tmp_path)


def test_yaml_syntax_error_gives_the_line(tmp_path):
    with pytest.raises(ConfigError, match="invalid YAML at line 3") as e:
        load_config(write(tmp_path, "cluster:\n  num_nodes: 2\n node_groups: []\n"))
    assert "Traceback" not in str(e.value)


def test_tab_indentation_gets_a_hint(tmp_path):
    with pytest.raises(ConfigError, match="indent YAML with spaces"):
        load_config(write(tmp_path, "cluster:\n\tnum_nodes: 2\n"))


def test_duplicate_yaml_key_is_refused_with_its_line(tmp_path):
    with pytest.raises(ConfigError, match="line 3.*duplicate key num_nodes"):
        load_config(write(tmp_path, "cluster:\n  num_nodes: 2\n  num_nodes: 3\n"))


def test_top_level_list_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="top level must be a map"):
        load_config(write(tmp_path, "- 1\n- 2\n"))


def test_missing_cluster_section_is_named(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, "env: {}\n"))
    assert e.value.path == "cluster"


def test_empty_file_asks_for_a_cluster_section(tmp_path):
    with pytest.raises(ConfigError, match="no cluster section"):
        load_config(write(tmp_path, ""))


def test_misspelled_section_gets_a_suggestion():
    with pytest.raises(ConfigError, match="unknown key 'clustr'; did you mean 'cluster'"):
        load_config_dict({"cluster": {"num_nodes": 1}, "clustr": {}})


def test_several_problems_report_the_first_and_count_the_rest():
    with pytest.raises(ConfigError, match=r"\(and 1 more problem\)"):
        load_config_dict({"cluster": {"num_nodes": 1, "nodez": 1, "groups": []}})


def test_dumped_config_loads_back_equal():
    cfg = load_config(
        ROOT / "configs/hetero_18node.yaml", ["cluster.component_placement.x=[{node_group: node, placement: '0'}]"]
    )
    again = load_config_dict(cfg.model_dump(mode="json"))
    assert again == cfg
    assert load_config_dict(cfg) == cfg


# --------------- the unknown-key suggestion works generically for every section's models


def _nested_defaults(model: type[BaseModel], path=()):
    """(path, model) for every nested StrictModel reachable through defaulted fields."""
    yield path, model
    for name, f in model.model_fields.items():
        tp = f.annotation
        if typing.get_origin(tp) is typing.Union:
            members = [a for a in typing.get_args(tp) if isinstance(a, type) and issubclass(a, BaseModel)]
            tp = members[0] if len(members) == 1 else None
        if isinstance(tp, type) and issubclass(tp, BaseModel) and not f.is_required():
            yield from _nested_defaults(tp, path + (name,))


def _cases():
    for section in ("env", "server", "train"):
        model = RootConfig.model_fields[section].annotation
        for path, sub in _nested_defaults(model, (section,)):
            fields = [n for n in sub.model_fields if len(n) >= 3]
            if fields:
                yield pytest.param(path, fields[0], id=".".join(path) + "." + fields[0])


@pytest.mark.parametrize("path, field", list(_cases()))
def test_every_section_suggests_the_closest_key_for_a_typo(path, field):
    data: dict = {"cluster": {"num_nodes": 1}}
    node = data
    for part in path:
        node = node.setdefault(part, {})
    typo = field + "x"
    node[typo] = 1
    with pytest.raises(ConfigError) as e:
        load_config_dict(data)
    assert e.value.path == ".".join(path + (typo,))
    assert f"unknown key {typo!r}; did you mean {field!r}?" in e.value.message


def test_the_local_runner_refuses_several_env_instances_naming_num_envs_and_both_fixes(tmp_path):
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, MINIMAL), ["train.runner=local", "env.num_envs=4"])
    assert "env.num_envs is 4" in str(e.value)
    assert "env.num_envs=1" in str(e.value) and "train.runner=pipeline" in str(e.value)
    assert load_config(write(tmp_path, MINIMAL), ["train.runner=pipeline", "env.num_envs=4"]).env.num_envs == 4


@pytest.mark.parametrize(
    "key, bad, allowed",
    [
        ("policy_at", "gpu", ["rollout", "env"]),
    ],
)
def test_the_robot_loop_keys_refuse_an_unknown_choice_naming_the_key_and_the_choices(tmp_path, key, bad, allowed):
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, MINIMAL), [f"train.{key}={bad}"])
    assert e.value.path == f"train.{key}"
    assert all(repr(choice) in e.value.message for choice in allowed) and repr(bad) in e.value.message


@pytest.mark.parametrize("choice", ["auto", "in_process", "server"])
def test_env_transport_is_refused_naming_the_key_and_saying_that_the_placement_decides_it(tmp_path, choice):
    """Where the env runs is derived (rlhw.rl.env_transport): an in-process real arm can no longer be asked for."""
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, MINIMAL), [f"train.env_transport={choice}"])
    assert e.value.path == "train.env_transport"
    assert "no longer a choice" in e.value.message and "derived from the placement" in e.value.message
    assert "Franka" in e.value.message and "env.sim=mujoco" in e.value.message and "remove the key" in e.value.message


def test_sim_camera_meshes_default_to_the_detailed_arm_and_refuse_an_unknown_choice(tmp_path):
    assert load_config(write(tmp_path, MINIMAL)).env.sim_camera_meshes == "visual"
    assert (
        load_config(write(tmp_path, MINIMAL), ["env.sim_camera_meshes=collision"]).env.sim_camera_meshes == "collision"
    )
    with pytest.raises(ConfigError) as e:
        load_config(write(tmp_path, MINIMAL), ["env.sim_camera_meshes=fine"])
    assert e.value.path == "env.sim_camera_meshes"
    assert "'visual'" in e.value.message and "'collision'" in e.value.message and "'fine'" in e.value.message
