"""Where checks run: on a multi-node config each node's checks run in a Ray task pinned to the node
with that rlhw.node_rank label, started with the node's env vars; a node that is not there FAILs."""

from __future__ import annotations

import pytest

from rlhw.smoke import FAIL, PASS
from tests.ray_nodes import ray_cluster
from tests.smoke.conftest import smoke

CONFIG = """
cluster:
  num_nodes: 3
  component_placement:
    env: {node_group: arm, placement: 0}
  node_groups:
    - label: arm
      node_ranks: 1
      env_configs:
        - node_ranks: 1
          env_vars:
            - RLHW_SMOKE_MARK: "node-one"
            - GLOO_SOCKET_IFNAME: "lo"
      hardware:
        type: Franka
        configs:
          - {robot_ip: "127.0.0.1", node_rank: 1, camera_serials: []}
env:
  sim: mock
"""


@pytest.fixture(scope="module")
def two_ray_nodes():
    with ray_cluster(
        {"num_cpus": 1, "labels": {"rlhw.node_rank": "0"}},
        {"num_cpus": 1, "labels": {"rlhw.node_rank": "1"}},
        connect=False,
    ) as rc:
        rc.wait_for_nodes()
        yield rc


@pytest.mark.timeout(180)
def test_each_nodes_checks_run_on_that_node_with_its_env_vars_and_a_missing_node_fails(two_ray_nodes, tmp_path):
    import ray

    path = tmp_path / "three_nodes.yaml"
    path.write_text(CONFIG)
    report = smoke(str(path), checks=("nodes", "robots"), ray_address=two_ray_nodes.address, timeout_s=10.0)
    assert report.mode == "ray"
    by = {(r.target, r.check): r for r in report.results}
    node_of = {n["NodeID"]: n["Labels"].get("rlhw.node_rank") for n in ray.nodes() if n["Alive"]}
    # node 1's env vars reached the task that ran its checks, and `lo` is a real interface
    env = by[("node 1", "env_vars")]
    assert env.status == PASS and "runtime_env" in env.detail and "RLHW_SMOKE_MARK=node-one" in env.detail
    assert by[("node 0", "python")].status == PASS and by[("node 0", "env_vars")].status == "SKIP"
    # the (simulated) arm of node 1 was checked on node 1
    arm = by[("mock-sim0", "state")]
    assert arm.status == PASS and arm.node_rank == 1
    assert node_of[arm.measured["ray_node_id"]] == "1"
    assert node_of[by[("node 0", "python")].measured["ray_node_id"]] == "0"
    # node 2 is in the config but not in Ray
    missing = by[("node 2", "reached")]
    assert missing.status == FAIL and "rlhw.node_rank=2" in missing.detail and "ray start" in missing.hint
    assert report.exit_code == 1
