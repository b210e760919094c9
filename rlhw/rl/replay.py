"""Replay buffer: a numpy ring of transitions, stored as one preallocated array per field.

A transition is a flat dict: ``obs/<name>``, ``next_obs/<name>``, ``action``, ``reward``, ``terminated``,
``intervened``. ``terminated`` (not ``truncated``) stops bootstrapping: a time-limit cut is not an end state; a
step that a safety fault ended is stored as ``train.fault_signal`` says (rlhw/rl/fault_signal.py). ``action``
is what the arm executed; ``intervened`` (1.0 / 0.0) marks an operator's step.

`MixedReplay` is what the learners sample from: online replay plus a demo buffer (RLPD's symmetric sampling).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

TransitionBatch = dict[str, np.ndarray]
"""n transitions stacked in the field names above: ``obs/<name>`` and ``next_obs/<name>`` (n, ...) in the
observation's dtype, ``action`` float32 (n, ...), ``reward``, ``terminated`` and ``intervened`` float32 (n,).
A plain dict because the buffer stores one array per field, whatever the observation names are."""


def transition_batch(
    obs: Mapping[str, np.ndarray], next_obs: Mapping[str, np.ndarray], action, reward, terminated, intervened
) -> TransitionBatch:
    """n stacked transitions (every argument has a leading dimension n) in the replay buffer's field names.
    The one place that builds them: the local runner and the env worker both call it."""
    out = {f"obs/{k}": np.asarray(v) for k, v in obs.items()}
    out.update({f"next_obs/{k}": np.asarray(v) for k, v in next_obs.items()})
    out["action"] = np.asarray(action, np.float32)
    out["reward"] = np.asarray(reward, np.float32)
    out["terminated"] = np.asarray(terminated, np.float32)
    out["intervened"] = np.asarray(intervened, np.float32)
    return out


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


class MixedReplay:
    """Online replay plus a demo buffer; every batch draws exactly ``round(demo_ratio * batch_size)`` samples
    from the demo buffer (while it holds any) and the rest from online replay (RLPD).

    The demo buffer holds the ``train.demos`` episodes and, as in HIL-SERL, every intervention transition:
    ``add_batch`` puts the rows with ``intervened`` set into BOTH buffers, so a correction is replayed as
    often as a demonstration. With demo_ratio 0, or an empty demo buffer, this is plain SAC's replay.
    """

    def __init__(self, capacity: int, demo_ratio: float, seed: int = 0):
        self.online = ReplayBuffer(capacity, seed=seed)
        self.demos = ReplayBuffer(capacity, seed=seed + 1_000_003)
        self.demo_ratio = float(demo_ratio)

    def __len__(self) -> int:
        return len(self.online)

    def add_demos(self, batch: Mapping[str, np.ndarray]) -> None:
        self.demos.add_batch(batch)

    def add_batch(self, batch: Mapping[str, np.ndarray]) -> None:
        """Online transitions; those an operator executed go to the demo buffer too."""
        self.online.add_batch(batch)
        intervened = np.asarray(batch.get("intervened", ()), dtype=bool).reshape(-1)
        if intervened.any():
            self.demos.add_batch({k: np.asarray(v)[intervened] for k, v in batch.items()})

    def demo_count(self, batch_size: int) -> int:
        """How many samples of a batch come from the demo buffer."""
        return round(self.demo_ratio * batch_size) if len(self.demos) else 0

    def sample(self, batch_size: int) -> dict[str, np.ndarray]:
        n_demo = self.demo_count(batch_size)
        if n_demo == batch_size:
            return self.demos.sample(batch_size)
        online = self.online.sample(batch_size - n_demo)
        if n_demo == 0:
            return online
        demos = self.demos.sample(n_demo)
        return {k: np.concatenate([online[k], demos[k]]) for k in online}


def stack_transitions(items: list[Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """List of batched transition dicts (each field with a leading batch dim) -> one batched dict."""
    if not items:
        return {}
    return {k: np.concatenate([np.asarray(it[k]) for it in items]) for k in items[0]}
