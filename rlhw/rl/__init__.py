"""RL: SAC, replay, episodes on disk, the run directory, the episode loop and the local runner. The
env/rollout/learner pipeline (`rlhw.rl.pipeline`) builds on this package, never the other way round; `rlhw train`
picks the runner (`rlhw.cli.trainer.train`).

Names are imported lazily so that importing rlhw.rl does not pull in torch or Ray.
"""

from __future__ import annotations

from rlhw._lazy import lazy_getattr

_LAZY = {
    "SAC": "rlhw.rl.sac",
    "ObsLayout": "rlhw.rl.sac",
    "ReplayBuffer": "rlhw.rl.replay",
    "MixedReplay": "rlhw.rl.replay",
    "load_demos": "rlhw.rl.demos",
    "EpisodeRecorder": "rlhw.rl.episodes",
    "load_episode": "rlhw.rl.episodes",
    "RunDir": "rlhw.rl.rundir",
    "train_local": "rlhw.rl.local",
}

__all__ = list(_LAZY)

__getattr__ = lazy_getattr(__name__, _LAZY)
