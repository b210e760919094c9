"""Training the success classifier on labelled frames, and its held-out metrics.

Input: episodes as arrays (`EpisodeFrames`; the CLI reads the files). Steps:

1. label every frame (rlhw.vision.labels.frame_labels), split train / held-out BY EPISODE, stratified;
2. resize frames once to the input size;
3. train with the class balance SERL uses (about 2-3 negatives per positive): every epoch draws all
   positives and a fresh random subset of at most ``max_negative_ratio`` x as many negatives, and the
   loss weighs positives by the remaining imbalance; random-shift augmentation on every batch;
4. measure accuracy, precision, recall and the confusion matrix on ALL labelled held-out frames (no
   subsampling there: the metrics describe the frames the classifier will meet).

Errors that are the user's to fix (no episodes, no frames of the asked cameras, one class only) are
ConfigErrors naming the input, so the CLI prints one line.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from rlhw.config.vision import ImageEncoderConfig
from rlhw.errors import ConfigError
from rlhw.vision.augment import random_shift
from rlhw.vision.classifier import ClassifierSpec, SuccessClassifier
from rlhw.vision.labels import (
    EpisodeFrames,
    LabelRules,
    count,
    frame_labels,
    frame_sources,
    gather_frames,
    split_by_episode,
)


@dataclass(frozen=True)
class TrainOptions:
    cameras: tuple[str, ...] | None = None  # None: every camera the episodes have
    input_size: tuple[int, int] = (64, 64)
    crop: tuple[float, float, float, float] = (0.0, 0.0, 1.0, 1.0)  # region of interest, see ClassifierSpec
    encoder: ImageEncoderConfig = field(default_factory=ImageEncoderConfig)
    hidden: int = 64
    epochs: int = 60
    batch_size: int = 64
    lr: float = 1e-3
    held_out_fraction: float = 0.25
    max_negative_ratio: float = 3.0
    threshold: float = 0.5
    seed: int = 0
    rules: LabelRules = field(default_factory=LabelRules)
    each_camera: bool = False  # one classifier per camera, success when all agree (ClassifierSpec)


def options_from_dict(d: dict[str, Any]) -> TrainOptions:
    """The `TrainOptions` a classifier file's ``training["options"]`` records (the inverse of the dict it saves)."""
    tuples = {k: tuple(d[k]) for k in ("input_size", "crop") if k in d}
    cameras = None if d.get("cameras") is None else tuple(d["cameras"])
    plain = {k: v for k, v in d.items() if k not in ("encoder", "rules")}
    return TrainOptions(
        **{**plain, **tuples, "cameras": cameras},
        encoder=ImageEncoderConfig(**d.get("encoder", {})),
        rules=LabelRules(**d.get("rules", {})),
    )


@dataclass
class TrainResult:
    classifier: SuccessClassifier
    metrics: dict[str, Any]  # held-out
    training: dict[str, Any]  # what it was trained on, how


def metrics(probabilities: np.ndarray, labels: np.ndarray, threshold: float) -> dict[str, Any]:
    """Accuracy, precision, recall and the confusion matrix of ``probabilities >= threshold`` vs ``labels``."""
    pred = np.asarray(probabilities) >= threshold
    truth = np.asarray(labels).astype(bool)
    tp, fp = int(np.sum(pred & truth)), int(np.sum(pred & ~truth))
    fn, tn = int(np.sum(~pred & truth)), int(np.sum(~pred & ~truth))
    n = tp + fp + fn + tn
    return {
        "frames": n,
        "accuracy": (tp + tn) / n if n else float("nan"),
        "precision": tp / (tp + fp) if tp + fp else float("nan"),
        "recall": tp / (tp + fn) if tp + fn else float("nan"),
        "threshold": float(threshold),
        "confusion": {"true_positive": tp, "false_positive": fp, "false_negative": fn, "true_negative": tn},
    }


def _cameras(episodes: Sequence[EpisodeFrames], asked: Sequence[str] | None) -> tuple[str, ...]:
    if not episodes:
        raise ConfigError(
            "EPISODES", "no episodes given: pass recorded episode files (.npz or .steps) or directories holding them"
        )
    common = set(episodes[0].images)
    for ep in episodes[1:]:
        common &= set(ep.images)
    if not common:
        raise ConfigError(
            "EPISODES",
            "the episodes hold no camera images (obs/image_<camera>) common to all of them; "
            "record them with env.images=true",
        )
    if asked:
        missing = [c for c in asked if c not in common]
        if missing:
            raise ConfigError(
                "--cameras", f"camera(s) {missing} not in every episode; the episodes have {sorted(common)}"
            )
        return tuple(asked)
    return tuple(sorted(common))


def _epoch_indices(y: torch.Tensor, ratio: float, gen: torch.Generator) -> torch.Tensor:
    pos, neg = torch.nonzero(y == 1).squeeze(1), torch.nonzero(y == 0).squeeze(1)
    keep = min(len(neg), max(1, int(ratio * len(pos))))
    neg = neg[torch.randperm(len(neg), generator=gen)[:keep]]
    both = torch.cat([pos, neg])
    return both[torch.randperm(len(both), generator=gen)]


def _fit(model: SuccessClassifier, x: dict[str, torch.Tensor], y: torch.Tensor, opts: TrainOptions) -> list[float]:
    """Optimise ``model`` on the training frames; returns the mean loss per epoch."""
    gen = torch.Generator().manual_seed(opts.seed)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(params, lr=opts.lr)
    losses = []
    model.train()
    for _ in range(opts.epochs):
        order = _epoch_indices(y, opts.max_negative_ratio, gen)
        n_pos = float((y[order] == 1).sum())
        pos_weight = torch.tensor((len(order) - n_pos) / max(n_pos, 1.0))
        total = 0.0
        for i in range(0, len(order), opts.batch_size):
            idx = order[i : i + opts.batch_size]
            batch = {c: random_shift(v[idx], opts.encoder.augment_pad, gen) for c, v in x.items()}
            if model.spec.each_camera:  # every camera's head learns the labels on its own
                logits = model.camera_logits(batch)
                target = y[idx].float()[:, None].expand_as(logits)
            else:
                logits, target = model(batch), y[idx].float()
            loss = F.binary_cross_entropy_with_logits(logits, target, pos_weight=pos_weight)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            total += loss.item() * len(idx)
        losses.append(total / max(len(order), 1))
    model.eval()
    return losses


def train_success_classifier(episodes: Sequence[EpisodeFrames], opts: TrainOptions = TrainOptions()) -> TrainResult:
    """Label, split by episode, train, and measure on the held-out episodes."""
    cameras = _cameras(episodes, opts.cameras)
    labels = [frame_labels(ep, opts.rules) for ep in episodes]
    totals = count(np.concatenate(labels))
    if totals["positive"] == 0 or totals["negative"] == 0:
        raise ConfigError(
            "EPISODES",
            f"the labelled frames are all of one class ({totals['positive']} success, "
            f"{totals['negative']} not): record both successful and failed episodes, "
            "or mark frames (meta operator_marks)",
        )
    train_eps, held_eps = split_by_episode(labels, opts.held_out_fraction, opts.seed)
    x_train, y_train = gather_frames(episodes, labels, train_eps, cameras)
    x_held, y_held = gather_frames(episodes, labels, held_eps, cameras)
    if not np.any(y_train == 1) or not np.any(y_train == 0) or len(y_held) == 0:
        raise ConfigError(
            "EPISODES",
            f"too few episodes to split by episode ({len(episodes)}; need at least 2 with a success "
            "and 2 without, so that training and held-out frames both hold both classes)",
        )
    torch.manual_seed(opts.seed)
    spec = ClassifierSpec(
        cameras,
        tuple(opts.input_size),
        opts.encoder.kind,
        opts.encoder.features,
        opts.hidden,
        opts.threshold,
        tuple(opts.crop),
        opts.each_camera,
    )
    model = SuccessClassifier(spec, opts.encoder)
    losses = _fit(model, model.prepare(x_train), torch.as_tensor(y_train), opts)
    held = metrics(model.probability(x_held), y_held, spec.threshold)
    train = metrics(model.probability(x_train), y_train, spec.threshold)
    training = {
        "episodes": {"train": [episodes[i].name for i in train_eps], "held_out": [episodes[i].name for i in held_eps]},
        "frames": {"train": count(y_train), "held_out": count(y_held)},
        "sources": {
            "train": frame_sources(episodes, labels, train_eps),
            "held_out": frame_sources(episodes, labels, held_eps),
        },
        "train_accuracy": train["accuracy"],
        "loss_per_epoch": losses,
        "options": {**asdict(opts), "encoder": opts.encoder.model_dump()},
    }
    return TrainResult(model, held, training)
