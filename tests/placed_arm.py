"""A simulated stand-in for a placed arm: a cell's cluster (the env on a node group whose hardware is one Franka)
with its arm simulated (``env.sim: mujoco``), as `rlhw train --sim` runs a real cell's config. The placement
gives the env worker an arm, so its env runs behind a `rlhw serve-env` child (`rlhw.rl.env_transport`): the
tests of that path need no robot. No accelerators: this machine has none."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

ARM_GROUP = {
    "label": "arm",
    "node_ranks": 0,
    "hardware": {"type": "Franka", "configs": [{"robot_ip": "127.0.0.1", "node_rank": 0}]},
}


def placed_arm_cluster(learner: str = "0", num_nodes: int = 1) -> dict:
    """Robot rank 0 on node 0 (the env worker's), the rollout worker beside it, and the learner group at
    ``learner``, a placement on the plain nodes (``"1:0-1"``: node 1, two processes)."""
    return {
        "num_nodes": num_nodes,
        "component_placement": {
            "env": {"node_group": "arm", "placement": "0"},
            "rollout": {"node_group": "node", "placement": "0"},
            "learner": {"node_group": "node", "placement": learner},
        },
        "node_groups": [copy.deepcopy(ARM_GROUP)],
    }


def placed_arm(raw: dict, learner: str = "0", num_nodes: int = 1) -> dict:
    """``raw`` (a config as a dict) on that cluster, its arm simulated in MuJoCo."""
    return {**raw, "cluster": placed_arm_cluster(learner, num_nodes), "env": {**raw.get("env", {}), "sim": "mujoco"}}


def placed_arm_file(config: Path, directory: Path) -> Path:
    """``config`` rewritten with a placed arm into ``directory``, for the tests that start `rlhw` on a file."""
    path = Path(directory) / f"placed_arm_{Path(config).name}"
    path.write_text(yaml.safe_dump(placed_arm(yaml.safe_load(Path(config).read_text()))))
    return path
