"""Rollout worker (placement component ``rollout``): batched policy inference for a set of env workers.

Its loop takes every `EnvStep` waiting for it on its step lane (rlhw.rl.pipeline.lane: a stream from each of
its env workers; the messages are defined in rlhw.rl.pipeline.messages: each
carries the observations of all the env instances of one env worker that want an action), runs the policy
once for all of them (on its GPU when it has one), answers ONE `Actions` per env worker (with the version of
the weights that chose each action, -1 for a uniform random one, recorded with the step for audits) and
hands the transitions that came with the messages (already stacked) to its feeder thread, which forwards
them to the ``replay`` channel, spread over the learner ranks. Exploration is SAC's own stochastic policy,
after uniform random actions until the controller says the warm-up is over; eval observations get the
deterministic (mean) action (one forward pass gives both).

New `PolicyWeights` arrive on the ``weights`` channel (key = its rank); the feeder thread loads them into a
copy of the network that is swapped in whole, so neither a slow learner nor a channel call ever stalls the
loop that answers the robots. The policy and the feeder are `rlhw.rl.pipeline.acting`'s, shared with an env
worker that acts next to its arm.

The loop thread is on the step-critical path of every robot it serves, so it takes its node's robot-loop
isolation (``env_configs``: ``loop_cpus`` and ``loop_priority``) like the env worker's loop: on a
one-workstation layout the learner then cannot hold back an action.
"""

from __future__ import annotations

import threading

import numpy as np
import torch

from rlhw.config.root import Config
from rlhw.rl.acting import ActingPolicy
from rlhw.rl.pipeline.acting import Feeder, ReplayForwarder, WeightsFollower
from rlhw.rl.pipeline.lane import DirectRolloutEnd, LaneAddress, LaneError
from rlhw.rl.pipeline.lane_frames import env_step_bound
from rlhw.rl.pipeline.messages import Actions, EnvStep, RolloutProgress
from rlhw.rl.sac import resolve_device
from rlhw.rl.seeds import SeedStream, rank_seed
from rlhw.robot.spec import EnvSpec
from rlhw.runtime.isolation import apply_loop_isolation
from rlhw.runtime.worker import Worker


class RolloutWorker(Worker):
    def __init__(
        self,
        config: Config,
        num_learner_ranks: int,
        channel_prefix: str = "",
        lane_token: bytes | None = None,
    ):
        torch.set_num_threads(1)
        self.config, self.cfg = config, config.train
        self.channel_prefix = channel_prefix
        # Env rank e is served by rollout rank e % num_rollout, each on a stream of its own.
        self.lane = open_rollout_lane(config, self.info.node_ip, lane_token)
        self.replay = ReplayForwarder(channel_prefix, num_learner_ranks, self.cfg.step_timeout_s)
        self.weights = WeightsFollower(channel_prefix, key=self.rank)
        self.device = resolve_device(self.cfg.device)
        self.isolation = config.cluster.node_env(self.info.node_rank).isolation
        self.loop_isolation: dict | None = None  # what took effect in the loop thread (its start sets it)
        self.policy: ActingPolicy | None = None  # built from the env spec in setup()
        self.feeder: Feeder | None = None  # replay out, weights in (setup() starts it)
        self.served = 0
        self.batches = 0
        self.error: str | None = None
        self.stopping = False
        self.thread: threading.Thread | None = None

    def setup(self, spec: EnvSpec) -> None:
        """Build the policy network from the env spec and start the loop."""
        self.policy = ActingPolicy(
            spec, self.cfg.sac, self.device, seed=rank_seed(self.cfg.seed, SeedStream.ACTING, self.rank)
        )
        self.lane.limit(env_step_bound(spec, self.config.env.num_envs))  # no frame larger than the spec allows
        self.feeder = Feeder(self.policy, self.replay, self.weights, name=f"rollout-feeder-{self.rank}")
        self.thread = threading.Thread(target=self._loop, daemon=True, name=f"rollout-{self.rank}")
        self.thread.start()

    def lane_address(self) -> LaneAddress:
        """Where its env workers connect their step lanes."""
        return self.lane.address

    def set_exploration(self, random_actions: bool) -> None:
        self.policy.random_actions = bool(random_actions)

    def poll(self) -> RolloutProgress:
        return RolloutProgress(
            rank=self.rank,
            served=self.served,
            batches=self.batches,
            weights_version=self.policy.version if self.policy else -1,
            error=self.error,
            loop_isolation=self.loop_isolation,
        )

    def stop_loop(self) -> None:
        """Stop the loop thread and release what it holds (called through the group before it is killed)."""
        self.stopping = True
        if self.thread is not None:
            self.thread.join(timeout=10)
        if self.feeder is not None:
            self.feeder.close()
        self.lane.close()

    # ---- loop
    def _loop(self) -> None:
        try:
            self.loop_isolation = apply_loop_isolation(self.isolation)  # this thread: Linux applies it per thread
            while not self.stopping:
                self.feeder.check()
                msgs = self.lane.receive(timeout=0.2)
                if msgs:
                    self._serve(msgs)
        except BaseException as e:  # noqa: BLE001 - reported through poll()
            self.error = f"{type(e).__name__}: {e}"

    def _serve(self, msgs: list[EnvStep]) -> None:
        """One policy call for every instance waiting in ``msgs``; one `Actions` back per env worker."""
        want = []
        for m in msgs:
            if m.transitions is not None:
                self.feeder.add(m.transitions)
            if m.wanted:
                want.append(m)
        if not want:
            return
        if len(want) == 1:
            obs, deterministic = want[0].obs, np.asarray(want[0].evaluating, bool)
        else:
            obs = {k: np.concatenate([m.obs[k] for m in want]) for k in want[0].obs}
            deterministic = np.concatenate([m.evaluating for m in want]).astype(bool)
        answer = self.policy.act(obs, deterministic)
        start = 0
        for m in want:
            n = m.wanted
            try:
                self.lane.answer(m.env, Actions(answer.actions[start : start + n], answer.versions[start : start + n]))
            except LaneError:  # that env worker's lane broke (dropped and logged); its own loop reports it
                pass
            start += n
        self.served += len(deterministic)
        self.batches += 1


def open_rollout_lane(config: Config, node_ip: str, token: bytes | None) -> DirectRolloutEnd:
    """The rollout end of the step lane, listening on this node's IP."""
    if token is None:
        raise ValueError("a step lane needs the run's lane token (the Pipeline passes it)")
    return DirectRolloutEnd(node_ip or "127.0.0.1", token, config.train.step_timeout_s)
