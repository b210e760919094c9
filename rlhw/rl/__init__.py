"""RL pipeline: SAC, replay, episodes on disk, the run directory, and the env/rollout/learner pipeline.

    from rlhw.rl import train          # train(config, RunDir(path), resume=False) -> StopReason

Names are imported lazily so that importing rlhw.rl does not pull in torch or Ray.
"""

from __future__ import annotations

from rlhw._lazy import lazy_getattr

_LAZY = {
    "train": "rlhw.rl.trainer",
    "SAC": "rlhw.rl.sac",
    "ObsLayout": "rlhw.rl.sac",
    "ReplayBuffer": "rlhw.rl.replay",
    "MixedReplay": "rlhw.rl.replay",
    "load_demos": "rlhw.rl.demos",
    "EpisodeRecorder": "rlhw.rl.episodes",
    "load_episode": "rlhw.rl.episodes",
    "RunDir": "rlhw.rl.rundir",
    "train_local": "rlhw.rl.local",
    "train_pipeline": "rlhw.rl.pipeline.controller",
    "Pipeline": "rlhw.rl.pipeline.controller",
}

__all__ = list(_LAZY)

__getattr__ = lazy_getattr(__name__, _LAZY)
