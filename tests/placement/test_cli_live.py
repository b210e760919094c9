"""`rlhw placement --address`: planning against a real running Ray cluster (a raylet with 2 GPUs declared)."""

from __future__ import annotations

import json

import pytest

from tests.ray_nodes import ray_cluster

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def ray_address():
    with ray_cluster({"num_cpus": 1, "num_gpus": 2, "labels": {"rlhw.node_rank": "0"}}, connect=False) as rc:
        yield rc.address


def write_config(tmp_path, accelerators_line: str) -> str:
    p = tmp_path / "live.yaml"
    p.write_text(
        "cluster:\n"
        "  num_nodes: 1\n"
        "  node_groups:\n"
        f"    - {{label: gpu, node_ranks: 0{accelerators_line}}}\n"
        "  component_placement:\n"
        "    learner: {node_group: gpu, placement: all}\n"
        "    agent: {node_group: node, placement: '0:0-1'}\n"
    )
    return str(p)


def test_live_plan_uses_the_gpus_ray_detects_on_each_node(ray_address, tmp_path, capsys):
    import ray

    from rlhw.cli.main import main

    # nothing declared: a dry run would see one node resource, the live cluster has 2 GPUs
    assert main(["placement", write_config(tmp_path, ""), "--address", ray_address, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    learner = doc["components"]["learner"]["processes"]
    assert [(p["hardware_type"], p["visible_accelerators"]) for p in learner] == [
        ("Accelerator", ["0"]),
        ("Accelerator", ["1"]),
    ]
    assert [p["local_rank"] for p in doc["components"]["agent"]["processes"]] == [0, 1]
    assert not ray.is_initialized()  # the command disconnected its driver; the cluster keeps running


def test_live_plan_refuses_a_declared_gpu_count_that_ray_does_not_see(ray_address, tmp_path, capsys):
    from rlhw.cli.main import main

    assert main(["placement", write_config(tmp_path, ", accelerators_per_node: 4"), "--address", ray_address]) == 2
    err = capsys.readouterr().err
    assert "accelerators_per_node: 4 but 2 are visible" in err
