"""Resuming a run (`rlhw train --resume`): one implementation for the local runner and every learner rank.

A run's state lives in two places: the checkpoint (weights, optimizers, counters) and the recorded episodes
(every transition, flushed step by step). The replay buffer is not checkpointed: it is rebuilt from the
episodes, which also hold the steps collected after the last checkpoint. The env step count is therefore
the count of recorded train steps, not the checkpoint's.
"""

from __future__ import annotations

from rlhw.rl.checkpoint import saved_counters
from rlhw.rl.episodes import EpisodeKind, episode_transitions, recorded_episodes
from rlhw.rl.fault_signal import FaultSignal
from rlhw.rl.replay import MixedReplay
from rlhw.rl.rundir import RunDir
from rlhw.rl.session import Counters


def resume_run(
    run_dir: RunDir, agent, replay: MixedReplay, fault_signal: FaultSignal, rank: int = 0, world_size: int = 1
) -> Counters:
    """Load the checkpoint's weights into ``agent`` (a `SAC`) and return the run's counters; put this rank's share
    of the recorded train episodes back into ``replay`` (episode file i goes to rank i % ``world_size``; their
    intervention steps into the demo buffer too: `MixedReplay.add_batch`), each step stored as
    ``fault_signal`` says. ``env_steps``: every recorded train step of the run, whichever rank holds it."""
    ckpt = run_dir.load_checkpoint()
    counters = Counters()
    if ckpt is not None:
        agent.load_state_dict(ckpt["sac"])
        counters = saved_counters(ckpt)
    counters.env_steps = 0
    for i, ep in recorded_episodes(run_dir.episodes, EpisodeKind.TRAIN):
        counters.env_steps += ep.length
        if i % world_size == rank:
            replay.add_batch(episode_transitions(ep, fault_signal))
    return counters
