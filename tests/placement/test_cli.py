"""`rlhw placement` as a user runs it: exit codes, one-line errors, the JSON shape, the table."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HETERO = str(ROOT / "configs/hetero_18node.yaml")


def rlhw(*args: str, timeout: float = 120):
    return subprocess.run(
        [sys.executable, "-m", "rlhw.cli.main", "placement", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


@pytest.mark.timeout(180)
def test_json_output_has_exactly_the_documented_shape():
    out = rlhw(HETERO, "--dry-run", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert list(doc) == ["num_nodes", "components"]
    assert doc["num_nodes"] == 18
    assert list(doc["components"]) == ["learner", "rollout", "env", "agent"]
    learner = doc["components"]["learner"]
    assert list(learner) == ["world_size", "processes"] and learner["world_size"] == 64
    assert learner["processes"][0] == {
        "rank": 0,
        "node_rank": 0,
        "node_group": "a800",
        "hardware_type": "Accelerator",
        "hardware_ranks": [0],
        "local_hardware_ranks": [0],
        "local_rank": 0,
        "local_world_size": 8,
        "visible_accelerators": ["0"],
    }
    env = doc["components"]["env"]["processes"]
    assert [(p["node_rank"], p["hardware_type"], p["hardware_ranks"], p["visible_accelerators"]) for p in env] == [
        (16, "Franka", [0], []),
        (17, "Franka", [1], []),
    ]
    agent = doc["components"]["agent"]
    assert agent["world_size"] == 400 and agent["processes"][250]["node_rank"] == 2
    assert agent["processes"][250]["hardware_type"] == "node"


@pytest.mark.timeout(180)
def test_dry_run_table_lists_every_component_and_group():
    out = rlhw(HETERO, "--dry-run")
    assert out.returncode == 0, out.stderr
    for word in ("learner", "rollout", "env", "agent", "a800", "4090", "franka", "Franka", "Accelerator", "dry run"):
        assert word in out.stdout
    assert "56-63 of 64" in out.stdout  # the last 8 learner processes on node 7


@pytest.mark.timeout(180)
def test_a_bad_config_exits_2_with_one_line_and_no_traceback():
    out = rlhw(HETERO, "cluster.num_nodes=17", "--dry-run")
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        "rlhw placement: config error: cluster.node_groups[2].node_ranks: 17 is outside the cluster's node ranks "
        "0-16 (num_nodes: 17); raise num_nodes or fix node_ranks"
    ]


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    "args, words",
    [
        ([HETERO, "cluster.num_nodes"], "is not key=value"),
        (["configs/does_not_exist.yaml"], "not found"),
        ([HETERO, "cluster.component_placement.learner.placement=0-64"], "rank 64"),
        ([HETERO, "cluster.node_groups.0.nodes_ranks=1"], "did you mean 'node_ranks'"),
        ([HETERO, "cluster.node_groups.2.hardware.type=Frank"], "did you mean 'Franka'"),
    ],
)
def test_user_errors_exit_2_with_one_line_naming_the_problem(args, words, capsys, monkeypatch):
    from rlhw.cli.main import main

    monkeypatch.chdir(ROOT)
    assert main(["placement", *args, "--dry-run"]) == 2
    out = capsys.readouterr()
    assert out.out == ""
    lines = out.err.strip().splitlines()
    assert len(lines) == 1, out.err
    assert lines[0].startswith("rlhw placement: config error: ") and words in lines[0]


@pytest.mark.timeout(60)
def test_placement_command_imports_neither_ray_nor_torch():
    code = (
        "import sys, argparse\n"
        "from rlhw.cli import placement\n"
        "p = argparse.ArgumentParser(); placement.add_arguments(p)\n"
        f"assert placement.run(p.parse_args([{HETERO!r}, '--dry-run', '--json'])) == 0\n"
        "heavy = sorted(m for m in ('ray', 'torch', 'grpc', 'mujoco') if m in sys.modules)\n"
        "assert not heavy, heavy\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["num_nodes"] == 18


def test_compact_rows_describe_every_process_exactly():
    from rlhw.cli.placement import compact_rows
    from rlhw.config import load_config_dict
    from rlhw.placement import plan

    cfg = load_config_dict(
        {
            "cluster": {
                "num_nodes": 3,
                "node_groups": [{"label": "g", "node_ranks": "0-2", "accelerators_per_node": 8}],
                "component_placement": {
                    "a": {"node_group": "g", "placement": "0-1:0-3,3-5,7-10:7-14,12-15:15,16-23:16-17"},
                    "b": {"node_group": "node", "placement": "0-2:0-8"},
                },
            }
        }
    )
    for records in plan(cfg.cluster).values():
        rows = compact_rows(records)
        assert [p for row in rows for p in row] == records
        for row in rows:
            first, k = row[0], len(row[0].hardware_ranks)
            # how many processes in a row share the first one's resources, before the next resource starts
            share = next((j for j, p in enumerate(row) if p.hardware_ranks != first.hardware_ranks), len(row))
            assert len(row) % share == 0 or len(row) < share
            for j, p in enumerate(row):
                offset = (j // share) * k if first.node_group != "node" else 0
                assert p.node_rank == first.node_rank
                assert p.hardware_ranks == tuple(h + offset for h in first.hardware_ranks)
