"""Every rule of the cluster section, each with the message a user sees (path: problem and fix)."""

from __future__ import annotations

import pytest

from rlhw.config import load_config_dict
from rlhw.errors import ConfigError


def load(num_nodes=4, groups=(), placement=None):
    return load_config_dict(
        {"cluster": {"num_nodes": num_nodes, "node_groups": list(groups), "component_placement": placement or {}}}
    )


def err(**kw) -> ConfigError:
    with pytest.raises(ConfigError) as e:
        load(**kw)
    return e.value


def franka_group(label="robot", ranks="0-1", entries=None):
    entries = entries if entries is not None else [{"robot_ip": "10.0.0.1", "node_rank": 0}]
    return {"label": label, "node_ranks": ranks, "hardware": {"type": "Franka", "configs": entries}}


@pytest.mark.parametrize("label", ["cluster", "node"])
def test_labels_cluster_and_node_are_reserved(label):
    e = err(groups=[{"label": label, "node_ranks": 0}])
    assert e.path == "cluster.node_groups[0].label"
    assert "reserved" in e.message


def test_labels_must_be_unique():
    e = err(groups=[{"label": "gpu", "node_ranks": 0}, {"label": "gpu", "node_ranks": 1}])
    assert e.path == "cluster.node_groups[1].label"
    assert "already used by node_groups[0]" in e.message


def test_labels_are_case_sensitive():
    cfg = load(
        groups=[
            {"label": "GPU", "node_ranks": 0},
            {"label": "gpu", "node_ranks": 1},
            {"label": "Node", "node_ranks": 2},
        ]
    )
    assert [g.label for g in cfg.cluster.node_groups] == ["GPU", "gpu", "Node"]


def test_numeric_label_from_yaml_is_text():
    cfg = load(
        groups=[{"label": 4090, "node_ranks": 0, "accelerators_per_node": 1}],
        placement={"r": {"node_group": 4090, "placement": 0}},
    )
    assert cfg.cluster.node_groups[0].label == "4090"
    assert cfg.cluster.component_placement["r"].entries[0].node_group == "4090"


def test_label_with_spaces_or_commas_is_refused():
    assert "letters, digits" in err(groups=[{"label": "a b", "node_ranks": 0}]).message


def test_node_ranks_must_lie_within_num_nodes():
    e = err(num_nodes=4, groups=[{"label": "g", "node_ranks": "2-5"}])
    assert e.path == "cluster.node_groups[0].node_ranks"
    assert e.message.startswith("4-5 is outside the cluster's node ranks 0-3 (num_nodes: 4)")


@pytest.mark.parametrize(
    "ranks, expected", [(3, (3,)), ("0-2", (0, 1, 2)), ("0,2-3", (0, 2, 3)), ([3, 1], (1, 3)), (["0-1", 3], (0, 1, 3))]
)
def test_node_ranks_are_a_list_or_range(ranks, expected):
    assert load(groups=[{"label": "g", "node_ranks": ranks}]).cluster.node_groups[0].node_ranks == expected


def test_env_configs_must_be_a_subset_of_their_group_with_the_issue_message():
    e = err(
        num_nodes=18,
        groups=[
            {"label": "a", "node_ranks": "0-3"},
            {"label": "b", "node_ranks": "4-7"},
            {"label": "c", "node_ranks": "8-11", "env_configs": [{"node_ranks": "12-13"}]},
        ],
    )
    assert str(e) == "cluster.node_groups[2].env_configs[0].node_ranks: 12-13 is not inside the group's node_ranks 8-11"


def test_env_configs_of_a_group_must_not_overlap():
    e = err(groups=[{"label": "g", "node_ranks": "0-3", "env_configs": [{"node_ranks": "0-1"}, {"node_ranks": "1-2"}]}])
    assert e.path == "cluster.node_groups[0].env_configs[1].node_ranks"
    assert "node 1 is already configured by env_configs[0]" in e.message


def test_env_var_keys_are_unique_per_node_within_a_group():
    e = err(
        groups=[
            {"label": "g", "node_ranks": 0, "env_configs": [{"node_ranks": 0, "env_vars": [{"A": "1"}, {"A": "2"}]}]}
        ]
    )
    assert e.path == "cluster.node_groups[0].env_configs[0].env_vars[1]"
    assert "already set by entry [0]" in e.message


@pytest.mark.parametrize(
    "entry, words", [({"A": "1", "B": "2"}, "exactly one key"), ({}, "exactly one key"), ("A=1", "exactly one key")]
)
def test_each_env_var_entry_has_exactly_one_key(entry, words):
    e = err(groups=[{"label": "g", "node_ranks": 0, "env_configs": [{"node_ranks": 0, "env_vars": [entry]}]}])
    assert e.path == "cluster.node_groups[0].env_configs[0].env_vars[0]"
    assert words in e.message


def test_env_vars_written_as_a_map_get_the_list_hint():
    e = err(groups=[{"label": "g", "node_ranks": 0, "env_configs": [{"node_ranks": 0, "env_vars": {"A": "1"}}]}])
    assert "list of one-key maps" in e.message


def test_env_var_values_are_text_and_numbers_become_text():
    cfg = load(
        groups=[
            {"label": "g", "node_ranks": 0, "env_configs": [{"node_ranks": 0, "env_vars": [{"OMP_NUM_THREADS": 4}]}]}
        ]
    )
    assert cfg.cluster.node_env(0).env_vars == {"OMP_NUM_THREADS": "4"}
    e = err(groups=[{"label": "g", "node_ranks": 0, "env_configs": [{"node_ranks": 0, "env_vars": [{"DEBUG": True}]}]}])
    assert "quote it" in e.message


def test_overlapping_groups_setting_one_env_var_differently_for_a_node_is_refused():
    groups = [
        {"label": "gpu", "node_ranks": 0, "env_configs": [{"node_ranks": 0, "env_vars": [{"NCCL_IB_DISABLE": "1"}]}]},
        {"label": "arm", "node_ranks": 0, "env_configs": [{"node_ranks": 0, "env_vars": [{"NCCL_IB_DISABLE": "0"}]}]},
    ]
    e = err(groups=groups)
    assert e.path == "cluster.node_groups[1].env_configs[0].env_vars[0]"
    assert "already '1'" in e.message


def test_overlapping_groups_merge_env_vars_per_node():
    groups = [
        {
            "label": "gpu",
            "node_ranks": "0-1",
            "env_configs": [
                {"node_ranks": "0-1", "env_vars": [{"A": "1"}], "python_interpreter_path": "/opt/py/bin/python3"}
            ],
        },
        {"label": "arm", "node_ranks": 1, "env_configs": [{"node_ranks": 1, "env_vars": [{"A": "1"}, {"B": "2"}]}]},
    ]
    cfg = load(groups=groups).cluster
    assert cfg.node_env(1).env_vars == {"A": "1", "B": "2"}
    assert cfg.node_env(0).python_interpreter_path == "/opt/py/bin/python3"
    assert cfg.node_env(3).env_vars == {}


def test_interpreter_must_be_an_absolute_path():
    e = err(
        groups=[
            {"label": "g", "node_ranks": 0, "env_configs": [{"node_ranks": 0, "python_interpreter_path": "python3"}]}
        ]
    )
    assert e.path == "cluster.node_groups[0].env_configs[0].python_interpreter_path"


def test_hardware_entry_node_rank_must_be_inside_its_group():
    e = err(groups=[franka_group(ranks="0-1", entries=[{"robot_ip": "10.0.0.1", "node_rank": 3}])])
    assert e.path == "cluster.node_groups[0].hardware.configs[0].node_rank"
    assert "node 3 is not in the group's node_ranks 0-1" in e.message


def test_same_hardware_type_declared_twice_for_one_node_is_refused():
    groups = [
        franka_group("left", "0", [{"robot_ip": "10.0.0.1", "node_rank": 0}]),
        franka_group("right", "0", [{"robot_ip": "10.0.0.2", "node_rank": 0}]),
    ]
    e = err(groups=groups)
    assert e.path == "cluster.node_groups[1].hardware.configs[0].node_rank"
    assert "already has Franka hardware declared by group 'left'" in e.message


def test_two_arms_on_one_node_in_one_group_are_allowed():
    cfg = load(
        groups=[
            franka_group(
                "arms", "0", [{"robot_ip": "10.0.0.1", "node_rank": 0}, {"robot_ip": "10.0.0.2", "node_rank": 0}]
            )
        ]
    )
    assert [e.robot_ip for e in cfg.cluster.node_groups[0].hardware.configs] == ["10.0.0.1", "10.0.0.2"]


def test_one_robot_declared_twice_is_refused():
    e = err(
        groups=[
            franka_group(
                "arms", "0-1", [{"robot_ip": "10.0.0.1", "node_rank": 0}, {"robot_ip": "10.0.0.1", "node_rank": 1}]
            )
        ]
    )
    assert e.path == "cluster.node_groups[0].hardware.configs[1].robot_ip"


def test_one_camera_attached_to_two_arms_is_refused():
    entries = [
        {"robot_ip": "10.0.0.1", "node_rank": 0, "camera_serials": ["1"]},
        {"robot_ip": "10.0.0.2", "node_rank": 1, "camera_serials": ["1"]},
    ]
    assert "already attached" in err(groups=[franka_group("arms", "0-1", entries)]).message


def test_unknown_hardware_type_lists_the_known_ones():
    e = err(groups=[{"label": "g", "node_ranks": 0, "hardware": {"type": "UR5", "configs": [{"node_rank": 0}]}}])
    assert e.path == "cluster.node_groups[0].hardware.type"
    assert "unknown hardware type 'UR5'" in e.message and "Franka" in e.message and "RealSense" in e.message


def test_misspelled_hardware_type_gets_a_suggestion():
    assert (
        "did you mean 'Franka'?"
        in err(groups=[{"label": "g", "node_ranks": 0, "hardware": {"type": "franka", "configs": [{}]}}]).message
    )


def test_accelerators_are_detected_not_declared_as_hardware():
    e = err(
        groups=[{"label": "g", "node_ranks": 0, "hardware": {"type": "Accelerator", "configs": [{"node_rank": 0}]}}]
    )
    assert "accelerators_per_node" in e.message


def test_hardware_without_entries_is_refused():
    e = err(groups=[{"label": "g", "node_ranks": 0, "hardware": {"type": "Franka", "configs": []}}])
    assert e.path == "cluster.node_groups[0].hardware.configs"


def test_overlapping_groups_must_agree_on_accelerators_per_node():
    e = err(
        groups=[
            {"label": "a", "node_ranks": "0-1", "accelerators_per_node": 8},
            {"label": "b", "node_ranks": 1, "accelerators_per_node": 4},
        ]
    )
    assert e.path == "cluster.node_groups[1].accelerators_per_node"


def test_a_node_may_be_in_a_gpu_group_and_a_robot_group():
    cfg = load(
        num_nodes=1, groups=[{"label": "gpu", "node_ranks": 0, "accelerators_per_node": 1}, franka_group("arm", 0)]
    )
    assert cfg.cluster.declared_accelerators() == {0: 1}
    assert [(t, g) for t, g, _, _ in cfg.cluster.hardware_on_node(0)] == [("Franka", "arm")]


@pytest.mark.parametrize(
    "groups, path, suggestion",
    [
        ([{"label": "g", "nodes_ranks": 0}], "cluster.node_groups[0].nodes_ranks", "node_ranks"),
        ([{"label": "g", "node_ranks": 0, "env_config": []}], "cluster.node_groups[0].env_config", "env_configs"),
        (
            [{"label": "g", "node_ranks": 0, "env_configs": [{"node_ranks": 0, "env_var": []}]}],
            "cluster.node_groups[0].env_configs[0].env_var",
            "env_vars",
        ),
        (
            [{"label": "g", "node_ranks": 0, "hardware": {"typ": "Franka"}}],
            "cluster.node_groups[0].hardware.typ",
            "type",
        ),
        (
            [franka_group("g", 0, [{"robot_ip": "1.2.3.4", "node_rank": 0, "camera_serial": []}])],
            "cluster.node_groups[0].hardware.configs[0].camera_serial",
            "camera_serials",
        ),
        (
            [franka_group("g", 0, [{"robot_ip": "1.2.3.4", "node_rank": 0, "controller": {"realtim": "ignore"}}])],
            "cluster.node_groups[0].hardware.configs[0].controller.realtim",
            "realtime",
        ),
    ],
)
def test_unknown_keys_are_rejected_with_a_suggestion(groups, path, suggestion):
    e = err(groups=groups)
    assert e.path == path
    assert f"did you mean {suggestion!r}?" in e.message


def test_unknown_key_in_placement_entry_gets_a_suggestion():
    e = err(placement={"learner": {"node_grp": "node", "placement": "0"}})
    assert str(e) == "cluster.component_placement.learner.node_grp: unknown key 'node_grp'; did you mean 'node_group'?"


def test_num_nodes_must_be_positive():
    e = err(num_nodes=0)
    assert e.path == "cluster.num_nodes"


# ------------------------------------------------------------ hardware schemas


def test_franka_defaults_are_cautious():
    cfg = load(groups=[franka_group()])
    arm = cfg.cluster.node_groups[0].hardware.configs[0]
    assert arm.gripper is True and arm.camera_serials == ()
    assert arm.controller.realtime == "enforce" and arm.controller.relative_dynamics_factor <= 0.2
    assert (
        len(arm.controller.collision_torque_thresholds_nm) == 7
        and len(arm.controller.collision_force_thresholds_n) == 6
    )


@pytest.mark.parametrize(
    "controller, field",
    [
        ({"relative_dynamics_factor": 0}, "relative_dynamics_factor"),
        ({"relative_dynamics_factor": 1.5}, "relative_dynamics_factor"),
        ({"realtime": "off"}, "realtime"),
        ({"collision_torque_thresholds_nm": [1, 2, 3]}, "collision_torque_thresholds_nm"),
        ({"collision_force_thresholds_n": [1, 1, 1, 1, 1, -1]}, "collision_force_thresholds_n"),
    ],
)
def test_bad_franka_controller_options_name_the_field(controller, field):
    e = err(groups=[franka_group(entries=[{"robot_ip": "10.0.0.1", "node_rank": 0, "controller": controller}])])
    assert e.path.startswith(f"cluster.node_groups[0].hardware.configs[0].controller.{field}")


@pytest.mark.parametrize("ip", ["10.0.0", "not an ip", 10, "999.1.1.1"])
def test_bad_robot_ip_is_refused(ip):
    e = err(groups=[franka_group(entries=[{"robot_ip": ip, "node_rank": 0}])])
    assert e.path == "cluster.node_groups[0].hardware.configs[0].robot_ip"


def test_robot_ip_may_be_a_host_name():
    cfg = load(groups=[franka_group(entries=[{"robot_ip": "panda-left.lab", "node_rank": 0}])])
    assert cfg.cluster.node_groups[0].hardware.configs[0].robot_ip == "panda-left.lab"


def test_realsense_entry_defaults_and_numeric_serial_is_text():
    g = {
        "label": "cams",
        "node_ranks": 0,
        "hardware": {"type": "RealSense", "configs": [{"serial": 322142001230, "node_rank": 0}]},
    }
    cam = load(groups=[g]).cluster.node_groups[0].hardware.configs[0]
    assert (cam.serial, cam.width, cam.height, cam.fps, cam.depth) == ("322142001230", 640, 480, 30, False)


def test_bad_realsense_stream_is_refused():
    g = {
        "label": "cams",
        "node_ranks": 0,
        "hardware": {"type": "RealSense", "configs": [{"serial": "1", "node_rank": 0, "fps": 0}]},
    }
    assert err(groups=[g]).path == "cluster.node_groups[0].hardware.configs[0].fps"


def test_a_camera_declared_on_another_node_than_its_arm_is_refused():
    arm = franka_group("arm", "0", [{"robot_ip": "10.0.0.1", "node_rank": 0, "camera_serials": ["42"]}])
    cams = {
        "label": "cams",
        "node_ranks": "0-1",
        "hardware": {"type": "RealSense", "configs": [{"serial": "42", "node_rank": 1}]},
    }
    e = err(groups=[arm, cams])
    assert e.path == "cluster.node_groups[1].hardware.configs[0].node_rank"
    assert "its arm" in e.message
    cams["hardware"]["configs"][0]["node_rank"] = 0
    assert load(groups=[arm, cams]).cluster.node_groups[1].hardware.configs[0].serial == "42"


def test_a_shared_placement_key_places_each_of_its_components_under_that_key():
    from rlhw.config.cluster import component_names

    assert component_names("rollout, learner") == ["rollout", "learner"]
    cfg = load(placement={"env": "0", "rollout , learner": "1"})
    components = cfg.cluster.components()
    assert set(components) == {"env", "rollout", "learner"}
    assert components["rollout"][0] == components["learner"][0] == "rollout,learner"  # the key as validated
