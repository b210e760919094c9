"""Fixtures of the learner tests."""

from __future__ import annotations

import pytest
import torch

from tests.ray_nodes import ray_cluster


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Every learner test runs with one torch intra-op thread, as `rlhw train` does (rlhw.cli.trainer): tiny
    networks on a shared 2-core machine only spin with two (measured 10-60x slower per update under load)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def ray_nodes():
    """Two raylets on this machine, node ranks 0 and 1 (2 CPUs each): each test module that asks gets its own."""
    with ray_cluster(
        {"num_cpus": 2, "labels": {"rlhw.node_rank": "0"}}, {"num_cpus": 2, "labels": {"rlhw.node_rank": "1"}}
    ) as rc:
        yield rc
