"""Vision tests run torch on one thread: on the 2 shared cores, intra-op threads of small convolutions
fight the other processes and made one training test 9x slower in wall-clock time."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
