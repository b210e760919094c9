"""LeRobotDataset v3.0 on disk, and how rlhw's episodes are laid out in it.

The facts of the format (LeRobot's `lerobot.datasets`, codebase version "v3.0"), as rlhw writes and reads it:

    meta/info.json                                   codebase_version, fps, robot_type, features, paths, totals
    meta/stats.json                                  per feature: min, max, mean, std, count, q01 ... q99
    meta/tasks.parquet                               one row per task text (the pandas index), task_index
    meta/episodes/chunk-000/file-000.parquet         one row per episode: length, tasks, dataset_from/to_index,
                                                     data/ and videos/<key>/ chunk and file, from/to_timestamp
    data/chunk-000/file-000.parquet                  one row per frame: the non-video features and timestamp,
                                                     frame_index, episode_index, index, task_index
    videos/<key>/chunk-000/file-000.mp4              one stream per camera, episodes back to back

A frame's video picture is the one shown at ``from_timestamp + timestamp`` of its episode's file, with
``timestamp = frame_index / fps``.

rlhw's layout (``RlhwLayout``, kept in info.json under ``"rlhw"``): frame t of an episode holds the
observation that action t was chosen from, action t (what the arm executed) and what followed it:

- ``observation.state``: every proprio observation, flattened and concatenated in `ObsLayout` order
  (sorted by name), float32; ``names`` lists one ``key[i]`` per component;
- ``observation.images.<camera>``: the ``image_<camera>`` observation, as video;
- ``action``; ``next.reward``; ``next.done`` (the episode ended after this step: terminated or truncated);
  ``next.truncated`` (it ended by the time limit, or a safety fault, not the task); ``success``;
  ``intervened``; ``policy_version`` (-1: no policy chose the action); ``fault`` (the `FaultKind` value of
  a safety fault that ended the episode at this step, else "": a string feature).

The names of ``observation.state`` say where each observation sits (`RlhwLayout.from_state_names`); they
survive LeRobot's own dataset tools (merge, split), which rebuild info.json without rlhw's section.

An episode of T steps has T + 1 observations; the last one (after the final action) has no frame of its
own, so it is kept with the episode's row in meta/episodes: ``rlhw/final/observation.state`` and
``rlhw/final/observation.images.<camera>`` (PNG bytes, lossless). ``rlhw/meta`` holds the episode's
recording metadata as JSON: as the episode holds it (with ``env_config``, the whole env config section it
was recorded with, which `train.demos` checks), plus ``source`` (the episode file).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rlhw.errors import ConfigError
from rlhw.rl.episodes import Episode
from rlhw.robot.env import IMAGE_PREFIX

_NAME = re.compile(r"^(.+?)(?:\[(\d+)\])?$")
CODEBASE_VERSION = "v3.0"
INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
EPISODES_DIR = "meta/episodes"
CHUNK_FILE = "chunk-{chunk_index:03d}/file-{file_index:03d}"
DATA_PATH = "data/" + CHUNK_FILE + ".parquet"
VIDEO_PATH = "videos/{video_key}/" + CHUNK_FILE + ".mp4"
EPISODES_PATH = EPISODES_DIR + "/" + CHUNK_FILE + ".parquet"
CHUNKS_SIZE = 1000  # files per chunk directory (LeRobot's default)
DATA_FILE_MB = 100  # LeRobot's defaults for the largest data and video file
VIDEO_FILE_MB = 200

STATE = "observation.state"
IMAGES = "observation.images."
ACTION = "action"
REWARD = "next.reward"
DONE = "next.done"
TRUNCATED = "next.truncated"
SUCCESS = "success"
INTERVENED = "intervened"
POLICY_VERSION = "policy_version"
FAULT = "fault"
FINAL = "rlhw/final/"
META = "rlhw/meta"
#: Columns every v3.0 data file has besides the features a recorder declares.
DEFAULT_FEATURES = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}


def video_key(camera: str) -> str:
    return IMAGES + camera


@dataclass(frozen=True)
class RlhwLayout:
    """Where each rlhw observation lives in an export: ``state`` holds (key, shape) in the order of
    ``observation.state``; ``cameras`` the camera names (observation ``image_<camera>``, feature
    ``observation.images.<camera>``) with their (H, W, 3) shapes."""

    state: tuple[tuple[str, tuple[int, ...]], ...]
    cameras: tuple[tuple[str, tuple[int, int, int]], ...]
    action_shape: tuple[int, ...]

    @classmethod
    def of_episode(cls, episode: Episode, source: str) -> RlhwLayout:
        """The layout of one recorded episode; ConfigError for an observation that is neither a vector nor an
        H x W x 3 uint8 image."""
        from rlhw.rl.sac import ObsLayout

        obs = episode.obs
        try:
            layout = ObsLayout.from_shapes(
                {k: v.shape[1:] for k, v in obs.items()}, {k: v.dtype for k, v in obs.items()}
            )
        except ValueError as e:
            raise ConfigError("EPISODES", f"{source}: {e}") from None
        cameras = []
        for key, shape in layout.images:
            if not key.startswith(IMAGE_PREFIX) or shape[2] != 3:
                raise ConfigError(
                    "EPISODES",
                    f"{source}: image observation {key!r} {shape} is not an "
                    f"{IMAGE_PREFIX}<camera> H x W x 3 frame; only those export as video",
                )
            cameras.append((key[len(IMAGE_PREFIX) :], tuple(shape)))
        return cls(tuple(layout.proprio), tuple(cameras), tuple(episode.action.shape[1:]))

    @property
    def state_dim(self) -> int:
        return int(sum(int(np.prod(s)) for _, s in self.state))

    def state_names(self) -> list[str]:
        names = []
        for key, shape in self.state:
            n = int(np.prod(shape))
            names += [key] if shape == () else [f"{key}[{i}]" for i in range(n)]
        return names

    @classmethod
    def from_state_names(cls, names: Sequence[str]) -> tuple[tuple[str, tuple[int, ...]], ...]:
        """(key, shape) of each observation in ``observation.state``, from the names `state_names` wrote:
        ``key`` for a scalar, ``key[0] ... key[n-1]`` for a vector. LeRobot's own tools (merge, split...)
        keep a feature's names but rebuild info.json, so this is what an export is read back from."""
        out: list[tuple[str, int]] = []
        for name in names:
            m = _NAME.match(str(name))
            if not m:
                raise ValueError(f"{name!r} is not a name rlhw writes (KEY or KEY[i])")
            key, index = m.group(1), m.group(2)
            if index is None:
                out.append((key, -1))
            elif out and out[-1][0] == key and int(index) == out[-1][1]:
                out[-1] = (key, out[-1][1] + 1)
            elif int(index) == 0:
                out.append((key, 1))
            else:
                raise ValueError(f"{name!r} does not follow {key}[{int(index) - 1}]")
        return tuple((key, () if n < 0 else (n,)) for key, n in out)

    def to_json(self) -> dict:
        return {
            "format": 1,
            "state": [[k, list(s)] for k, s in self.state],
            "cameras": [[c, list(s)] for c, s in self.cameras],
            "action_shape": list(self.action_shape),
        }


def read_info(root: Path, where: str) -> dict:
    """meta/info.json of the dataset at ``root``; ConfigError (at ``where``) when it is not a v3.0 LeRobotDataset."""
    path = root / INFO_PATH
    try:
        info = json.loads(path.read_text())
    except FileNotFoundError:
        raise ConfigError(where, f"{root} is not a LeRobotDataset: it has no {INFO_PATH}") from None
    except (OSError, ValueError) as e:
        raise ConfigError(where, f"cannot read {path}: {e}") from None
    version = str(info.get("codebase_version", ""))
    if not version.startswith("v3."):
        raise ConfigError(
            where,
            f"{root} is a LeRobotDataset {version or 'of unknown version'}; rlhw reads v3.0 "
            "(convert it with LeRobot's convert_dataset_v21_to_v30 first)",
        )
    return info
