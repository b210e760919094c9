"""Acting: the policy that chooses a robot's actions, wherever it runs, and what it hands to the learners.

``train.policy_at`` says where that is:

- ``rollout`` (default): on the rollout workers (GPU nodes), one batched forward pass for many env workers,
  which reach it over their step lane (rlhw.rl.pipeline.lane);
- ``env``: in each env worker, next to its arm, as SERL's acting process (its "actor") does: no hop at all
  between observation and action. It suits a robot node with a GPU, or small policies; the rollout group is
  then not launched.

Both use the same pieces: `ActingPolicy` (`rlhw.rl.acting`, `rlhw eval`'s too: the network, exploration, and
the version of the weights behind each action), and a `Feeder` thread that forwards transitions to the learner ranks in batches
(`ReplayForwarder`) and loads new weights from the ``weights`` channel (`WeightsFollower`, into a copy of the
network, swapped in whole), so the thread that acts never waits on a channel. Next to the arm,
`PolicyNextToArm` is the env worker's step lane: it answers in the robot loop's own thread.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from rlhw.config.root import Config
from rlhw.errors import RlhwError
from rlhw.rl.acting import ActingPolicy
from rlhw.rl.pipeline.lane import LaneError
from rlhw.rl.pipeline.messages import REPLAY_CHANNEL, WEIGHTS_CHANNEL, Actions, EnvStep, PolicyWeights, expect
from rlhw.rl.replay import TransitionBatch
from rlhw.rl.seeds import SeedStream, rank_seed
from rlhw.robot.spec import EnvSpec

REPLAY_FLUSH_S = 0.1
REPLAY_FLUSH_N = 64
WEIGHTS_POLL_S = 0.25


class WeightsFollower:
    """Loads the newest `PolicyWeights` waiting on the weights channel (key = this holder's rank), if any."""

    def __init__(self, channel_prefix: str, key: int):
        from rlhw.runtime.channel import Channel

        self.name, self.key = channel_prefix + WEIGHTS_CHANNEL, key
        self.channel = Channel.connect(self.name, timeout_s=60)

    def refresh(self, policy: ActingPolicy) -> None:
        waiting = self.channel.qsize(key=self.key)
        if waiting:
            latest = expect(
                self.channel.get_batch(count=waiting, key=self.key, timeout=5.0)[-1], PolicyWeights, self.name
            )
            policy.load(latest)


class ReplayForwarder:
    """Transitions to the ``replay`` channel, stacked into batches (every 64 rows or 0.1 s), spread round-robin
    over the learner ranks."""

    def __init__(self, channel_prefix: str, num_learner_ranks: int, timeout_s: float):
        from rlhw.runtime.channel import Channel

        self.channel = Channel.connect(channel_prefix + REPLAY_CHANNEL, timeout_s=60)
        self.num_learner_ranks, self.timeout_s = num_learner_ranks, timeout_s
        self.pending: list[TransitionBatch] = []
        self.rows = 0
        self.next_rank = 0
        self.last_flush = time.monotonic()

    def add(self, batch: TransitionBatch) -> None:
        self.pending.append(batch)
        self.rows += len(batch["reward"])

    def take(self, force: bool = False) -> TransitionBatch | None:
        """The pending transitions as one batch once enough waited (or ``force``); None otherwise."""
        if not self.pending:
            return None
        if not force and self.rows < REPLAY_FLUSH_N and time.monotonic() - self.last_flush < REPLAY_FLUSH_S:
            return None
        batch = concat_transitions(self.pending)
        self.pending, self.rows, self.last_flush = [], 0, time.monotonic()
        return batch

    def put(self, batch: TransitionBatch) -> None:
        self.channel.put(batch, key=self.next_rank, timeout=self.timeout_s)
        self.next_rank = (self.next_rank + 1) % self.num_learner_ranks


class FeederError(RlhwError):
    """The feeder thread failed: transitions cannot reach the learner ranks, or weights cannot arrive."""


class Feeder:
    """Transitions out to the learner ranks and new weights in, in a thread of its own (``name``), so the thread
    that acts (a robot loop, a rollout worker's loop) never waits on a channel: on a busy node a channel call
    is a Ray call that can stall for tens of ms. Its failure is raised by `check` in the acting thread."""

    def __init__(self, policy: ActingPolicy, replay: ReplayForwarder, weights: WeightsFollower, name: str):
        self.policy, self.replay, self.weights = policy, replay, weights
        self.error: BaseException | None = None
        self._lock = threading.Lock()  # guards replay.pending between the acting thread and the feeder
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._feed, daemon=True, name=name)
        self._thread.start()

    def add(self, transitions: TransitionBatch) -> None:
        with self._lock:
            self.replay.add(transitions)

    def check(self) -> None:
        if self.error is not None:
            raise FeederError(
                f"the feeder thread failed, so transitions no longer reach the learners: "
                f"{type(self.error).__name__}: {self.error}"
            )

    def _feed(self) -> None:
        last_weights = 0.0
        try:
            while not self._stop.wait(REPLAY_FLUSH_S / 2):
                self._flush(force=False)
                if time.monotonic() - last_weights > WEIGHTS_POLL_S:
                    self.weights.refresh(self.policy)
                    last_weights = time.monotonic()
            self._flush(force=True)
        except BaseException as e:  # noqa: BLE001 - raised in the acting thread by check()
            self.error = e

    def _flush(self, force: bool) -> None:
        with self._lock:
            batch = self.replay.take(force)
        if batch is not None:
            self.replay.put(batch)  # outside the lock: the acting thread never waits on the channel

    def close(self) -> None:
        """Stop; what is still pending goes out first."""
        self._stop.set()
        self._thread.join(timeout=self.replay.timeout_s + 5)


def concat_transitions(batches: list[TransitionBatch]) -> TransitionBatch:
    """Stacked transition batches from env messages -> one replay batch (field names of rlhw.rl.replay)."""
    if len(batches) == 1:
        return batches[0]
    return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}


class PolicyNextToArm:
    """The env worker's step lane when it acts itself (``train.policy_at: env``): `send` answers at once in
    the calling thread; a `Feeder` forwards the transitions and follows the weights."""

    def __init__(
        self, spec: EnvSpec, config: Config, env_rank: int, num_learner_ranks: int, channel_prefix: str, device
    ):
        cfg = config.train
        self.policy = ActingPolicy(spec, cfg.sac, device, seed=rank_seed(cfg.seed, SeedStream.ACTING, env_rank))
        self.feeder = Feeder(
            self.policy,
            ReplayForwarder(channel_prefix, num_learner_ranks, cfg.step_timeout_s),
            WeightsFollower(channel_prefix, key=env_rank),
            name=f"policy-feeder-{env_rank}",
        )
        self.answer: Actions | None = None

    def set_exploration(self, random_actions: bool) -> None:
        self.policy.random_actions = bool(random_actions)

    def send(self, msg: EnvStep) -> None:
        self.feeder.check()
        if msg.transitions is not None:
            self.feeder.add(msg.transitions)
        if msg.wanted:
            self.answer = self.policy.act(msg.obs, np.asarray(msg.evaluating, bool))

    def actions(self) -> Actions:
        answer, self.answer = self.answer, None
        if answer is None:
            raise LaneError("actions() without an observation sent first: the env worker's loop is out of step")
        return answer

    def close(self) -> None:
        self.feeder.close()
