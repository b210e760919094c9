"""Helpers for the robot-layer tests: configs built through the real loader, mock-backed envs."""

from __future__ import annotations

import copy

import numpy as np
import pytest

from rlhw.config import load_config_dict

SIM_CLUSTER = {"num_nodes": 1, "component_placement": {"env": {"node_group": "node", "placement": "0"}}}

FRANKA_CLUSTER = {
    "num_nodes": 1,
    "component_placement": {"env": {"node_group": "franka", "placement": "0-1"}},
    "node_groups": [
        {
            "label": "franka",
            "node_ranks": "0",
            "hardware": {
                "type": "Franka",
                "configs": [
                    {"robot_ip": "127.0.0.1", "node_rank": 0, "camera_serials": ["322142001230", "322142001231"]},
                    {"robot_ip": "127.0.0.2", "node_rank": 0},
                ],
            },
        }
    ],
}


def make_config(env: dict | None = None, cluster: dict | None = None):
    """A validated Config; ``env`` defaults to the mock simulator."""
    env = {"sim": "mock", **(env or {})}
    return load_config_dict({"cluster": copy.deepcopy(cluster or SIM_CLUSTER), "env": env})


def greedy_action(obs: dict, scale: float = 0.025) -> np.ndarray:
    """The obvious reach policy: go straight to the target."""
    return np.clip(obs["to_target"] / scale, -1.0, 1.0).astype(np.float32)


@pytest.fixture
def mock_env():
    from rlhw.robot import make_env

    envs = []

    def build(**env):
        e = make_env(make_config(env))
        envs.append(e)
        return e

    yield build
    for e in envs:
        e.close()
