"""WorkerAddress: hierarchical worker names, without Ray."""

from __future__ import annotations

import pytest

from rlhw import WorkerAddress
from rlhw.runtime.payload import LARGE_PAYLOAD_BYTES, payload_nbytes


def test_address_formats_and_parses_group_and_ranks():
    a = WorkerAddress.parse("learner:3:1")
    assert a.group == "learner" and a.ranks == (3, 1) and a.rank == 1
    assert str(a) == "learner:3:1"
    assert WorkerAddress.parse(str(WorkerAddress("env", (0,)))) == WorkerAddress("env", (0,))


def test_parent_and_child_walk_the_hierarchy():
    a = WorkerAddress("learner", (3,))
    assert str(a.child(0)) == "learner:3:0"
    assert a.child(0).parent == a
    assert a.parent == WorkerAddress("learner") and a.parent.rank is None and a.parent.parent is None


@pytest.mark.parametrize("text", ["learner:x", "learner:-1", ":0", "learner:1:"])
def test_malformed_addresses_are_rejected_with_the_expected_form(text):
    with pytest.raises(ValueError, match="worker|expected group:rank"):
        WorkerAddress.parse(text)


def test_payload_size_counts_arrays_tensors_and_containers_without_serializing():
    import numpy as np
    import torch

    assert payload_nbytes(np.zeros(10, np.float64)) == 80
    assert payload_nbytes(torch.zeros(4, dtype=torch.float32)) == 16
    assert payload_nbytes({"a": [np.zeros(8, np.uint8), b"xy"], "b": "text"}) == 10
    assert payload_nbytes({"img": np.zeros(LARGE_PAYLOAD_BYTES * 4, np.uint8)}) >= LARGE_PAYLOAD_BYTES
    assert payload_nbytes(object()) == 0
