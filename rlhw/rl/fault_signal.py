"""What a safety fault teaches the critic: the one place a fault step becomes a stored transition.

The env reports a step that a safety fault ended (`RobotEnv`: ``info["fault"]``) as truncated, with the last
good observation and the reward of the state the arm stopped in. Stored as it is, the critic bootstraps from
that observation, so an action that pressed on an obstacle looks like a pause and costs nothing. The learner,
not the env, decides what the step means (``train.fault_signal``, `FaultSignalConfig`): the env reports what
happened, the same for every client, and the recorded episode keeps the fault's kind (``fault``) so that
transitions rebuilt from disk (demos, a resumed run) are stored the same way as the live ones.

- ``truncate``: as reported (the behaviour before this signal existed).
- ``terminal``: an end state worth the step's reward minus ``penalty``. With a dense negative reward this makes a
  fault cheaper than going on, so it needs a penalty larger than an episode's cost.
- ``stand_still`` (default): an end state worth staying where the arm stopped forever, ``reward / (1 - gamma)``,
  minus ``penalty``: the discounted sum of that reward, so worse than any continuation that makes progress and
  on the task's own scale, whatever it is (0 for a sparse reward that was not earned).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from rlhw.config.train import FaultSignalConfig, FaultStore, TrainConfig
from rlhw.errors import FaultKind


@dataclass(frozen=True)
class FaultSignal:
    """``train.fault_signal`` with the discount it needs. `stored` maps a step's flags to the stored ones."""

    store: FaultStore
    penalty: float
    kinds: frozenset[FaultKind]
    gamma: float

    @classmethod
    def from_config(cls, train: TrainConfig) -> FaultSignal:
        cfg: FaultSignalConfig = train.fault_signal
        return cls(cfg.store, float(cfg.penalty), frozenset(cfg.kinds), float(train.sac.gamma))

    def teaches(self, kind: FaultKind | str | None) -> bool:
        """True when a step that fault ``kind`` ended is stored as this signal says (else as reported)."""
        return bool(kind) and FaultKind(kind) in self.kinds

    def stored(self, reward, terminated, faults: Sequence[FaultKind | str | None]) -> tuple[np.ndarray, np.ndarray]:
        """The reward (float32) and terminated flag (bool) to store for n steps: ``reward`` and ``terminated``
        (n,) as the env reported them, ``faults`` the kind of fault that ended each step, None or "" for none."""
        reward = np.array(reward, np.float32, copy=True).reshape(-1)
        terminated = np.array(terminated, bool, copy=True).reshape(-1)
        if self.store is FaultStore.TRUNCATE and self.penalty == 0.0:
            return reward, terminated
        hit = np.array([self.teaches(k) for k in faults], bool).reshape(-1)
        if not hit.any():
            return reward, terminated
        if self.store is FaultStore.STAND_STILL:  # gamma < 1 here: the config refuses stand_still with gamma 1
            reward[hit] = reward[hit] / (1.0 - self.gamma)
        reward[hit] -= self.penalty
        terminated[hit] |= self.store is not FaultStore.TRUNCATE
        return reward, terminated


AS_REPORTED = FaultSignal(FaultStore.TRUNCATE, 0.0, frozenset(), 0.99)
"""Every step stored as the env reported it (tests and tools that store no learner's transitions)."""
