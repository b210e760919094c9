"""Fixtures of the learner tests."""

from __future__ import annotations

import pytest
import torch

from rlhw.rl.pipeline.lane import DirectEnvEnd
from tests.ray_nodes import ray_cluster
from tests.rl.lane_peers import TOKEN


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


@pytest.fixture
def bystander(rollout_end):
    """A legitimate env worker (rank 1) on the requesting module's rollout end (``rollout_end``), which every
    misbehaving peer must leave served (the lane tests)."""
    env = DirectEnvEnd(rollout_end.address, TOKEN, env_rank=1, rollout_rank=0, timeout_s=5.0)
    yield env
    env.close()
