"""Demonstrations for training (`train.demos`): recorded episodes loaded into the demo buffer.

A demo directory holds episodes in the format of rlhw.rl.episodes: ``demo-*`` files written by
``rlhw record-demos``, and ``train-*`` files (a previous run's episodes, e.g. ``<run_dir>/episodes``), searched
recursively; or a LeRobotDataset (v3.0) directory: an `rlhw export-dataset` export as a plain path, another one
as a `LeRobotDemoConfig` entry that maps its features to the env's keys (read by a `DemoSource`, below). Eval
episodes are not loaded: they were run to measure the policy, not to teach it. Failed
demonstrations are loaded too: their rewards are honest, and the critic learns from them as from any
off-policy data.

Checked once, before training starts, against the env's spec: a demo recorded with another observation
layout or action shape would crash the first update (or, worse, train on misaligned columns). And against
the env config they were recorded with (`env_provenance`: task, task options, action scale, reward, control
rate), which every episode records in its meta as ``env_config``: a demo recorded with another action scale
has the same shapes but other actions, and one recorded with another reward has other rewards, so it would
teach the wrong thing silently. A mismatch is refused with the key named.

Demos recorded before episodes carried their env config cannot be checked. They are loaded with a warning
that names the directory and the keys left unchecked, not refused: they are often hours of an operator's
work that cannot be vouched for after the fact, their shapes are still checked, and recording them again
(`rlhw record-demos`) is the way to make them checkable.
"""

from __future__ import annotations

import importlib
import json
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol, cast

import numpy as np

from rlhw.config.datasets import LeRobotDemoConfig
from rlhw.errors import ConfigError
from rlhw.rl.episodes import PROVENANCE_KEY, Episode, EpisodeKind, episode_files, episode_transitions, load_episode
from rlhw.rl.fault_signal import AS_REPORTED, FaultSignal

DEMO_KINDS = (EpisodeKind.DEMO, EpisodeKind.TRAIN)


class DemoSource(Protocol):
    """Demos in a format other than rlhw's episode files: a module named in `DEMO_SOURCES`, imported on first use.

    A source is a plugin built on this package (it reads into `Episode`s), so the dependency points from it to
    here: this module names it and never imports it, as the driver and task registries name theirs, and
    ``rlhw.rl`` and ``rlhw.rl.lerobot`` make no import cycle (lazy or type-only imports would still be one)."""

    def holds_dataset(self, path: Path) -> bool:
        """Whether the plain ``train.demos`` path ``path`` is a dataset in this format."""

    def read_demos(
        self,
        path: Path,
        entry: LeRobotDemoConfig | None,
        where: str,
        observations: Mapping[str, tuple[int, ...]],
        action_shape: tuple[int, ...],
    ) -> list[Episode]:
        """The dataset's episodes but eval ones; ``entry``: the config entry that maps it, None for a plain path."""


#: Demo source name -> the module that is that `DemoSource`.
DEMO_SOURCES: dict[str, str] = {"lerobot": "rlhw.rl.lerobot.reader"}


class UncheckedDemoWarning(UserWarning):
    """Demos that record no env config (recorded before they did): loaded, but their provenance is unchecked."""


def recorded_env(env) -> dict[str, Any]:
    """The env config (``config.env``) as an episode records it under `PROVENANCE_KEY`: the whole section as
    JSON, so `provenance_of` can check it and `rlhw export-dataset` can carry it on."""
    return env.model_dump(mode="json")


def env_provenance(env) -> dict[str, Any]:
    """`provenance_of` a run's env config (``config.env``)."""
    return provenance_of(recorded_env(env))


def provenance_of(recorded: Mapping[str, Any]) -> dict[str, Any]:
    """What of a recorded env config decides what a recorded transition means, as flat dotted keys: the task
    and its options, the action (scale, gripper), the reward, the control rate. JSON values, so a recorded copy
    compares equal to a fresh one. ``env.reach`` (the reach task's target box, success radius and reward scale)
    is in whatever the task: a key that only one task reads is still compared, erring on refusing."""
    tree = {key: recorded.get(key) for key in ("task", "task_options", "action", "reward", "control_hz", "reach")}
    if isinstance(tree["reward"], Mapping):
        # Which judge says "success" (the operator's mark while recording, a classifier trained on those very
        # demos later: HIL-SERL's order), and when it is retrained, is not what a demo's transitions mean; the
        # reward's form is.
        judge = ("classifier", "threshold", "retrain_after_rejections")
        tree["reward"] = {k: v for k, v in tree["reward"].items() if k not in judge}
    return _flatten(json.loads(json.dumps(tree)), "env.")


def _flatten(tree: Mapping[str, Any], prefix: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in tree.items():
        if isinstance(value, Mapping) and value:
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def load_demos(
    dirs: Sequence[str | LeRobotDemoConfig],
    observations: Mapping[str, tuple[int, ...]],
    action_shape: tuple[int, ...],
    provenance: Mapping[str, Any] | None = None,
    fault_signal: FaultSignal = AS_REPORTED,
) -> list[dict[str, np.ndarray]]:
    """Every demo and train episode under each of ``dirs`` as transition batches, checked against the env's
    per-instance observation shapes and action shape, and against ``provenance`` (`env_provenance` of the
    run's env config; None: a caller behind the edge where it was already checked), fault steps stored as
    ``fault_signal`` says. Raises ConfigError naming ``train.demos[i]`` and, for a provenance mismatch, the key."""
    batches = []
    for i, d in enumerate(dirs):
        where = f"train.demos[{i}]"
        entry = d if isinstance(d, LeRobotDemoConfig) else None
        path = Path(entry.path if entry else d)
        if not path.is_dir():
            raise ConfigError(
                where,
                f"{path} is not a directory (relative paths start at {Path.cwd()}); record demos "
                "with `rlhw record-demos CONFIG --out DIR` or fix the path",
            )
        source = _source(path, entry)
        if source is not None:
            loaded = source.read_demos(path, entry, where, observations, action_shape)
            episodes = [(_dataset_episode_name(path, ep), ep) for ep in loaded if ep.length]
        else:
            files = episode_files(path, DEMO_KINDS)
            episodes = [(f, ep) for f in files if (ep := load_episode(f)) is not None and ep.length]
        if not episodes:
            raise ConfigError(where, f"{path} holds no demo-*/train-* episode with a step (searched recursively)")
        unrecorded = []
        for f, ep in episodes:
            _check_episode(where, f, ep, observations, action_shape)
            if provenance is not None and not _check_provenance(where, f, ep.meta, provenance):
                unrecorded.append(f.name)
            batches.append(episode_transitions(ep, fault_signal))
        if unrecorded:
            why, fix = (
                (
                    "recorded elsewhere",
                    "check that the dataset was recorded with this task, action scale and control rate",
                )
                if entry
                else ("recorded before demos did", "record them again with `rlhw record-demos` to have them checked")
            )
            warnings.warn(
                f"{where}: {len(unrecorded)} of {len(episodes)} episode(s) in {path} (e.g. {unrecorded[0]}) "
                f"record no env config ({why}), so {', '.join(sorted(provenance))} are NOT checked "
                f"against this run: only their shapes are. {fix[0].upper() + fix[1:]}",
                UncheckedDemoWarning,
                stacklevel=2,
            )
    return batches


def _source(path: Path, entry: LeRobotDemoConfig | None) -> DemoSource | None:
    """What reads ``path``: the LeRobot source for a `LeRobotDemoConfig` entry, else the first source that holds
    the dataset; None: rlhw episode files."""
    for name in ["lerobot"] if entry else DEMO_SOURCES:
        source = cast(DemoSource, importlib.import_module(DEMO_SOURCES[name]))
        if entry or source.holds_dataset(path):
            return source
    return None


def _dataset_episode_name(root: Path, ep: Episode) -> Path:
    """What errors call an episode of a LeRobotDataset: the rlhw episode file it was exported from, else its index."""
    meta = ep.meta
    return Path(meta.get("source") or f"{root.name}/episode-{meta.get('lerobot_episode', 0):06d}")


def _check_provenance(where: str, file: Path, meta: Mapping[str, Any], expected: Mapping[str, Any]) -> bool:
    """False when the episode records no env config; raises ConfigError naming the first key that differs."""
    if not isinstance(meta.get(PROVENANCE_KEY), Mapping):
        return False
    recorded = provenance_of(meta[PROVENANCE_KEY])
    differ = sorted(
        k for k in set(expected) | set(recorded) if recorded.get(k, "<unset>") != expected.get(k, "<unset>")
    )
    if differ:
        key = differ[0]
        more = f" (and {len(differ) - 1} more: {', '.join(differ[1:])})" if len(differ) > 1 else ""
        raise ConfigError(
            where,
            f"{file.name} was recorded with {key}={json.dumps(recorded.get(key, '<unset>'))}, "
            f"this run has {key}={json.dumps(expected.get(key, '<unset>'))}{more}; demos teach "
            f"the env they were recorded in: set {key} to the demos' value, or record them "
            "again with this config",
        )
    return True


def _check_episode(
    where: str,
    file: Path,
    ep: Episode,
    observations: Mapping[str, tuple[int, ...]],
    action_shape: tuple[int, ...],
) -> None:
    keys = set(ep.obs)
    missing, extra = sorted(set(observations) - keys), sorted(keys - set(observations))
    if missing or extra:
        raise ConfigError(
            where,
            f"{file.name} does not match the env's observations: "
            f"{'missing ' + ', '.join(missing) if missing else ''}"
            f"{'; ' if missing and extra else ''}"
            f"{'not in the env: ' + ', '.join(extra) if extra else ''}; "
            "demos must be recorded with the same task and observation config",
        )
    for name, shape in observations.items():
        got = tuple(ep.obs[name].shape[1:])
        if got != tuple(shape):
            raise ConfigError(
                where,
                f"{file.name}: observation {name!r} has shape {got}, the env's has "
                f"{tuple(shape)}; record the demos with the same task config",
            )
    got = tuple(ep.action.shape[1:])
    if got != tuple(action_shape):
        raise ConfigError(
            where,
            f"{file.name}: action shape {got}, the env's is {tuple(action_shape)}; "
            "record the demos with the same task and action config",
        )


def demo_steps(batches: Sequence[Mapping[str, np.ndarray]]) -> int:
    return int(sum(len(b["reward"]) for b in batches))
