"""Replay buffer: a numpy ring of transitions, stored as one preallocated array per field.

A transition is a flat dict: ``obs/<name>``, ``next_obs/<name>``, ``action``, ``reward``, ``terminated``.
``terminated`` (not ``truncated``) stops bootstrapping: a time-limit cut or a robot fault is not an end state.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np


class ReplayBuffer:
    def __init__(self, capacity: int, seed: int = 0):
        self.capacity = int(capacity)
        self.rng = np.random.default_rng(seed)
        self.data: dict[str, np.ndarray] = {}
        self.pos = 0
        self.size = 0
        self.total_added = 0

    def __len__(self) -> int:
        return self.size

    def _allocate(self, example: Mapping[str, np.ndarray]) -> None:
        for k, v in example.items():
            v = np.asarray(v)
            self.data[k] = np.zeros((self.capacity,) + v.shape[1:], dtype=v.dtype)

    def add_batch(self, batch: Mapping[str, np.ndarray]) -> None:
        """Add N transitions (every field has leading dim N)."""
        n = len(batch["reward"])
        if n == 0:
            return
        if not self.data:
            self._allocate(batch)
        missing = set(self.data) - set(batch)
        if missing:
            raise KeyError(f"transition batch lacks fields {sorted(missing)}")
        idx = (self.pos + np.arange(n)) % self.capacity
        for k, store in self.data.items():
            store[idx] = np.asarray(batch[k]).reshape((n,) + store.shape[1:])
        self.pos = int((self.pos + n) % self.capacity)
        self.size = min(self.size + n, self.capacity)
        self.total_added += n

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        if self.size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        idx = self.rng.integers(0, self.size, size=batch_size)
        return {k: v[idx] for k, v in self.data.items()}


def stack_transitions(items: list[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """List of batched transition dicts (each field with a leading batch dim) -> one batched dict."""
    if not items:
        return {}
    return {k: np.concatenate([np.asarray(it[k]) for it in items]) for k in items[0]}
