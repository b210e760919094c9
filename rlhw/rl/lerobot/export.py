"""rlhw episodes -> a LeRobotDataset v3.0 directory (the layout: rlhw.rl.lerobot.format).

Episodes are read one at a time and their camera frames go straight into one MP4 stream per camera, so an
export of a long run needs the memory of one episode plus the (small) per-frame columns.

The episode's own metadata goes with it (``rlhw/meta``), with ``env_config``, the whole env config section it
was recorded with (rlhw.rl.demos.PROVENANCE_KEY: what `train.demos` checks a demo against). An episode recorded
before episodes carried it gets the ``config.yaml`` of the run directory it lies in (``<run>/episodes/env<r>/``),
else the config file and overrides its metadata names, loaded again. fps is the recorded ``control_hz`` and
the task text the recorded ``task``, unless given.
"""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from rlhw.errors import ConfigError
from rlhw.rl.episodes import PROVENANCE_KEY, Episode, load_episode
from rlhw.rl.lerobot import format as F
from rlhw.rl.lerobot.tables import feature_stats, image_sample, vector_column, write_json, write_tasks
from rlhw.rl.lerobot.video import CODECS, VideoWriter, stream_info
from rlhw.robot.env import IMAGE_PREFIX


@dataclass(frozen=True)
class ExportOptions:
    repo_id: str = "rlhw/episodes"
    fps: int | None = None  # default: the recording config's env.control_hz
    task: str | None = None  # default: the recording config's env.task
    codec: str = "h264"  # rlhw.rl.lerobot.video says why not LeRobot's default AV1
    crf: int | None = None  # default: the codec's (h264 23, AV1 30)


@dataclass(frozen=True)
class ExportSummary:
    out: Path
    episodes: int
    frames: int
    fps: int
    cameras: tuple[str, ...]
    skipped: tuple[str, ...] = field(default_factory=tuple)


def recording_env_config(path: Path, meta: Mapping) -> dict | None:
    """The whole env config section ``path`` was recorded with (see the module docstring), or None."""
    if isinstance(meta.get(PROVENANCE_KEY), dict):
        return meta[PROVENANCE_KEY]
    for parent in list(path.parents)[:3]:
        snapshot = parent / "config.yaml"
        if snapshot.is_file() and (parent / "episodes").is_dir():
            import yaml

            env = (yaml.safe_load(snapshot.read_text()) or {}).get("env")
            if isinstance(env, dict):
                return env
    if meta.get("config"):
        from rlhw.config import load_config

        try:
            return load_config(meta["config"], list(meta.get("overrides", []))).env.model_dump(mode="json")
        except (ConfigError, OSError):
            return None
    return None


def _recorded(meta: Mapping, env_config: dict | None, key: str):
    """``env.<key>`` as the episode recorded it: its own meta, else the env config it was recorded with."""
    for value in (meta.get(key), (env_config or {}).get(key)):
        if value is not None:
            return value
    return None


def _fps(value, source: str) -> int:
    fps = float(value)
    if fps <= 0 or fps != int(fps):
        raise ConfigError(
            "--fps",
            f"{source}: the control rate {value} Hz is not a whole number of frames per second, "
            "which LeRobotDataset needs; pass --fps N (the timestamps become frame / N)",
        )
    return int(fps)


class _Streams:
    """One video file per camera, rolled to the next file once it passes LeRobot's size limit."""

    def __init__(self, out: Path, layout: F.RlhwLayout, fps: int, options: ExportOptions):
        self.out, self.layout, self.fps, self.options = out, layout, fps, options
        self.files = {cam: 0 for cam, _ in layout.cameras}
        self.writers = {cam: self._open(cam, shape) for cam, shape in layout.cameras}
        self.first_info: dict[str, Path] = {cam: w.path for cam, w in self.writers.items()}

    def _open(self, cam: str, shape) -> VideoWriter:
        index = self.files[cam]
        path = self.out / F.VIDEO_PATH.format(
            video_key=F.video_key(cam), chunk_index=index // F.CHUNKS_SIZE, file_index=index % F.CHUNKS_SIZE
        )
        return VideoWriter(path, self.fps, shape, self.options.codec, self.options.crf)

    def write_episode(self, images: dict[str, np.ndarray]) -> dict:
        """Append one episode's frames; its episodes-table columns (file, from/to timestamp per camera)."""
        columns = {}
        for cam, shape in self.layout.cameras:
            writer = self.writers[cam]
            if writer.size_bytes() >= F.VIDEO_FILE_MB * 1e6:
                writer.close()
                self.files[cam] += 1
                writer = self.writers[cam] = self._open(cam, shape)
            start = writer.frames_written
            writer.write(images[cam])
            key, index = F.video_key(cam), self.files[cam]
            columns.update(
                {
                    f"videos/{key}/chunk_index": index // F.CHUNKS_SIZE,
                    f"videos/{key}/file_index": index % F.CHUNKS_SIZE,
                    f"videos/{key}/from_timestamp": start / self.fps,
                    f"videos/{key}/to_timestamp": writer.frames_written / self.fps,
                }
            )
        return columns

    def close(self) -> None:
        for writer in self.writers.values():
            writer.close()


def _png(image: np.ndarray) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(image)).save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def _frames(ep: Episode, layout: F.RlhwLayout) -> dict[str, np.ndarray]:
    """One episode's per-frame feature columns (T rows)."""
    T = ep.length
    state = (
        np.concatenate([ep.obs[k][:T].reshape(T, -1) for k, _ in layout.state], axis=1)
        if layout.state
        else np.zeros((T, 0), np.float32)
    )
    return {
        F.STATE: state.astype(np.float32),
        F.ACTION: ep.action.reshape(T, -1),
        F.REWARD: ep.reward,
        F.DONE: ep.terminated | ep.truncated,
        F.TRUNCATED: ep.truncated,
        F.SUCCESS: ep.success,
        F.INTERVENED: ep.intervened,
        F.POLICY_VERSION: ep.policy_version,
        F.FAULT: np.asarray(ep.fault, str),
    }


def _check_layout(layout: F.RlhwLayout, first: F.RlhwLayout, path: Path, first_path: Path) -> None:
    if layout != first:
        raise ConfigError(
            "EPISODES",
            f"{path} has other observations or action than {first_path} "
            f"({layout} vs {first}); export episodes of one task config together",
        )


def _features(layout: F.RlhwLayout, info: dict[str, dict]) -> dict:
    feats = {F.STATE: {"dtype": "float32", "shape": [layout.state_dim], "names": layout.state_names()}}
    for cam, shape in layout.cameras:
        feats[F.video_key(cam)] = {
            "dtype": "video",
            "shape": list(shape),
            "names": ["height", "width", "channels"],
            "info": info.get(cam),
        }
    adim = int(np.prod(layout.action_shape))
    feats[F.ACTION] = {"dtype": "float32", "shape": [adim], "names": [f"action[{i}]" for i in range(adim)]}
    for key, dtype in (
        (F.REWARD, "float32"),
        (F.DONE, "bool"),
        (F.TRUNCATED, "bool"),
        (F.SUCCESS, "bool"),
        (F.INTERVENED, "bool"),
        (F.POLICY_VERSION, "int64"),
        (F.FAULT, "string"),
    ):
        feats[key] = {"dtype": dtype, "shape": [1], "names": None}
    return {**feats, **F.DEFAULT_FEATURES}


def export_episodes(paths: Sequence[Path], out: Path, options: ExportOptions = ExportOptions()) -> ExportSummary:
    """Write the episodes in ``paths`` (finished or interrupted rlhw episode files) as one LeRobotDataset at
    ``out``, which must not exist yet or be empty. ConfigError for a mixed or unexportable set of episodes."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise ConfigError("--out", f"{out} already exists and is not empty; give a new directory")
    if options.codec not in CODECS:
        raise ConfigError("--vcodec", f"{options.codec!r} is not one of {', '.join(CODECS)}")
    top = {"h264": 51, "libsvtav1": 63}[options.codec]
    if options.crf is not None and not 0 <= options.crf <= top:
        raise ConfigError("--crf", f"{options.crf} is outside {options.codec}'s range 0-{top} (lower: better, larger)")
    writer = _DatasetWriter(out, options)
    skipped = []
    try:
        for path in paths:
            ep = load_episode(path)
            if ep is None or not ep.length:
                skipped.append(str(path))
                continue
            writer.add(path, ep)
        if writer.episodes == 0:
            raise ConfigError("EPISODES", "no episode with a recorded step to export")
        writer.finish()
    except BaseException:
        writer.close()
        if out.is_dir():  # it was new or empty: leave no half-written dataset that a retry would refuse
            shutil.rmtree(out)
        raise
    writer.close()
    return ExportSummary(
        out, writer.episodes, writer.frames, writer.fps, tuple(c for c, _ in writer.layout.cameras), tuple(skipped)
    )


class _DatasetWriter:
    """Accumulates the frame and episode tables in memory, streams video to disk; `finish` writes the rest.
    The frame table is one parquet file (LeRobot rolls at 100 MB, about a million proprio frames; its loader
    reads any size)."""

    def __init__(self, out: Path, options: ExportOptions):
        self.out, self.options = out, options
        self.layout: F.RlhwLayout | None = None
        self.fps: int | None = None
        self.streams: _Streams | None = None
        self.first_path: Path | None = None
        self.tasks: list[str] = []
        self.columns: dict[str, list[np.ndarray]] = {}
        self.rows: list[dict] = []
        self.samples: dict[str, list[np.ndarray]] = {}
        self.episodes = self.frames = 0

    def add(self, path: Path, ep: Episode) -> None:
        meta = dict(ep.meta)
        env_config = recording_env_config(path, meta)
        layout = F.RlhwLayout.of_episode(ep, str(path))
        rate = self.options.fps or _recorded(meta, env_config, "control_hz")
        if rate is None:
            raise ConfigError("--fps", f"{path}: no recording config tells its control rate; pass --fps N")
        fps = _fps(rate, str(path))
        if self.layout is None:
            self.layout, self.fps, self.first_path = layout, fps, path
            self.out.mkdir(parents=True, exist_ok=True)
            self.streams = _Streams(self.out, layout, fps, self.options)
        _check_layout(layout, self.layout, path, self.first_path)
        if fps != self.fps:
            raise ConfigError(
                "--fps",
                f"{path} was recorded at {fps} Hz, {self.first_path} at {self.fps} Hz; export "
                "them separately (a LeRobotDataset has one fps)",
            )
        task = self.options.task or str(_recorded(meta, env_config, "task") or "rlhw episode")
        if task not in self.tasks:
            self.tasks.append(task)
        frames = self._add_frames(ep, task)
        self._add_row(path, ep, frames, meta, env_config, task)
        self.episodes += 1

    def _add_frames(self, ep: Episode, task: str) -> dict[str, np.ndarray]:
        T = ep.length
        frames = _frames(ep, self.layout)
        frames.update(
            {
                "timestamp": (np.arange(T) / self.fps).astype(np.float32),
                "frame_index": np.arange(T),
                "episode_index": np.full(T, self.episodes),
                "index": self.frames + np.arange(T),
                "task_index": np.full(T, self.tasks.index(task)),
            }
        )
        for k, v in frames.items():
            self.columns.setdefault(k, []).append(v)
        return frames

    def _add_row(
        self, path: Path, ep: Episode, frames: dict[str, np.ndarray], meta: dict, env_config: dict | None, task: str
    ) -> None:
        """The episode's row of meta/episodes: where its frames and video are, its statistics, its last
        observation and its recording metadata."""
        T = ep.length
        images = {cam: ep.obs[IMAGE_PREFIX + cam] for cam, _ in self.layout.cameras}
        row = {
            "episode_index": self.episodes,
            "tasks": [task],
            "length": T,
            "data/chunk_index": 0,
            "data/file_index": 0,
            "dataset_from_index": self.frames,
            "dataset_to_index": self.frames + T,
        }
        row.update(self.streams.write_episode({cam: v[:T] for cam, v in images.items()}))
        row.update({"meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0})
        stats = {k: feature_stats(v) for k, v in frames.items() if k != F.FAULT}  # no statistics of text
        for cam, v in images.items():
            sample = image_sample(v[:T])
            self.samples.setdefault(cam, []).append(sample)
            stats[F.video_key(cam)] = feature_stats(sample, image=True)
            stats[F.video_key(cam)]["count"] = [T]
        row.update({f"stats/{k}/{s}": v for k, st in stats.items() for s, v in st.items()})
        final_state = (
            np.concatenate([ep.obs[k][T].reshape(-1) for k, _ in self.layout.state])
            if self.layout.state
            else np.zeros(0)
        )
        row[F.FINAL + F.STATE] = final_state.astype(np.float32).tolist()
        row.update({F.FINAL + F.video_key(cam): _png(v[T]) for cam, v in images.items()})
        record = {**meta, "source": str(path), PROVENANCE_KEY: env_config}
        row[F.META] = json.dumps(record, default=str)
        self.rows.append(row)
        self.frames += T

    def finish(self) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        self.streams.close()
        info_by_cam = {cam: stream_info(path) for cam, path in self.streams.first_info.items()}
        features = _features(self.layout, info_by_cam)
        data = {k: np.concatenate(v) for k, v in self.columns.items()}
        table = pa.table(
            {k: (vector_column(v, v.dtype) if features[k]["shape"] != [1] else pa.array(v)) for k, v in data.items()}
        )
        path = self.out / F.DATA_PATH.format(chunk_index=0, file_index=0)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path, compression="snappy")
        episodes = pa.Table.from_pylist(self.rows)
        path = self.out / F.EPISODES_PATH.format(chunk_index=0, file_index=0)
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(episodes, path, compression="snappy")
        write_tasks(self.out / F.TASKS_PATH, self.tasks)
        stats = {k: feature_stats(v) for k, v in data.items() if k != F.FAULT}
        for cam, samples in self.samples.items():
            stats[F.video_key(cam)] = feature_stats(np.concatenate(samples), image=True)
            stats[F.video_key(cam)]["count"] = [self.frames]
        write_json(self.out / F.STATS_PATH, stats)
        write_json(self.out / F.INFO_PATH, self._info(features))

    def _info(self, features: dict) -> dict:
        robot = json.loads(self.rows[0][F.META]).get("robot")
        robot = str(robot).split("@")[0] if robot else None  # "franka@10.0.0.2": the kind, not the address
        return {
            "codebase_version": F.CODEBASE_VERSION,
            "robot_type": robot,
            "total_episodes": self.episodes,
            "total_frames": self.frames,
            "total_tasks": len(self.tasks),
            "chunks_size": F.CHUNKS_SIZE,
            "data_files_size_in_mb": F.DATA_FILE_MB,
            "video_files_size_in_mb": F.VIDEO_FILE_MB,
            "fps": self.fps,
            "splits": {"train": f"0:{self.episodes}"},
            "data_path": F.DATA_PATH,
            "video_path": F.VIDEO_PATH if self.layout.cameras else None,
            "features": features,
            "rlhw": {**self.layout.to_json(), "repo_id": self.options.repo_id},
        }

    def close(self) -> None:
        if self.streams is not None:
            self.streams.close()
