"""The messages of the training pipeline, one frozen dataclass each: the contract between its processes.

    env worker --EnvStep (obs channel, key = rollout rank)--> rollout worker
    rollout worker --Actions (actions channel, key = env rank)--> env worker
    rollout worker --transition batch (replay channel, key = actor rank)--> actor worker
    actor worker rank 0 --PolicyWeights (weights channel, key = rollout rank)--> rollout worker
    env worker --EnvProgress, rollout worker --RolloutProgress (``poll()``, Ray calls)--> controller

Why dataclasses: these cross process boundaries (pickled through Ray channels), so a field renamed on one
side would otherwise surface as a ``KeyError`` deep in the other process. A receiver checks the type of
what it got with `expect`, which names the channel and both types.

Shapes: ``k`` is the number of env instances of one env worker that want an action at this step (0 to
``env.num_envs``); ``n`` the number of transitions a message carries; ``...`` an observation's or the
action's per-instance shape from the env's `rlhw.robot.spec.EnvSpec`.
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rlhw.rl.replay import TransitionBatch  # the transitions an EnvStep carries, in the replay buffer's fields

OBS_CHANNEL = "rlhw.train.obs"
ACTION_CHANNEL = "rlhw.train.actions"
REPLAY_CHANNEL = "rlhw.train.replay"
WEIGHTS_CHANNEL = "rlhw.train.weights"

EpisodeResult = tuple[float, bool, int, int]
"""A finished episode: (return, success, length in steps, steps an operator executed)."""


class MessageTypeError(TypeError):
    """A pipeline process received something other than the message its channel carries."""


def expect(message: Any, cls: type, channel: str) -> Any:
    """``message`` if it is a ``cls``; else a clear error naming the channel and both types."""
    if not isinstance(message, cls):
        raise MessageTypeError(f"{channel} carries {cls.__name__} messages, but received a "
                               f"{type(message).__module__}.{type(message).__qualname__}; are both ends of the "
                               "pipeline running the same rlhw version?")
    return message


@dataclass(frozen=True, slots=True)
class EnvStep:
    """One env step of one env worker, batched whatever ``env.num_envs`` is.

    ``env``: the env worker's rank; the rollout worker answers with `Actions` on the actions channel, key = env.
    ``obs``: ``{name: (k, ...) array}``, the observations of the k instances that want an action; None when k = 0.
    ``rows``: (k,) those instances' indices in the env worker's batch, in the order of ``obs``.
    ``evaluating``: bool (k,), which of them are in an eval episode (they get the deterministic action).
    ``transitions``: the train transitions this step produced (a `TransitionBatch`), or None.
    """

    env: int
    obs: dict[str, np.ndarray] | None
    rows: tuple[int, ...]
    evaluating: np.ndarray
    transitions: TransitionBatch | None = None

    @property
    def wanted(self) -> int:
        """How many actions the env worker waits for (k)."""
        return len(self.evaluating)


@dataclass(frozen=True, slots=True)
class Actions:
    """The rollout worker's answer to one `EnvStep` with k > 0: one row per instance in the order of its ``rows``.

    ``actions``: float32 (k, ...), within the action bounds.
    ``versions``: int64 (k,), the version of the policy weights that chose each action (the number of SAC
    updates behind them; -1 for a uniform random action). The recorder stores it with the step.
    """

    actions: np.ndarray
    versions: np.ndarray


@dataclass(frozen=True, slots=True)
class PolicyWeights:
    """The policy network's weights (`SAC.policy_state`, numpy), and their version (updates behind them)."""

    version: int
    state: dict[str, np.ndarray]


@dataclass(frozen=True, slots=True)
class EnvProgress:
    """An env worker's answer to ``poll()``: counters, and what finished since the previous poll.

    ``train_steps``: train steps collected since the worker started (every instance's); ``episodes`` and
    ``eval_results``: finished train and eval episodes since the last poll (each handed over once);
    ``idle``: no work asked for and no episode running; ``error``: why the robot loop failed (None: it runs);
    ``status``: idle, waiting (for the learner, between episodes), episode or failed; ``restarts``: env server
    children restarted; ``faults``: robot faults and refused steps since the last poll, as text for the log;
    ``eval_pending``: eval episodes still wanted; ``utd_wait_s``: seconds the loop has waited for the learner
    (async mode's UTD gate, rlhw.rl.pipeline.utd_gate) since the worker started.
    """

    rank: int
    train_steps: int
    idle: bool
    status: str
    restarts: int
    eval_pending: int
    episodes: list[EpisodeResult] = field(default_factory=list)
    eval_results: list[EpisodeResult] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    error: str | None = None
    utd_wait_s: float = 0.0


@dataclass(frozen=True, slots=True)
class RolloutProgress:
    """A rollout worker's answer to ``poll()``: actions served, policy calls (batches), the weights version it
    acts with (-1: none yet), why its loop failed (None: it runs), and the robot-loop isolation its loop thread
    runs with (read back from the OS, as an env worker's ``loop_isolation``; None until the loop starts)."""

    rank: int
    served: int
    batches: int
    weights_version: int
    error: str | None = None
    loop_isolation: dict | None = None


def encode_env_step(msg: EnvStep) -> bytes:
    """An env message as one bytes object (pickle protocol 5). Why: Ray serializes a message of ~20 small
    numpy arrays field by field, and the channel actor decodes and re-encodes it on the way through;
    for an 8-instance reach message one bytes object measured ~1.2 ms less per put and ~0.7 ms less
    per get on the 2-core VM. Large messages (camera images) still go through the object store: the
    channel wraps big bytes like any other large payload."""
    return pickle.dumps(expect(msg, EnvStep, OBS_CHANNEL), protocol=5)


def decode_env_step(data: bytes) -> EnvStep:
    """The `EnvStep` in ``data``; `MessageTypeError` when the obs channel brought anything else."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        return expect(data, EnvStep, OBS_CHANNEL)  # not even encoded: still a clear error
    return expect(pickle.loads(data), EnvStep, OBS_CHANNEL)
