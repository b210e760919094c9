"""Learner worker (placement component ``learner``): SAC updates, data-parallel over the group.

It was called the actor worker, and the component ``actor``, until "actor" also meant the policy network
(`rlhw.rl.sac.Actor`), Ray's actors and SERL's acting process; configs may still say ``actor``.

Every rank keeps its own replay (`MixedReplay`: online transitions, filled from the ``replay`` channel, key =
its rank: rollout workers spread transitions over the ranks; and a demo buffer holding ALL of ``train.demos``
on every rank, plus the intervention transitions that reach this rank) and samples its own batches;
gradients are averaged over ranks with torch.distributed all-reduce (gloo on CPU, NCCL on GPU) inside
`SAC.update`, after rank 0's initial weights were broadcast, so the ranks' weights stay identical. Each rank
seeds with its own seed (`rlhw.rl.seeds`: ``SeedStream.LEARNER``); on resume each loads its share of the
recorded episodes (`rlhw.rl.resume`). Rank 0 publishes policy weights to the processes that act (rollout workers, or env workers next to their
arms), versioned by the number of updates behind them (the ``policy_version`` recorded with every step),
returns the metrics the controller logs and writes checkpoints.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import torch
import torch.distributed as dist

from rlhw.config.root import Config
from rlhw.rl.checkpoint import INIT_FROM, PolicyCheckpoint, checkpoint_state, policy_contract, warm_start
from rlhw.rl.demos import load_demos
from rlhw.rl.fault_signal import FaultSignal
from rlhw.rl.pipeline.messages import REPLAY_CHANNEL, WEIGHTS_CHANNEL, PolicyWeights
from rlhw.rl.replay import MixedReplay
from rlhw.rl.resume import resume_run
from rlhw.rl.rundir import RunDir
from rlhw.rl.sac import SAC, resolve_device
from rlhw.rl.seeds import SeedStream, rank_seed, seed_process
from rlhw.rl.session import Counters
from rlhw.rl.spaces import AgentSpace
from rlhw.robot.spec import EnvSpec
from rlhw.runtime.isolation import apply_learner_threads
from rlhw.runtime.worker import Worker


@dataclass(frozen=True)
class TrainStats:
    """What one `LearnerWorker.train` call did: ``updates`` run (0: a rank had no data yet, nothing was trained),
    the buffer sizes after them, and ``losses``, each ``losses/<name>`` metric of `SAC.update` averaged over the
    updates (empty when none ran), as the controller logs them."""

    updates: int
    replay_size: int
    demo_buffer_size: int
    losses: Mapping[str, float] = field(default_factory=dict)


class LearnerWorker(Worker):
    def __init__(self, config: Config, run_dir: str, num_acting: int, channel_prefix: str = ""):
        # learner_threads of this node's env_configs, else 1 (small MLPs on shared cores: see rlhw.cli.trainer)
        self.learner_threads = apply_learner_threads(config.cluster.node_env(self.info.node_rank).isolation)
        from rlhw.runtime.channel import Channel

        self.config, self.cfg = config, config.train
        self.run_dir = RunDir(run_dir) if self.rank == 0 else None
        self.run_path = Path(run_dir)
        self.num_acting = num_acting  # processes that act (rollout workers, or env workers with policy_at=env)
        self.replay_ch = Channel.connect(channel_prefix + REPLAY_CHANNEL, timeout_s=60)
        self.weights_ch = Channel.connect(channel_prefix + WEIGHTS_CHANNEL, timeout_s=60)
        seed = rank_seed(self.cfg.seed, SeedStream.LEARNER, self.rank)
        seed_process(seed)
        self.replay = MixedReplay(self.cfg.buffer_size, self.cfg.demo_ratio, seed=seed)
        self.device = resolve_device(self.cfg.device)
        if self.device.type == "cuda":
            torch.cuda.set_device(0)  # the placement's CUDA_VISIBLE_DEVICES already narrowed it
        self.agent: SAC | None = None

    def setup(self, spec: EnvSpec, resume: bool = False) -> Counters:
        """Build SAC from the env spec; load the demos (every rank all of them); on resume load the checkpoint
        and this rank's share of the recorded episodes (their intervention steps into the demo buffer too);
        else warm-start rank 0 from ``train.init_from``; then make every rank start from rank 0's weights.
        Returns the resumed counters."""
        space = AgentSpace.from_spec(spec)
        self.agent = SAC(space.layout, space.low, space.high, self.cfg.sac, device=self.device)
        self.contract = policy_contract(spec, self.cfg.sac)
        # provenance None: the controller checked it against the env config before any rank started
        signal = FaultSignal.from_config(self.cfg)
        for batch in load_demos(
            self.cfg.demos, space.observation_shapes, space.action_shape, provenance=None, fault_signal=signal
        ):
            self.replay.add_demos(batch)
        counters = Counters()
        if resume:
            counters = resume_run(RunDir(self.run_path), self.agent, self.replay, signal, self.rank, self.world_size)
        elif self.cfg.init_from and self.rank == 0:  # checked by the controller; the broadcast below shares it
            warm_start(self.agent, PolicyCheckpoint.load(self.cfg.init_from, INIT_FROM))
        self.agent.broadcast_weights(0)
        self.publish_weights()
        return counters

    def _drain(self) -> int:
        """Move every transition batch waiting for this rank into the replay buffer."""
        added = 0
        while True:
            waiting = self.replay_ch.qsize(key=self.rank)
            if not waiting:
                return added
            for batch in self.replay_ch.get_batch(count=waiting, key=self.rank, timeout=10.0):
                self.replay.add_batch(batch)
                added += len(batch["reward"])

    def train(self, updates: int) -> TrainStats:
        """``updates`` SAC steps in lockstep with the other ranks (every rank gets the same call)."""
        self._drain()
        # All ranks must agree to train: one rank with an empty buffer would deadlock the all-reduce.
        ready = torch.tensor([float(len(self.replay))])
        if dist.is_initialized():
            dist.all_reduce(ready, op=dist.ReduceOp.MIN)
        if ready.item() < 1 or updates <= 0:
            return TrainStats(0, len(self.replay), len(self.replay.demos))
        sums: dict[str, float] = {}
        for _ in range(updates):
            m = self.agent.update(self.replay.sample(self.cfg.sac.batch_size))
            for k, v in m.items():
                sums[k] = sums.get(k, 0.0) + v
            if self.agent.updates % self.cfg.weights_every_updates == 0:
                self.publish_weights()
        losses = {k: v / updates for k, v in sums.items()}
        return TrainStats(updates, len(self.replay), len(self.replay.demos), losses)

    def publish_weights(self) -> None:
        """Rank 0 puts the policy weights on the weights channel, once per acting process (key = its rank); their
        version is the number of updates behind them."""
        if self.rank != 0:
            return
        state = {k: v.numpy() for k, v in self.agent.policy_state().items()}
        for r in range(self.num_acting):
            self.weights_ch.put(PolicyWeights(version=self.agent.updates, state=state), key=r, timeout=30)

    def save_checkpoint(self, counters: Counters) -> str | None:
        """Rank 0 writes the checkpoint with the controller's ``counters``."""
        if self.rank != 0:
            return None
        return str(
            self.run_dir.save_checkpoint(checkpoint_state(self.agent, self.contract, counters), counters.env_steps)
        )

    def weights_digest(self) -> str:
        return self.agent.weights_digest()

    def device_name(self) -> str:
        """Where this rank trains (``cuda``, ``cpu``): run.json records it, so a run says whether its GPU was used."""
        return str(self.device)

    def stats(self) -> dict:
        return {
            "rank": self.rank,
            "replay_size": len(self.replay),
            "demo_buffer_size": len(self.replay.demos),
            "updates": self.agent.updates if self.agent else 0,
            "pid": os.getpid(),
        }
