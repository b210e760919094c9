"""Fixtures of the learner tests."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def one_torch_thread():
    """Every learner test runs with one torch intra-op thread, as `rlhw train` does (rlhw.cli.trainer): tiny
    networks on a shared 2-core machine only spin with two (measured 10-60x slower per update under load)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
