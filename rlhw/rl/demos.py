"""Demonstrations for training (`train.demos`): recorded episodes loaded into the demo buffer.

A demo directory holds episodes in the format of rlhw.rl.episodes: ``demo-*`` files written by
``rlhw record-demos``, and ``train-*`` files (a previous run's episodes, e.g. ``<run_dir>/episodes``), searched
recursively. Eval episodes are not loaded: they were run to measure the policy, not to teach it. Failed
demonstrations are loaded too: their rewards are honest, and the critic learns from them as from any
off-policy data.

Checked once, before training starts, against the env's spec: a demo recorded with another observation
layout or action shape would crash the first update (or, worse, train on misaligned columns).
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

from rlhw.errors import ConfigError
from rlhw.rl.episodes import episode_files, episode_transitions, load_episode
from rlhw.rl.fault_signal import AS_REPORTED, FaultSignal

DEMO_KINDS = ("demo", "train")


def load_demos(dirs: Sequence[str], observations: Mapping[str, tuple[int, ...]], action_shape: tuple[int, ...],
               fault_signal: FaultSignal = AS_REPORTED) -> list[dict[str, np.ndarray]]:
    """Every demo and train episode under each of ``dirs`` as transition batches, checked against the env's
    per-instance observation shapes and action shape, fault steps stored as ``fault_signal`` says. Raises
    ConfigError naming ``train.demos[i]``."""
    batches = []
    for i, d in enumerate(dirs):
        where = f"train.demos[{i}]"
        path = Path(d)
        if not path.is_dir():
            raise ConfigError(where, f"{d} is not a directory (relative paths start at {Path.cwd()}); record demos "
                                     "with `rlhw record-demos CONFIG --out DIR` or fix the path")
        files = episode_files(path, DEMO_KINDS)
        episodes = [(f, ep) for f in files if (ep := load_episode(f)) and len(ep["action"])]
        if not episodes:
            raise ConfigError(where, f"{d} holds no demo-*/train-* episode with a step (searched recursively)")
        for f, ep in episodes:
            _check_episode(where, f, ep, observations, action_shape)
            batches.append(episode_transitions(ep, fault_signal))
    return batches


def _check_episode(where: str, file: Path, ep: Mapping[str, np.ndarray], observations: Mapping[str, tuple[int, ...]],
                   action_shape: tuple[int, ...]) -> None:
    keys = {k[4:] for k in ep if k.startswith("obs/")}
    missing, extra = sorted(set(observations) - keys), sorted(keys - set(observations))
    if missing or extra:
        raise ConfigError(where, f"{file.name} does not match the env's observations: "
                                 f"{'missing ' + ', '.join(missing) if missing else ''}"
                                 f"{'; ' if missing and extra else ''}"
                                 f"{'not in the env: ' + ', '.join(extra) if extra else ''}; "
                                 "demos must be recorded with the same task and observation config")
    for name, shape in observations.items():
        got = tuple(ep[f"obs/{name}"].shape[1:])
        if got != tuple(shape):
            raise ConfigError(where, f"{file.name}: observation {name!r} has shape {got}, the env's has "
                                     f"{tuple(shape)}; record the demos with the same task config")
    got = tuple(ep["action"].shape[1:])
    if got != tuple(action_shape):
        raise ConfigError(where, f"{file.name}: action shape {got}, the env's is {tuple(action_shape)}; "
                                 "record the demos with the same task and action config")


def demo_steps(batches: Sequence[Mapping[str, np.ndarray]]) -> int:
    return int(sum(len(b["reward"]) for b in batches))
