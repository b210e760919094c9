"""`rlhw train-reward EPISODES... [--out FILE] [--labels recorded|judge] [--judge-negatives RUN_EPISODES...]
[--each-camera] [--cameras ...] [--epochs N]`: train the success classifier.

EPISODES are recorded episode files (``.npz``, or ``.steps`` of an interrupted episode) or directories
holding them (searched recursively: demos from ``rlhw record-demos``, a run's train and eval episodes).
Frames come from ``obs/image_<camera>``; labels from the episode's success and the operator's marks
(rlhw.vision.labels). ``--labels judge`` (simulation) labels by the simulator judge's verdict recorded with
each step instead (``judge_success``, rlhw/robot/rehearsal.py): HIL-SERL's fix for a policy that learned to
fool its classifier is to retrain with that run's episodes added, their fooling frames as negatives:
``rlhw train-reward DEMOS RUN/episodes --labels judge --out FILE``; or, keeping the demos' own labels,
``rlhw train-reward DEMOS --judge-negatives RUN/episodes --out FILE``: only the run's frames the judge saw not
done are added, as negatives. ``--each-camera`` trains one classifier per camera and calls a success only
when all of them do (rlhw.vision.classifier). The split into
training and held-out frames is by episode. Writes the model FILE (weights + the spec the env needs +
the held-out metrics) and FILE's ``.metrics.json`` beside it, and prints the held-out accuracy,
precision, recall and confusion matrix. Use it with ``env.reward.classifier: FILE``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys

DEFAULT_OUT = "reward_classifier.pt"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("episodes", nargs="*", metavar="EPISODES", help="episode files or directories of them")
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"model file to write (default: {DEFAULT_OUT})")
    parser.add_argument(
        "--cameras", nargs="+", default=None, help="cameras to use (default: every camera in the episodes)"
    )
    parser.add_argument("--epochs", type=int, default=60, help="training epochs (default: 60)")
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the split, the initialisation and the augmentation"
    )
    parser.add_argument("--input-size", type=int, default=64, help="square input size in pixels, 32-256 (default: 64)")
    parser.add_argument(
        "--crop",
        nargs=4,
        type=float,
        default=(0.0, 0.0, 1.0, 1.0),
        metavar=("TOP", "LEFT", "BOTTOM", "RIGHT"),
        help="region of interest of every frame, as fractions (default: the whole frame); saved in the file",
    )
    parser.add_argument("--encoder", default="cnn", choices=("cnn", "resnet10", "resnet18"), help="image encoder kind")
    parser.add_argument("--encoder-weights", default=None, help="local state_dict file to start the encoder from")
    parser.add_argument("--frozen", action="store_true", help="freeze the encoder backbone (with --encoder-weights)")
    parser.add_argument(
        "--positive-last-k",
        type=int,
        default=2,
        help="last frames of a successful episode labelled success (default 2: an episode ends as the cube arrives, so earlier frames seldom show it in)",
    )
    parser.add_argument("--ambiguous-gap", type=int, default=3, help="frames before those left out (neither label)")
    parser.add_argument("--threshold", type=float, default=0.5, help="success when P >= threshold (saved in the file)")
    parser.add_argument("--held-out", type=float, default=0.25, help="fraction of episodes held out for the metrics")
    parser.add_argument(
        "--labels",
        choices=("recorded", "judge"),
        default="recorded",
        help="recorded: the episode's measured success and the operator's marks (default); judge: the "
        "simulator judge's verdict recorded with every step (simulation only)",
    )
    parser.add_argument(
        "--each-camera",
        action="store_true",
        help="one classifier per camera, success only when every one says so: a policy must fool every view "
        "at once (a joint classifier was fooled by a cube hidden from one camera)",
    )
    parser.add_argument(
        "--judge-negatives",
        nargs="+",
        default=[],
        metavar="EPISODES",
        help="episodes (a run's) whose frames the simulator judge saw not done are added as negatives, the rest "
        "left out: HIL-SERL's fix for a classifier a policy fooled, without teaching the judge's own boundary "
        "(a demo's operator marks success further in)",
    )


def _options(args: argparse.Namespace):
    from pydantic import ValidationError

    from rlhw.config.vision import ImageEncoderConfig
    from rlhw.errors import ConfigError
    from rlhw.vision.labels import LabelRules
    from rlhw.vision.train_classifier import TrainOptions

    checks = (
        ("--epochs", args.epochs >= 1, "must be >= 1"),
        ("--input-size", 32 <= args.input_size <= 256, "must be 32-256"),
        ("--threshold", 0.0 <= args.threshold <= 1.0, "must be in [0, 1]"),
        ("--held-out", 0.0 < args.held_out < 1.0, "must be in (0, 1)"),
        ("--positive-last-k", args.positive_last_k >= 1, "must be >= 1"),
        ("--ambiguous-gap", args.ambiguous_gap >= 0, "must be >= 0"),
    )
    top, left, bottom, right = args.crop
    checks += (
        (
            "--crop",
            0 <= top < bottom <= 1 and 0 <= left < right <= 1,
            "needs fractions 0 <= TOP < BOTTOM <= 1, 0 <= LEFT < RIGHT <= 1",
        ),
    )
    for flag, ok, why in checks:
        if not ok:
            raise ConfigError(flag, f"{why}, got {getattr(args, flag[2:].replace('-', '_'))}")
    try:
        encoder = ImageEncoderConfig(kind=args.encoder, weights=args.encoder_weights, frozen=args.frozen)
    except ValidationError as e:
        raise ConfigError("--encoder", str(e.errors()[0]["msg"])) from None
    return TrainOptions(
        cameras=tuple(args.cameras) if args.cameras else None,
        input_size=(args.input_size, args.input_size),
        crop=tuple(args.crop),
        encoder=encoder,
        epochs=args.epochs,
        threshold=args.threshold,
        held_out_fraction=args.held_out,
        seed=args.seed,
        rules=LabelRules(positive_last_k=args.positive_last_k, ambiguous_gap=args.ambiguous_gap),
        each_camera=args.each_camera,
    )


def read_episodes(paths: list[str], labels: str = "recorded") -> list:
    """EpisodeFrames of every episode file under ``paths`` (files or directories: EPISODES), in the order given
    (labels: `rlhw.rl.episode_frames.episode_frames`)."""
    from rlhw.cli.common import episode_paths
    from rlhw.rl.episode_frames import episode_frames

    return episode_frames(episode_paths(paths), labels)


def coverage(held: dict[str, int]) -> list[str]:
    """What the held-out figures cover, and what they do not: a held-out accuracy of 1.000 on demos said nothing
    of the frames a policy then sought (the rehearsal's false successes), and the report should say so."""
    kinds = ", ".join(f"{v} {k[len('kind_') :]}" for k, v in sorted(held.items()) if k.startswith("kind_"))
    lines = [
        f"held-out frames cover: {kinds} episodes; {held['success']} success frames; not-success frames: "
        f"{held['before_success']} before a success, {held['failed']} of failed episodes, "
        f"{held['operator_rejected']} the operator rejected, {held['given']} given (judge negatives)"
    ]
    from_policy = held.get("kind_train", 0) + held.get("kind_eval", 0)
    lines.append(
        "they do not cover: frames a policy will seek while it learns on this reward "
        + (
            f"beyond the {from_policy} train or eval episodes of a run held out here"
            if from_policy
            else "(no held-out frame is from a run)"
        )
        + "; this accuracy does not bound its false successes in a run, where the operator's rejections retrain "
        "it (env.reward.retrain_after_rejections)"
    )
    return lines


def _nan_to_null(value):
    """Strict JSON: an undefined metric (precision with no predicted success) is written as null."""
    if isinstance(value, dict):
        return {k: _nan_to_null(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_nan_to_null(v) for v in value]
    return None if isinstance(value, float) and math.isnan(value) else value


def _fmt(x: float) -> str:
    return "n/a" if isinstance(x, float) and math.isnan(x) else f"{x:.3f}"


def run(args: argparse.Namespace) -> int:
    from rlhw.vision.classifier import save_classifier
    from rlhw.vision.train_classifier import train_success_classifier

    options = _options(args)
    episodes = read_episodes(args.episodes, args.labels) + read_episodes(args.judge_negatives, "judge-negatives")
    result = train_success_classifier(episodes, options)
    out = save_classifier(result.classifier, args.out, result.metrics, result.training)
    report = {
        "model": str(out),
        "held_out": result.metrics,
        **{k: result.training[k] for k in ("episodes", "frames", "train_accuracy")},
    }
    metrics_path = out.with_suffix(".metrics.json")
    metrics_path.write_text(json.dumps(_nan_to_null(report), indent=2, allow_nan=False) + "\n")
    m, c = result.metrics, result.metrics["confusion"]
    frames = result.training["frames"]
    print(
        f"held-out: {len(result.training['episodes']['held_out'])} episodes, {m['frames']} frames "
        f"({frames['held_out']['positive']} success, {frames['held_out']['negative']} not); "
        f"train: {len(result.training['episodes']['train'])} episodes"
    )
    print(
        f"accuracy {_fmt(m['accuracy'])}  precision {_fmt(m['precision'])}  recall {_fmt(m['recall'])}  "
        f"(threshold {m['threshold']}, seed {args.seed})"
    )
    print("confusion (rows: truth, columns: predicted)    success    not")
    print(f"  success                                   {c['true_positive']:>9}  {c['false_negative']:>5}")
    print(f"  not                                       {c['false_positive']:>9}  {c['true_negative']:>5}")
    for line in coverage(result.training["sources"]["held_out"]):
        print(line)
    print(f"wrote {out} and {metrics_path}", file=sys.stderr)
    return 0
