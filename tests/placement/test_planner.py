"""Planning: which process goes where, with which hardware, and the rules that refuse a plan."""

from __future__ import annotations

import pytest

from rlhw.config import load_config_dict
from rlhw.errors import ConfigError, PlacementError
from rlhw.placement import Placement, plan


def cluster(num_nodes=2, groups=(), placement=None):
    return load_config_dict(
        {"cluster": {"num_nodes": num_nodes, "node_groups": list(groups), "component_placement": placement or {}}}
    ).cluster


def gpus(label="g", ranks="0-1", per_node=8):
    return {"label": label, "node_ranks": ranks, "accelerators_per_node": per_node}


def frankas(label="robot", ranks="0-1", nodes=(0, 1)):
    return {
        "label": label,
        "node_ranks": ranks,
        "hardware": {
            "type": "Franka",
            "configs": [{"robot_ip": f"10.0.0.{i + 1}", "node_rank": n} for i, n in enumerate(nodes)],
        },
    }


def where(records: list[Placement]):
    return [
        (p.rank, p.node_rank, p.hardware_ranks, p.local_hardware_ranks, p.local_rank, p.local_world_size)
        for p in records
    ]


def test_issue_case_mixed_segments_on_two_nodes_of_eight_gpus():
    c = cluster(2, [gpus()], {"learner": {"node_group": "g", "placement": "0-1:0-3,3-5,7-10:7-14"}})
    got = {p.rank: p for p in plan(c)["learner"]}
    expected_gpu = {0: 0, 1: 0, 2: 1, 3: 1, 4: 3, 5: 4, 6: 5, 7: 7, 8: 7, 9: 8, 10: 8, 11: 9, 12: 9, 13: 10, 14: 10}
    assert {r: p.hardware_ranks for r, p in got.items()} == {r: (g,) for r, g in expected_gpu.items()}
    # GPUs 0-7 are node 0, 8-15 node 1 (node-major across the group)
    assert [got[r].node_rank for r in range(15)] == [0] * 9 + [1] * 6
    assert [got[r].local_hardware_ranks for r in (7, 9, 13, 14)] == [(7,), (0,), (2,), (2,)]
    assert [got[r].local_rank for r in range(15)] == list(range(9)) + list(range(6))
    assert {got[r].local_world_size for r in range(9)} == {9} and {got[r].local_world_size for r in range(9, 15)} == {6}
    assert got[14].visible_accelerators == ("2",)
    assert all(p.world_size == 15 and p.hardware_type == "Accelerator" and p.node_group == "g" for p in got.values())


def test_processes_share_resources_evenly_when_there_are_more_processes():
    c = cluster(4, [frankas("robot", "0-3", (0, 1, 2, 3))], {"env": {"node_group": "robot", "placement": "0-3:0-7"}})
    assert [p.hardware_ranks for p in plan(c)["env"]] == [(0,), (0,), (1,), (1,), (2,), (2,), (3,), (3,)]


def test_a_process_with_several_resources_owns_all_of_them_on_one_node():
    c = cluster(2, [gpus()], {"learner": {"node_group": "g", "placement": "0-7:0-1,8-15:2"}})
    recs = plan(c)["learner"]
    assert where(recs) == [
        (0, 0, (0, 1, 2, 3), (0, 1, 2, 3), 0, 2),
        (1, 0, (4, 5, 6, 7), (4, 5, 6, 7), 1, 2),
        (2, 1, tuple(range(8, 16)), tuple(range(8)), 0, 1),
    ]
    assert recs[1].visible_accelerators == ("4", "5", "6", "7")


def test_a_process_that_would_span_nodes_is_refused():
    c = cluster(2, [gpus()], {"learner": {"node_group": "g", "placement": "4-11:0"}})
    with pytest.raises(PlacementError, match="span nodes 0-1") as e:
        plan(c)
    assert e.value.path == "cluster.component_placement.learner.placement"


def test_short_form_places_each_listed_component_on_the_whole_cluster():
    c = cluster(1, [gpus("box", "0", 8)], {"learner,inference": "0-7"})
    p = plan(c)
    assert list(p) == ["learner", "inference"]
    for name in ("learner", "inference"):
        assert [r.hardware_ranks for r in p[name]] == [(i,) for i in range(8)]
        assert {r.node_group for r in p[name]} == {"cluster"}
        assert [r.visible_accelerators for r in p[name]] == [(str(i),) for i in range(8)]


def test_short_form_without_accelerators_uses_nodes_by_global_rank():
    c = cluster(3, [], {"agent": "1-2"})
    assert [(r.node_rank, r.hardware_type, r.hardware_ranks) for r in plan(c)["agent"]] == [
        (1, "node", (1,)),
        (2, "node", (2,)),
    ]


def test_cluster_group_counts_accelerators_across_all_groups_node_major():
    c = cluster(3, [gpus("a", "0", 2), gpus("b", "2", 4)], {"x": "all"})
    assert [(r.node_rank, r.local_hardware_ranks) for r in plan(c)["x"]] == [(0, (0,)), (0, (1,))] + [
        (2, (i,)) for i in range(4)
    ]


def test_reserved_node_group_uses_global_node_ranks_and_ignores_gpus():
    c = cluster(4, [gpus("g", "0-3", 8)], {"agent": {"node_group": "node", "placement": "0-1:0-199,2-3:200-399"}})
    recs = plan(c)["agent"]
    assert len(recs) == 400
    assert [recs[r].node_rank for r in (0, 99, 100, 199, 200, 299, 300, 399)] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert (
        recs[150].hardware_type == "node" and recs[150].hardware_ranks == (1,) and recs[150].visible_accelerators == ()
    )
    assert (recs[399].local_rank, recs[399].local_world_size) == (99, 100)


def test_group_without_hardware_or_accelerators_ranks_its_nodes_by_position():
    c = cluster(6, [{"label": "cpu", "node_ranks": [2, 4, 5]}], {"w": {"node_group": "cpu", "placement": "all"}})
    assert [(r.node_rank, r.hardware_ranks, r.hardware_type) for r in plan(c)["w"]] == [
        (2, (0,), "node"),
        (4, (1,), "node"),
        (5, (2,), "node"),
    ]


def test_robot_ranks_follow_config_order_and_local_ranks_count_per_node():
    g = frankas("arms", "0-1", (1, 0, 1))
    c = cluster(2, [g], {"env": {"node_group": "arms", "placement": "all"}})
    assert [(r.node_rank, r.hardware_ranks, r.local_hardware_ranks, r.hardware_type) for r in plan(c)["env"]] == [
        (1, (0,), (0,), "Franka"),
        (0, (1,), (0,), "Franka"),
        (1, (2,), (1,), "Franka"),
    ]


def test_camera_only_group_is_placed_on_realsense_ranks():
    cams = {
        "label": "cams",
        "node_ranks": 0,
        "hardware": {
            "type": "RealSense",
            "configs": [{"serial": "111", "node_rank": 0}, {"serial": "222", "node_rank": 0}],
        },
    }
    c = cluster(1, [cams], {"camera": {"node_group": "cams", "placement": "0-1"}})
    assert [(r.hardware_type, r.local_hardware_ranks) for r in plan(c)["camera"]] == [
        ("RealSense", (0,)),
        ("RealSense", (1,)),
    ]


def test_several_node_groups_in_one_entry_number_processes_across_the_list():
    c = cluster(
        4,
        [gpus("a800", "0-1", 2), gpus("4090", "2-3", 2)],
        {"rollout": [{"node_group": "a800", "placement": "0-3"}, {"node_group": "4090", "placement": "0-1:4-7"}]},
    )
    recs = plan(c)["rollout"]
    assert [(r.rank, r.node_group, r.node_rank, r.hardware_ranks) for r in recs] == [
        (0, "a800", 0, (0,)),
        (1, "a800", 0, (1,)),
        (2, "a800", 1, (2,)),
        (3, "a800", 1, (3,)),
        (4, "4090", 2, (0,)),
        (5, "4090", 2, (0,)),
        (6, "4090", 2, (1,)),
        (7, "4090", 2, (1,)),
    ]


def test_local_ranks_count_across_entries_that_share_a_node():
    c = cluster(
        1,
        [gpus("gpu", "0", 1), frankas("arm", "0", (0,))],
        {"w": [{"node_group": "gpu", "placement": "0"}, {"node_group": "arm", "placement": "0"}]},
    )
    assert [(r.local_rank, r.local_world_size) for r in plan(c)["w"]] == [(0, 2), (1, 2)]


def test_detected_accelerators_replace_the_declared_count():
    c = cluster(2, [gpus("g", "0-1", 8)], {"learner": {"node_group": "g", "placement": "all"}})
    recs = plan(c, accelerators={0: 2, 1: 1})["learner"]
    assert [(r.node_rank, r.local_hardware_ranks) for r in recs] == [(0, (0,)), (0, (1,)), (1, (0,))]


def test_group_with_no_detected_accelerators_falls_back_to_nodes():
    c = cluster(2, [{"label": "g", "node_ranks": "0-1"}], {"w": {"node_group": "g", "placement": "all"}})
    assert [r.hardware_type for r in plan(c, accelerators={0: 0, 1: 0})["w"]] == ["node", "node"]
    assert [r.hardware_type for r in plan(c, accelerators={0: 4})["w"]] == ["Accelerator"] * 4


@pytest.mark.parametrize("bad", [{5: 1}, {0: -1}, {0: "8"}, [8, 8], {"0": 8}])
def test_bad_accelerator_counts_are_refused(bad):
    c = cluster(2, [gpus()], {})
    with pytest.raises(PlacementError):
        plan(c, accelerators=bad)


# ------------------------------------------------------------------ rules


def test_resource_rank_out_of_range_names_the_group_size():
    c = cluster(2, [gpus()], {"learner": {"node_group": "g", "placement": "0-16"}})
    with pytest.raises(PlacementError, match=r"rank 16 .* 16 accelerator ranks \(0-15\)") as e:
        plan(c)
    assert e.value.path == "cluster.component_placement.learner.placement"


def test_gpu_ranks_without_declared_accelerators_explain_accelerators_per_node():
    c = cluster(2, [{"label": "g", "node_ranks": "0-1"}], {"learner": {"node_group": "g", "placement": "0-7"}})
    with pytest.raises(PlacementError, match="accelerators_per_node"):
        plan(c)


def test_process_ranks_must_start_at_zero_and_be_continuous():
    c = cluster(2, [gpus()], {"learner": {"node_group": "g", "placement": "0-1:1-2"}})
    with pytest.raises(PlacementError, match="continuous from 0 .* 0 is missing") as e:
        plan(c)
    assert e.value.path == "cluster.component_placement.learner"
    c = cluster(2, [gpus()], {"learner": {"node_group": "g", "placement": "0:0,1:2-3,2:5"}})
    with pytest.raises(PlacementError, match="1,4 are missing"):
        plan(c)


def test_each_process_rank_appears_exactly_once():
    c = cluster(2, [gpus()], {"learner": {"node_group": "g", "placement": "0-1:0-1,2-3:1-2"}})
    with pytest.raises(PlacementError, match="process rank 1 of learner is given twice"):
        plan(c)


def test_implicit_ranks_continue_after_the_highest_explicit_rank():
    c = cluster(2, [gpus()], {"learner": {"node_group": "g", "placement": "0:1,1:0,2-3"}})
    assert [r.hardware_ranks for r in plan(c)["learner"]] == [(1,), (0,), (2,), (3,)]


def test_all_with_process_ranks_checks_the_multiple_rule_against_the_group():
    c = cluster(2, [gpus()], {"learner": {"node_group": "g", "placement": "all:0-2"}})
    with pytest.raises(PlacementError, match="3 processes onto 16 resources"):
        plan(c)


def test_unknown_node_group_in_placement_is_a_config_error_with_suggestion():
    with pytest.raises(ConfigError, match="unknown node group 'a80'; did you mean 'a800'") as e:
        cluster(2, [gpus("a800")], {"learner": {"node_group": "a80", "placement": "0"}})
    assert e.value.path == "cluster.component_placement.learner.node_group"


def test_unknown_component_lookup_suggests_the_placed_ones():
    p = plan(cluster(2, [gpus()], {"learner": {"node_group": "g", "placement": "0"}}))
    with pytest.raises(PlacementError, match="'lerner' is not placed; did you mean 'learner'"):
        p["lerner"]


def test_component_placed_twice_is_refused():
    with pytest.raises(ConfigError, match="'learner' is already placed"):
        cluster(1, [], {"learner": "0", "rollout,learner": "0"})


def test_bad_placement_syntax_is_reported_at_load_with_its_path():
    with pytest.raises(PlacementError) as e:
        cluster(2, [gpus()], {"learner": {"node_group": "g", "placement": "0-3,2"}})
    assert e.value.path == "cluster.component_placement.learner.placement"
    with pytest.raises(PlacementError) as e:
        cluster(
            2, [gpus()], {"learner": [{"node_group": "g", "placement": "0"}, {"node_group": "g", "placement": "2-1"}]}
        )
    assert e.value.path == "cluster.component_placement.learner[1].placement"
    with pytest.raises(PlacementError) as e:
        cluster(2, [], {"learner": "x"})
    assert e.value.path == "cluster.component_placement.learner"


def test_absurd_process_counts_are_refused_before_allocating():
    c = cluster(1, [], {"a": {"node_group": "node", "placement": "0:0-9999999"}})
    with pytest.raises(PlacementError, match="more than 1000000 processes"):
        plan(c)


def test_reference_eighteen_node_example_plans_as_described():
    from rlhw.config import load_config

    p = plan(load_config("configs/hetero_18node.yaml").cluster)
    assert {k: len(v) for k, v in p.items()} == {"learner": 64, "rollout": 64, "env": 2, "agent": 400}
    assert {r.node_rank for r in p["learner"]} == set(range(8))
    assert {r.node_rank for r in p["rollout"]} == set(range(8, 16))
    assert [(r.node_rank, r.hardware_type) for r in p["env"]] == [(16, "Franka"), (17, "Franka")]
    assert p["rollout"][9].local_hardware_ranks == (1,) and p["rollout"][9].node_rank == 9


def test_placement_records_serialise_to_plain_json_types():
    rec = plan(cluster(1, [gpus("g", "0", 2)], {"a": "0"}))["a"][0]
    d = rec.to_json()
    assert d["hardware_ranks"] == [0] and d["visible_accelerators"] == ["0"] and d["component"] == "a"


def test_reference_implicit_example_two_blocks_of_four():
    c = cluster(1, [gpus("g", "0", 8)], {"learner": {"node_group": "g", "placement": "0-3,4-7"}})
    assert [r.hardware_ranks for r in plan(c)["learner"]] == [(i,) for i in range(8)]


def test_reference_eighteen_node_example_gives_each_node_its_software_environment():
    from rlhw.config import load_config

    c = load_config("configs/hetero_18node.yaml").cluster
    assert c.node_env(3).env_vars == {"GLOO_SOCKET_IFNAME": "eth0"}
    assert c.node_env(3).python_interpreter_path == "/opt/venv/openpi/bin/python3"
    assert c.node_env(9).env_vars == {"GLOO_SOCKET_IFNAME": "eth1"} and c.node_env(9).python_interpreter_path is None
    assert c.node_env(16).env_vars == {}
    arms = c.group("franka").hardware.configs
    assert [(a.robot_ip, a.node_rank, a.camera_serials) for a in arms] == [
        ("10.10.10.1", 16, ("322142001230", "322142001231")),
        ("10.10.10.2", 17, ("322142001232", "322142001233")),
    ]
