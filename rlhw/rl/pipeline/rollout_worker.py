"""Rollout worker (placement component ``rollout``): batched policy inference for a set of env workers.

Its loop takes every `EnvStep` waiting for it on its step lane (rlhw.rl.pipeline.lane: a direct stream from
each of its env workers, or the ``obs`` channel; the messages are defined in rlhw.rl.pipeline.messages: each
carries the observations of all the env instances of one env worker that want an action), runs the policy
once for all of them (on its GPU when it has one), answers ONE `Actions` per env worker (with the version of
the weights that chose each action, -1 for a uniform random one, recorded with the step for audits) and
forwards the transitions that came with the messages (already stacked) to the ``replay`` channel, spread
over the actor ranks. Exploration
is SAC's own stochastic policy, after uniform random actions until the controller says the warm-up is
over; eval observations get the deterministic (mean) action (one forward pass gives both).

New `PolicyWeights` arrive on the ``weights`` channel (key = its rank). The loop looks there between
batches without blocking, so a slow learner never stalls a robot.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import torch

from rlhw.rl.pipeline.lane import ChannelRolloutEnd, DirectRolloutEnd, LaneAddress, RolloutLaneEnd
from rlhw.rl.pipeline.messages import (REPLAY_CHANNEL, WEIGHTS_CHANNEL, Actions, EnvStep, PolicyWeights,
                                       RolloutProgress, TransitionBatch, expect)
from rlhw.rl.sac import Actor, build_actor, obs_to_tensors, resolve_device
from rlhw.rl.spaces import AgentSpace, zero_observations
from rlhw.robot.spec import EnvSpec
from rlhw.runtime.worker import Worker

_WEIGHTS_POLL_S = 0.25
_REPLAY_FLUSH_S = 0.1
_REPLAY_FLUSH_N = 64


class RolloutWorker(Worker):
    def __init__(self, config, num_actor_ranks: int, num_env: int, channel_prefix: str = "",
                 lane_token: bytes | None = None):
        torch.set_num_threads(1)
        from rlhw.runtime.channel import Channel

        self.config, self.cfg = config, config.train
        self.num_actor_ranks = num_actor_ranks  # the learners (actor worker group) transitions are spread over
        self.channel_prefix = channel_prefix
        # Env rank e is served by rollout rank e % num_rollout; batching only helps with several.
        self.serves_several = len(range(self.rank, num_env, self.world_size)) > 1
        self.lane: RolloutLaneEnd = open_rollout_lane(config, self.rank, self.info.node_ip, lane_token, channel_prefix,
                                                      self.serves_several)
        self.replay_ch = Channel.connect(channel_prefix + REPLAY_CHANNEL, timeout_s=60)
        self.weights_ch = Channel.connect(channel_prefix + WEIGHTS_CHANNEL, timeout_s=60)
        self.device = resolve_device(self.cfg.device)
        torch.manual_seed(self.cfg.seed + 2000 + self.rank)
        self.rng = np.random.default_rng(self.cfg.seed + 2000 + self.rank)
        self.policy: Actor | None = None  # the policy network (SAC's actor) this worker runs
        self.random_actions = True
        self.weights_version = -1
        self.served = 0
        self.batches = 0
        self.error: str | None = None
        self.stopping = False
        self._pending: list[TransitionBatch] = []  # stacked transition batches from env messages
        self._pending_rows = 0
        self._next_actor_rank = 0
        self._last_flush = time.monotonic()
        self.thread: threading.Thread | None = None

    def setup(self, spec: EnvSpec) -> None:
        """Build the policy network from the env spec and start the loop."""
        space = AgentSpace.from_spec(spec)
        self.layout, self.low, self.high = space.layout, space.low, space.high
        # The policy and the encoder it reads; both arrive with every weights message (SAC.policy_state).
        self.policy = build_actor(space.layout, space.low, space.high, self.cfg.sac).to(self.device).eval()
        # Warm up torch (first calls are slow) before any robot waits on this worker.
        self._policy(zero_observations(spec))
        self.thread = threading.Thread(target=self._loop, daemon=True, name=f"rollout-{self.rank}")
        self.thread.start()

    def lane_address(self) -> LaneAddress | None:
        """Where its env workers connect their direct lanes (None: the channel lane)."""
        return self.lane.address

    def set_exploration(self, random_actions: bool) -> None:
        self.random_actions = bool(random_actions)

    def poll(self) -> RolloutProgress:
        return RolloutProgress(rank=self.rank, served=self.served, batches=self.batches,
                               weights_version=self.weights_version, error=self.error)

    def stop_loop(self) -> None:
        """Stop the loop thread and release what it holds (called through the group before it is killed)."""
        self.stopping = True
        if self.thread is not None:
            self.thread.join(timeout=10)
        self.lane.close()

    # ---- loop
    def _loop(self) -> None:
        last_weights_check = 0.0
        try:
            while not self.stopping:
                now = time.monotonic()
                if now - last_weights_check > _WEIGHTS_POLL_S:
                    self._refresh_weights()
                    last_weights_check = now
                msgs = self.lane.receive(timeout=0.2)
                if not msgs:
                    self._flush_replay(force=True)
                    continue
                self._serve(msgs)
                self._flush_replay()
        except BaseException as e:  # noqa: BLE001 - reported through poll()
            self.error = f"{type(e).__name__}: {e}"

    def _serve(self, msgs: list[EnvStep]) -> None:
        """One policy call for every instance waiting in ``msgs``; one `Actions` back per env worker."""
        want = []
        for m in msgs:
            if m.transitions is not None:
                self._pending.append(m.transitions)
                self._pending_rows += len(m.transitions["reward"])
            if m.wanted:
                want.append(m)
        if not want:
            return
        if len(want) == 1:
            obs, deterministic = want[0].obs, np.asarray(want[0].evaluating, bool)
        else:
            obs = {k: np.concatenate([m.obs[k] for m in want]) for k in want[0].obs}
            deterministic = np.concatenate([m.evaluating for m in want]).astype(bool)
        actions, versions = self._act(obs, deterministic)
        start = 0
        for m in want:
            n = m.wanted
            self.lane.answer(m.env, Actions(actions[start:start + n], versions[start:start + n]))
            start += n
        self.served += len(deterministic)
        self.batches += 1

    def _act(self, obs: dict, deterministic: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Actions for a batch (uniform random during warm-up, except eval rows once weights arrived), and the
        version of the weights that chose each (-1: random)."""
        k = len(deterministic)
        versions = np.full(k, self.weights_version, np.int64)
        if self.random_actions or self.weights_version < 0:
            actions = self.rng.uniform(self.low, self.high, size=(k, *self.low.shape)).astype(np.float32)
            versions[~deterministic] = -1
            if deterministic.any() and self.weights_version >= 0:
                actions[deterministic] = self._policy(obs)[1][deterministic]
            return actions, versions
        sample, mean = self._policy(obs)  # one forward pass gives both
        if deterministic.any():
            sample = np.where(deterministic.reshape(-1, *[1] * (sample.ndim - 1)), mean, sample)
        return sample, versions

    @torch.no_grad()
    def _policy(self, obs: dict) -> tuple[np.ndarray, np.ndarray]:
        """SAC's stochastic action and its mean (the deterministic action), for a batch of observations."""
        t = obs_to_tensors(obs, self.layout, self.device)
        sample, _, mean = self.policy.sample(t)
        return sample.cpu().numpy().astype(np.float32), mean.cpu().numpy().astype(np.float32)

    def _refresh_weights(self) -> None:
        waiting = self.weights_ch.qsize(key=self.rank)
        if not waiting:
            return
        latest = expect(self.weights_ch.get_batch(count=waiting, key=self.rank, timeout=5.0)[-1], PolicyWeights,
                        self.channel_prefix + WEIGHTS_CHANNEL)
        self.policy.load_state_dict({k: torch.as_tensor(np.array(v)) for k, v in latest.state.items()})
        self.weights_version = int(latest.version)

    def _flush_replay(self, force: bool = False) -> None:
        if not self._pending:
            return
        if not force and self._pending_rows < _REPLAY_FLUSH_N and time.monotonic() - self._last_flush < _REPLAY_FLUSH_S:
            return
        batch = _concat(self._pending)
        self._pending, self._pending_rows = [], 0
        self._last_flush = time.monotonic()
        self.replay_ch.put(batch, key=self._next_actor_rank, timeout=self.cfg.step_timeout_s)
        self._next_actor_rank = (self._next_actor_rank + 1) % self.num_actor_ranks


def open_rollout_lane(config, rank: int, node_ip: str, token: bytes | None, channel_prefix: str,
                      serves_several: bool) -> RolloutLaneEnd:
    """The rollout end of ``train.step_lane``: a direct lane listening on this node's IP, or the channel relay."""
    timeout = config.train.step_timeout_s
    if config.train.step_lane == "direct":
        if token is None:
            raise ValueError("a direct step lane needs the run's lane token (the Pipeline passes it)")
        return DirectRolloutEnd(node_ip or "127.0.0.1", token, timeout)
    return ChannelRolloutEnd(channel_prefix, rank, serves_several, timeout)


def _concat(batches: list[TransitionBatch]) -> TransitionBatch:
    """Stacked transition batches from env messages -> one replay batch (field names of rlhw.rl.replay)."""
    if len(batches) == 1:
        return batches[0]
    return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
