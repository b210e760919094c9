"""Rollout worker (placement component ``rollout``): batched policy inference for a set of env workers.

Its loop takes every message waiting for it on the ``obs`` channel (key = its rank; the message format
is in rlhw.rl.pipeline.env_worker: each carries the observations of all the env instances of one env
worker that want an action), runs the policy once for all of them (on its GPU when it has one), puts ONE
``(actions, policy_versions)`` pair per env worker (``actions`` channel, key = env rank; the version of the
weights that chose each action, -1 for a uniform random one, recorded with the step for audits) and forwards the transitions that came
with the messages (already stacked) to the ``replay`` channel, spread over the actor ranks. Exploration
is SAC's own stochastic policy, after uniform random actions until the controller says the warm-up is
over; eval observations get the deterministic (mean) action (one forward pass gives both).

New policy weights arrive on the ``weights`` channel (key = its rank). The loop looks there between
batches without blocking, so a slow learner never stalls a robot.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import torch

from rlhw.rl.pipeline.env_worker import (ACTION_CHANNEL, OBS_CHANNEL, REPLAY_CHANNEL, WEIGHTS_CHANNEL,
                                         decode_message)
from rlhw.rl.sac import Actor, ObsLayout, build_actor, obs_to_tensors, resolve_device
from rlhw.runtime.worker import Worker

_WEIGHTS_POLL_S = 0.25
_REPLAY_FLUSH_S = 0.1
_REPLAY_FLUSH_N = 64


class RolloutWorker(Worker):
    def __init__(self, config, num_actor: int, num_env: int, channel_prefix: str = ""):
        torch.set_num_threads(1)
        from rlhw.runtime.channel import Channel

        self.config, self.cfg = config, config.train
        self.num_actor = num_actor
        # Env rank e is served by rollout rank e % num_rollout; batching only helps with several.
        self.serves_several = len(range(self.rank, num_env, self.world_size)) > 1
        self.obs_ch = Channel.connect(channel_prefix + OBS_CHANNEL, timeout_s=60)
        self.act_ch = Channel.connect(channel_prefix + ACTION_CHANNEL, timeout_s=60)
        self.replay_ch = Channel.connect(channel_prefix + REPLAY_CHANNEL, timeout_s=60)
        self.weights_ch = Channel.connect(channel_prefix + WEIGHTS_CHANNEL, timeout_s=60)
        self.device = resolve_device(self.cfg.device)
        torch.manual_seed(self.cfg.seed + 2000 + self.rank)
        self.rng = np.random.default_rng(self.cfg.seed + 2000 + self.rank)
        self.actor: Actor | None = None
        self.random_actions = True
        self.weights_version = -1
        self.served = 0
        self.batches = 0
        self.error: str | None = None
        self.stopping = False
        self._pending: list[dict] = []  # stacked transition batches from env messages
        self._pending_rows = 0
        self._next_actor = 0
        self._last_flush = time.monotonic()
        self.thread: threading.Thread | None = None

    def setup(self, spec: dict) -> None:
        """Build the policy network from the env spec and start the loop."""
        layout = ObsLayout.from_shapes({k: v[0] for k, v in spec["observations"].items()},
                                       {k: v[1] for k, v in spec["observations"].items()})
        shape = spec["action_shape"]
        low = np.asarray(spec["action_low"] if spec["action_low"] is not None else -np.ones(shape), np.float32)
        high = np.asarray(spec["action_high"] if spec["action_high"] is not None else np.ones(shape), np.float32)
        self.layout, self.low, self.high = layout, low, high
        # The actor and the encoder it reads; both arrive with every weights message (SAC.policy_state).
        self.actor = build_actor(layout, low, high, self.cfg.sac).to(self.device).eval()
        # Warm up torch (first calls are slow) before any robot waits on this worker.
        dummy = {k: np.zeros((1, *v[0]), dtype=v[1]) for k, v in spec["observations"].items()}
        self._policy(dummy)
        self.thread = threading.Thread(target=self._loop, daemon=True, name=f"rollout-{self.rank}")
        self.thread.start()

    def set_exploration(self, random_actions: bool) -> None:
        self.random_actions = bool(random_actions)

    def poll(self) -> dict:
        return {"rank": self.rank, "served": self.served, "batches": self.batches, "error": self.error,
                "weights_version": self.weights_version}

    def stop_loop(self) -> None:
        """Stop the loop thread and release what it holds (called through the group before it is killed)."""
        self.stopping = True
        if self.thread is not None:
            self.thread.join(timeout=10)

    # ---- loop
    def _loop(self) -> None:
        from rlhw.runtime.channel import ChannelTimeout

        last_weights_check = 0.0
        try:
            while not self.stopping:
                now = time.monotonic()
                if now - last_weights_check > _WEIGHTS_POLL_S:
                    self._refresh_weights()
                    last_weights_check = now
                try:
                    first = decode_message(self.obs_ch.get(key=self.rank, timeout=0.2))
                except ChannelTimeout:
                    self._flush_replay(force=True)
                    continue
                msgs = [first]
                waiting = self.obs_ch.qsize(key=self.rank) if self.serves_several else 0
                if waiting:
                    msgs += map(decode_message, self.obs_ch.get_batch(count=waiting, key=self.rank, timeout=1.0))
                self._serve(msgs)
                self._flush_replay()
        except BaseException as e:  # noqa: BLE001 - reported through poll()
            self.error = f"{type(e).__name__}: {e}"

    def _serve(self, msgs: list[dict]) -> None:
        """One policy call for every instance waiting in ``msgs``; one action array back per env worker."""
        want = []
        for m in msgs:
            if m["transitions"] is not None:
                self._pending.append(m["transitions"])
                self._pending_rows += len(m["transitions"]["reward"])
            if len(m["eval"]):
                want.append(m)
        if not want:
            return
        if len(want) == 1:
            obs, deterministic = want[0]["obs"], np.asarray(want[0]["eval"], bool)
        else:
            obs = {k: np.concatenate([m["obs"][k] for m in want]) for k in want[0]["obs"]}
            deterministic = np.concatenate([m["eval"] for m in want]).astype(bool)
        k = len(deterministic)
        versions = np.full(k, self.weights_version, np.int64)
        if self.random_actions or self.weights_version < 0:
            actions = self.rng.uniform(self.low, self.high, size=(k, *self.low.shape)).astype(np.float32)
            versions[~deterministic] = -1
            if deterministic.any() and self.weights_version >= 0:
                actions[deterministic] = self._policy(obs)[1][deterministic]
        else:
            sample, mean = self._policy(obs)  # one forward pass gives both
            actions = np.where(deterministic.reshape(-1, *[1] * (sample.ndim - 1)), mean, sample) \
                if deterministic.any() else sample
        start = 0
        for m in want:
            n = len(m["eval"])
            self.act_ch.put((actions[start:start + n], versions[start:start + n]), key=m["env"],
                            timeout=self.cfg.step_timeout_s)
            start += n
        self.served += k
        self.batches += 1

    @torch.no_grad()
    def _policy(self, obs: dict) -> tuple[np.ndarray, np.ndarray]:
        """SAC's stochastic action and its mean (the deterministic action), for a batch of observations."""
        t = obs_to_tensors(obs, self.layout, self.device)
        sample, _, mean = self.actor.sample(t)
        return sample.cpu().numpy().astype(np.float32), mean.cpu().numpy().astype(np.float32)

    def _refresh_weights(self) -> None:
        waiting = self.weights_ch.qsize(key=self.rank)
        if not waiting:
            return
        latest = self.weights_ch.get_batch(count=waiting, key=self.rank, timeout=5.0)[-1]
        self.actor.load_state_dict({k: torch.as_tensor(np.array(v)) for k, v in latest["state"].items()})
        self.weights_version = int(latest["version"])

    def _flush_replay(self, force: bool = False) -> None:
        if not self._pending:
            return
        if not force and self._pending_rows < _REPLAY_FLUSH_N and time.monotonic() - self._last_flush < _REPLAY_FLUSH_S:
            return
        batch = _concat(self._pending)
        self._pending, self._pending_rows = [], 0
        self._last_flush = time.monotonic()
        self.replay_ch.put(batch, key=self._next_actor, timeout=self.cfg.step_timeout_s)
        self._next_actor = (self._next_actor + 1) % self.num_actor


def _concat(batches: list[dict]) -> dict[str, np.ndarray]:
    """Stacked transition batches from env messages -> one replay batch (field names of rlhw.rl.replay)."""
    if len(batches) == 1:
        return batches[0]
    return {k: np.concatenate([b[k] for b in batches]) for k in batches[0]}
