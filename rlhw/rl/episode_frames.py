"""Recorded episodes as a success classifier's training frames (`EpisodeFrames`): what `rlhw train-reward` and the
run's own retraining (rlhw/rl/classifier_refresh.py) read."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from rlhw.errors import ConfigError
from rlhw.rl.episodes import load_episode
from rlhw.vision.labels import EpisodeFrames


def episode_frames(files: list[Path], labels: str = "recorded") -> list[EpisodeFrames]:
    """EpisodeFrames of the episode ``files``, in the order given; with
    ``labels="judge"`` their success is the simulator judge's recorded verdict, with ``labels="judge-negatives"``
    only the frames the judge saw not done are labelled (0), the others left out (-1)."""
    episodes = []
    for f in files:
        try:
            ep = load_episode(f)
        except FileNotFoundError:
            continue  # a live run's episode finished (renamed) between the listing and now
        except (OSError, ValueError) as e:
            raise ConfigError("EPISODES", f"cannot read episode {f}: {e}") from None
        if ep is None:
            continue  # a reset with no step: nothing to label
        meta = dict(ep.meta)
        images = {k[len("image_") :]: v for k, v in ep.obs.items() if k.startswith("image_")}
        success = ep.success
        given = None
        if labels in ("judge", "judge-negatives"):
            if ep.judge_success is None:
                raise ConfigError(
                    "--judge-negatives" if labels == "judge-negatives" else "--labels",
                    f"episode {f} has no judge verdict (recorded on a real cell, or before "
                    "rehearsals existed); use --labels recorded",
                )
            success = ep.judge_success
            meta = {k: v for k, v in meta.items() if k not in ("operator_success", "operator_marks")}
            if labels == "judge-negatives":  # frame t+1 follows step t; the reset frame has no verdict
                given = np.concatenate([[-1], np.where(success, -1, 0)]).astype(np.int8)
        episodes.append(EpisodeFrames(str(f), images, success, meta, given))
    return episodes
