"""A LeRobotDataset v3.0 directory -> rlhw episodes (`rlhw.rl.episodes.Episode`), for `train.demos`.

The map from the dataset's features to the env's observation and action keys comes from the config entry
(rlhw.config.datasets.LeRobotDemoConfig) or, for an `rlhw export-dataset` export, from the layout the export
keeps in meta/info.json. Every mapped feature is checked before any data is read: a missing feature, a
slice past its end or a shape other than the env's is refused naming the config key and the fix.

Transitions: frame t gives (observation t, action t, reward t, observation t + 1). The observation after
an episode's last frame is the one rlhw's export keeps with the episode; a dataset without it (recorded
elsewhere) gives its last frame only when the episode ended there for good (``next.done`` and not
``next.truncated``), with the frame's own observation as the next one (a terminal transition never looks
at it); otherwise that frame is dropped. ``terminated`` = done and not truncated.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rlhw.config.datasets import FeatureRef, LeRobotDemoConfig
from rlhw.errors import ConfigError
from rlhw.rl.episodes import Episode, EpisodeKind
from rlhw.rl.lerobot import format as F
from rlhw.rl.lerobot.tables import column_to_numpy
from rlhw.rl.lerobot.video import read_frames
from rlhw.robot.env import IMAGE_PREFIX

EPISODE_END = "episode_end"


@dataclass(frozen=True)
class FeatureMap:
    """Resolved: env observation key -> feature, and the features of action, reward, done and rlhw's extras."""

    observations: dict[str, FeatureRef]
    action: FeatureRef
    reward: FeatureRef
    done: FeatureRef | str
    extras: dict[str, str]  # episode field -> feature name, for those the dataset has
    has_final: bool  # the export keeps each episode's last observation


def _default_map(info: dict, root: Path, where: str, is_export: bool) -> dict[str, FeatureRef]:
    """An export's own map: observation.state split by its names, each observation.images.<camera> to
    image_<camera>."""
    if not is_export:
        raise ConfigError(
            where,
            f"{root} is a LeRobotDataset that `rlhw export-dataset` did not write: give it as "
            f"{{path: {root}, observations: {{ENV_KEY: FEATURE, ...}}, action: FEATURE}} "
            f"(its features: {', '.join(sorted(info['features']))})",
        )
    refs, at = {}, 0
    if F.STATE in info["features"]:
        try:
            state = F.RlhwLayout.from_state_names(info["features"][F.STATE]["names"] or [])
        except ValueError as e:
            raise ConfigError(
                where,
                f"{root}: the names of {F.STATE} do not say where each observation is ({e}); "
                "give the map as {path, observations, action}",
            ) from None
        for key, shape in state:
            n = int(np.prod(shape))
            refs[key], at = FeatureRef(F.STATE, at, at + n), at + n
    refs.update(
        {
            IMAGE_PREFIX + name[len(F.IMAGES) :]: FeatureRef(name)
            for name, ft in info["features"].items()
            if name.startswith(F.IMAGES) and ft["dtype"] in ("video", "image")
        }
    )
    return refs


def resolve_map(
    info: dict,
    root: Path,
    entry: LeRobotDemoConfig,
    where: str,
    observations: Mapping[str, tuple[int, ...]],
    action_shape: tuple[int, ...],
    is_export: bool = False,
) -> FeatureMap:
    """The feature map of ``entry`` checked against the dataset's features and the env's shapes;
    ``is_export``: `rlhw export-dataset` wrote the dataset (its episodes carry ``rlhw/meta``)."""
    refs = dict(entry.observations) or _default_map(info, root, where, is_export)
    missing, extra = sorted(set(observations) - set(refs)), sorted(set(refs) - set(observations))
    if missing:
        raise ConfigError(
            f"{where}.observations",
            f"the env's observation {missing[0]!r} has no feature; map it: "
            f"{missing[0]}: FEATURE (features: {_names(info)})",
        )
    if extra:
        raise ConfigError(
            f"{where}.observations.{extra[0]}",
            f"the env has no observation {extra[0]!r} (it has {', '.join(sorted(observations))}); remove it",
        )
    for key, ref in refs.items():
        _check(info, root, ref, tuple(observations[key]), f"{where}.observations.{key}")
    action = entry.action or FeatureRef(F.ACTION)
    _check(info, root, action, tuple(action_shape), f"{where}.action")
    _check(info, root, entry.reward, (1,), f"{where}.reward", scalar=True)
    if entry.done != EPISODE_END:
        if entry.done.name not in info["features"] and entry.done == FeatureRef(F.DONE):
            raise ConfigError(
                f"{where}.done",
                f"{root} has no feature {F.DONE!r}; map done to a feature, or set "
                f"done: {EPISODE_END} (the last frame of each episode ends it)",
            )
        _check(info, root, entry.done, (1,), f"{where}.done", scalar=True)
    extras = {
        field: name
        for field, name in (
            ("truncated", F.TRUNCATED),
            ("success", F.SUCCESS),
            ("intervened", F.INTERVENED),
            ("policy_version", F.POLICY_VERSION),
            ("fault", F.FAULT),
        )
        if name in info["features"]
    }
    return FeatureMap(refs, action, entry.reward, entry.done, extras, is_export)


def _names(info: dict) -> str:
    return ", ".join(f"{k} {tuple(f['shape'])}" for k, f in info["features"].items() if k not in F.DEFAULT_FEATURES)


def _check(info: dict, root: Path, ref: FeatureRef, want: tuple[int, ...], key: str, scalar: bool = False) -> None:
    feature = info["features"].get(ref.name)
    if feature is None:
        raise ConfigError(key, f"feature {ref.name!r} is not in {root}; its features: {_names(info)}")
    shape = tuple(feature["shape"])
    if feature["dtype"] in ("video", "image"):
        if ref.start is not None or shape != want:
            raise ConfigError(
                key,
                f"{ref} is a {shape[0]}x{shape[1]} camera, the env's is {want}: map a camera of "
                "the same size (rlhw does not resize demo frames)",
            )
        return
    if ref.start is not None and ref.stop > shape[-1]:
        raise ConfigError(key, f"{ref} goes past the end of {ref.name!r}, which has {shape[-1]} components")
    size = (ref.stop - ref.start) if ref.start is not None else int(np.prod(shape))
    if size != int(np.prod(want)):
        fix = (
            "map a feature or slice with one value per frame"
            if scalar
            else f"map a slice of {int(np.prod(want))} components, e.g. {ref.name}[0:{int(np.prod(want))}]"
        )
        raise ConfigError(key, f"{ref} has {size} components per frame, the env needs shape {want}: {fix}")


class _Videos:
    """Decoded video files, each decoded once (the current file of each camera is kept), frames looked up by
    timestamp."""

    def __init__(self, root: Path, info: dict):
        self.root, self.info, self.cache = root, info, {}

    def frames(self, key: str, row: Mapping, timestamps: np.ndarray) -> np.ndarray:
        chunk, file = int(row[f"videos/{key}/chunk_index"]), int(row[f"videos/{key}/file_index"])
        path = self.root / self.info["video_path"].format(video_key=key, chunk_index=chunk, file_index=file)
        if self.cache.get(key, (None,))[0] != path:  # one file per camera at a time: episodes come in file order
            if not path.is_file():
                raise ConfigError(key, f"the video {path} is missing from the dataset")
            self.cache[key] = (path, *read_frames(path))
        _, stamps, frames = self.cache[key]
        want = float(row[f"videos/{key}/from_timestamp"]) + timestamps
        at = np.clip(np.searchsorted(stamps, want - 0.5 / self.info["fps"]), 0, max(len(stamps) - 1, 0))
        if len(stamps) == 0 or np.any(np.abs(stamps[at] - want) > 0.5 / self.info["fps"]):
            raise ConfigError(
                key,
                f"{path} has no frame near some of the timestamps {want[:3]}...; the video and the data table disagree",
            )
        return frames[at]


def _decode_images(column) -> np.ndarray:
    """An image feature stored in the parquet (PNG/JPEG bytes in a struct) as N x H x W x 3 uint8."""
    import io

    from PIL import Image

    return np.stack([np.asarray(Image.open(io.BytesIO(item["bytes"])).convert("RGB")) for item in column.to_pylist()])


def _table(root: Path, pattern: str):
    import pyarrow as pa
    import pyarrow.parquet as pq

    paths = sorted(root.glob(pattern))
    if not paths:
        raise ConfigError(str(root), f"no {pattern} files: not a complete LeRobotDataset")
    return pa.concat_tables([pq.read_table(p) for p in paths], promote_options="default")


def holds_dataset(path: Path) -> bool:
    """Whether a plain ``train.demos`` path is a LeRobotDataset (`rlhw.rl.demos.DemoSource`)."""
    return (path / F.INFO_PATH).is_file()


def read_demos(
    root: Path,
    entry: LeRobotDemoConfig | None,
    where: str,
    observations: Mapping[str, tuple[int, ...]],
    action_shape: tuple[int, ...],
) -> list[Episode]:
    """Every episode of the dataset at ``root`` (but rlhw eval episodes) as rlhw episodes
    (`rlhw.rl.demos.DemoSource`); without a config ``entry``, the dataset maps its features as an export does."""
    entry = entry or LeRobotDemoConfig(path=str(root))
    info = F.read_info(root, where)
    episodes = _table(root, F.EPISODES_DIR + "/*/*.parquet")
    fmap = resolve_map(info, root, entry, where, observations, action_shape, F.META in episodes.column_names)
    episodes = episodes.to_pylist()
    data = _table(root, "data/*/*.parquet")
    data = data.take(np.argsort(column_to_numpy(data.column("index")), kind="stable"))
    starts = column_to_numpy(data.column("index"))
    videos = _Videos(root, info)
    out = []
    for row in sorted(episodes, key=lambda r: r["dataset_from_index"]):
        meta = json.loads(row.get(F.META) or "{}")
        if meta.get("kind") == EpisodeKind.EVAL:
            continue  # as for rlhw episode directories: eval episodes measured a policy, they do not teach
        lo, hi = np.searchsorted(starts, [row["dataset_from_index"], row["dataset_to_index"]])
        meta["lerobot_episode"] = row["episode_index"]
        ep = _episode(data.slice(lo, hi - lo), row, info, fmap, videos, observations, meta)
        if ep is not None:
            out.append(ep)
    return out


def _values(frames, ref: FeatureRef, info: dict, row: Mapping, videos: _Videos) -> np.ndarray:
    feature = info["features"][ref.name]
    if feature["dtype"] == "video":
        return videos.frames(ref.name, row, column_to_numpy(frames.column("timestamp")).astype(np.float64))
    if feature["dtype"] == "image":
        return _decode_images(frames.column(ref.name))
    values = column_to_numpy(frames.column(ref.name)).reshape(len(frames), -1)
    return values if ref.start is None else values[:, ref.start : ref.stop]


def _final(row: Mapping, ref: FeatureRef, info: dict) -> np.ndarray:
    value = row[F.FINAL + ref.name]
    if info["features"][ref.name]["dtype"] == "video":
        import io

        from PIL import Image

        return np.asarray(Image.open(io.BytesIO(value)).convert("RGB"))
    value = np.asarray(value, np.float32)
    return value if ref.start is None else value[ref.start : ref.stop]


def _episode(frames, row, info, fmap: FeatureMap, videos: _Videos, shapes, meta: dict) -> Episode | None:
    T = len(frames)

    def flag(name: str) -> np.ndarray:
        return column_to_numpy(frames.column(name)).reshape(T).astype(bool)

    done = (
        np.zeros(T, bool)
        if fmap.done == EPISODE_END
        else _values(frames, fmap.done, info, row, videos).reshape(T).astype(bool)
    )
    if fmap.done == EPISODE_END and T:
        done[-1] = True
    truncated = flag(fmap.extras["truncated"]) if "truncated" in fmap.extras else np.zeros(T, bool)
    obs = {k: _values(frames, ref, info, row, videos) for k, ref in fmap.observations.items()}
    if fmap.has_final and all(F.FINAL + ref.name in row for ref in fmap.observations.values()):
        last = {k: _final(row, ref, info) for k, ref in fmap.observations.items()}
    elif T and done[-1] and not truncated[-1]:
        last = {k: v[-1] for k, v in obs.items()}
    else:
        T -= 1  # the last frame's next observation is unknown: the transition cannot be built
        frames, done, truncated = frames.slice(0, T), done[:T], truncated[:T]
        last = {k: v[T] for k, v in obs.items()} if T > 0 else {}
    if T <= 0:
        return None
    return Episode(
        obs={
            k: np.concatenate([v[:T], last[k][None]])
            .reshape(T + 1, *shapes[k])
            .astype(np.uint8 if v.dtype == np.uint8 else np.float32)
            for k, v in obs.items()
        },
        action=_values(frames, fmap.action, info, row, videos),
        reward=_values(frames, fmap.reward, info, row, videos).reshape(T),
        terminated=done & ~truncated,
        truncated=truncated,
        success=flag(fmap.extras["success"]) if "success" in fmap.extras else np.zeros(T, bool),
        intervened=flag(fmap.extras["intervened"]) if "intervened" in fmap.extras else np.zeros(T, bool),
        policy_version=(
            column_to_numpy(frames.column(fmap.extras["policy_version"])).reshape(T)
            if "policy_version" in fmap.extras
            else np.full(T, -1)
        ),
        fault=frames.column(fmap.extras["fault"]).to_pylist() if "fault" in fmap.extras else [""] * T,
        time=column_to_numpy(frames.column("timestamp")),
        meta=meta,
    )
