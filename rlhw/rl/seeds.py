"""Seeds per process: each process of a training run draws from ``train.seed`` plus an offset for its role and its
rank, so that no two processes share a random stream and a rerun with the same seed draws the same numbers.

A local run (`rlhw.rl.local`) is one process in every role and uses ``train.seed`` itself. Each training
episode's reset seed is then drawn from the process's generator (`episode_seed`).
"""

from __future__ import annotations

from enum import IntEnum

import numpy as np
import torch


class SeedStream(IntEnum):
    """What a process's random numbers drive; the value is the offset of its seeds (ranks below 1000 each)."""

    LEARNER = 0  # learner rank r: network initialisation (before rank 0's broadcast), replay sampling
    EPISODES = 1000  # env worker r: the reset seeds of its episodes
    ACTING = 2000  # acting process r (rollout worker, or env worker next to its arm): exploration, warm-up actions


def rank_seed(seed: int, stream: SeedStream, rank: int) -> int:
    """The seed of rank ``rank`` in ``stream`` for a run of ``train.seed`` ``seed``."""
    return int(seed) + int(stream) + int(rank)


#: Training episodes reset with seeds below this; evaluation's seeds lie above it (`rlhw.rl.evaluate`), so no
#: eval episode repeats a training one.
TRAIN_SEEDS_BELOW = 2**31


def episode_seed(rng: np.random.Generator) -> int:
    """The reset seed of the next training episode (instance i of a batch gets it + i), drawn from ``rng``."""
    return int(rng.integers(TRAIN_SEEDS_BELOW))


def seed_process(seed: int) -> np.random.Generator:
    """Seed torch's global generator (network initialisation, SAC's sampling noise) with ``seed``, and return a
    numpy generator seeded alike for what the process draws itself."""
    torch.manual_seed(seed)
    return np.random.default_rng(seed)
