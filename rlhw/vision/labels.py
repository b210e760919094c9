"""Frame labels for the success classifier, from recorded episodes, and the split by episode.

An episode here is what rlhw.rl.episodes records, handed over as arrays (this layer does not read
files): ``images`` camera -> uint8 [T+1, H, W, 3] (frame 0 is the reset observation, frame t+1 follows
step t), ``success`` bool [T] per step, and ``meta`` (the episode's JSON dict).

Labels (1 = success, 0 = not, -1 = left out): an episode's ``given`` labels when the reader set them (a run's
frames added only as negatives, `rlhw train-reward --judge-negatives`); otherwise these rules, in this order,
each overriding the previous ones:

1. a successful episode (any step with ``success``, or the operator's verdict ``meta["operator_success"]``
   when present) labels its last ``positive_last_k`` frames 1, its frames more than ``ambiguous_gap``
   frames before those 0 (when ``early_frames_negative``), the gap in between -1: frames just before a
   success often look like it, and a wrong 0 there teaches the classifier the wrong boundary;
2. a failed episode labels every frame 0 (when ``failed_frames_negative``), else -1;
3. every frame right after a step with ``success`` True is 1 (unless the operator said the episode failed);
4. the operator's marks ``meta["operator_marks"] = [[frame_index, 0 or 1], ...]`` set single frames.

Why by episode: frames of one episode are nearly identical neighbours; a frame-level split would put
near-copies of training frames into the held-out set and report an accuracy the classifier does not have.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class LabelRules:
    """How episode outcomes become frame labels (see the module docstring)."""

    positive_last_k: int = 2
    ambiguous_gap: int = 3
    early_frames_negative: bool = True
    failed_frames_negative: bool = True

    def __post_init__(self):
        if self.positive_last_k < 1 or self.ambiguous_gap < 0:
            raise ValueError(f"positive_last_k must be >= 1 and ambiguous_gap >= 0, got {self}")


@dataclass
class EpisodeFrames:
    """One recorded episode's camera frames and outcome (arrays, as rlhw.rl.episodes stores them)."""

    name: str
    images: dict[str, np.ndarray]
    success: np.ndarray
    meta: dict[str, Any]
    given: np.ndarray | None = None  # int8 [T+1] labels fixed by the reader; the rules below are not applied

    @property
    def num_frames(self) -> int:
        return len(next(iter(self.images.values())))

    @property
    def succeeded(self) -> bool:
        verdict = self.meta.get("operator_success")
        return bool(verdict) if verdict is not None else bool(np.any(self.success))


def frame_labels(episode: EpisodeFrames, rules: LabelRules = LabelRules()) -> np.ndarray:
    """int8 [T+1] labels of ``episode``'s frames: 1, 0, or -1 (not used)."""
    n = episode.num_frames
    if episode.given is not None:
        if len(episode.given) != n:
            raise ValueError(f"episode {episode.name}: {len(episode.given)} given labels for {n} frames")
        return np.asarray(episode.given, dtype=np.int8)
    labels = np.full(n, -1, dtype=np.int8)
    if episode.succeeded:
        first_positive = max(0, n - rules.positive_last_k)
        labels[first_positive:] = 1
        if rules.early_frames_negative:
            labels[: max(0, first_positive - rules.ambiguous_gap)] = 0
        steps = np.flatnonzero(np.asarray(episode.success, dtype=bool)[: n - 1]) + 1
        labels[steps] = 1
    elif rules.failed_frames_negative:
        labels[:] = 0
    for index, value in episode.meta.get("operator_marks", ()) or ():
        if not -n <= int(index) < n or int(value) not in (0, 1):
            raise ValueError(
                f"episode {episode.name}: operator mark [{index}, {value}] must be [frame index < {n}, 0 or 1]"
            )
        labels[int(index)] = int(value)
    return labels


def split_by_episode(labels: Sequence[np.ndarray], held_out_fraction: float, seed: int) -> tuple[list[int], list[int]]:
    """(train, held-out) episode indices, stratified: episodes with a positive frame and the others are
    split separately, so both sides see both kinds. Each kind with >= 2 episodes gives at least one to
    each side."""
    if not 0.0 < held_out_fraction < 1.0:
        raise ValueError(f"held_out_fraction must be in (0, 1), got {held_out_fraction}")
    rng = np.random.default_rng(seed)
    train, held = [], []
    with_positive = [i for i, lab in enumerate(labels) if np.any(lab == 1)]
    without = [i for i, lab in enumerate(labels) if not np.any(lab == 1) and np.any(lab == 0)]
    for group in (with_positive, without):
        order = list(rng.permutation(group))
        k = int(round(len(order) * held_out_fraction))
        if len(order) >= 2:
            k = min(max(k, 1), len(order) - 1)
        held += [int(i) for i in order[:k]]
        train += [int(i) for i in order[k:]]
    return sorted(train), sorted(held)


def gather_frames(
    episodes: Sequence[EpisodeFrames], labels: Sequence[np.ndarray], which: Sequence[int], cameras: Sequence[str]
) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """The labelled frames (label != -1) of episodes ``which``: camera -> uint8 [N, H, W, 3], labels [N]."""
    images: dict[str, list[np.ndarray]] = {c: [] for c in cameras}
    ys = []
    for i in which:
        keep = labels[i] >= 0
        for c in cameras:
            images[c].append(np.asarray(episodes[i].images[c])[keep])
        ys.append(labels[i][keep])
    if not ys:
        return {c: np.zeros((0, 1, 1, 3), np.uint8) for c in cameras}, np.zeros(0, np.int8)
    return {c: np.concatenate(v) for c, v in images.items()}, np.concatenate(ys)


def count(labels: np.ndarray) -> Mapping[str, int]:
    return {"positive": int(np.sum(labels == 1)), "negative": int(np.sum(labels == 0))}


def frame_sources(
    episodes: Sequence[EpisodeFrames], labels: Sequence[np.ndarray], which: Sequence[int]
) -> dict[str, int]:
    """Where the labelled frames of episodes ``which`` come from: what a held-out accuracy covers (and, by what is
    absent, what it does not). Keys: ``success`` (frames labelled 1), ``before_success`` (0s of an episode that
    succeeded), ``failed`` (0s of an episode that failed by its own record), ``operator_rejected`` (0s of an episode
    the classifier called done and the operator rejected), ``given`` (0s a reader fixed, e.g. judge negatives);
    and per episode kind (``kind_demo``...), the episodes."""
    out = dict.fromkeys(("success", "before_success", "failed", "operator_rejected", "given"), 0)
    for i in which:
        ep, lab = episodes[i], labels[i]
        out["success"] += int(np.sum(lab == 1))
        negatives = int(np.sum(lab == 0))
        if ep.given is not None:
            source = "given"
        elif ep.meta.get("operator_success") is False:
            source = "operator_rejected"
        else:
            source = "before_success" if ep.succeeded else "failed"
        out[source] += negatives
        kind = f"kind_{ep.meta.get('kind', 'unknown')}"
        out[kind] = out.get(kind, 0) + 1
    return out
