"""How often a success classifier agrees with the simulator judge on recorded rehearsal episodes, frame by frame.

    PYTHONPATH=$PWD .venv/bin/python tools/classifier_vs_judge.py MODEL.pt 'RUN/episodes/env0/train-*.npz' [...]
        [--threshold P]

Frame t+1 of an episode follows step t; the judge's verdict of step t (``judge_success``, recorded in every
rehearsal step, rlhw/robot/rehearsal.py) is the truth for it. A classifier's own held-out score (rlhw
train-reward) is measured on frames like the ones it was trained on; this one measures it on another run's
frames, where a policy goes where the demos never went: the figure that says whether the policy can fool it.
"""

from __future__ import annotations

import argparse
import glob


def main() -> int:
    from rlhw.rl.episodes import load_episode
    from rlhw.vision.classifier import load_classifier

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("episodes", nargs="+", help="episode files or glob patterns")
    ap.add_argument("--threshold", type=float, default=None, help="default: the threshold saved in the model file")
    args = ap.parse_args()
    model, _ = load_classifier(args.model, "MODEL")
    threshold = model.spec.threshold if args.threshold is None else args.threshold
    counts = dict(tp=0, fp=0, fn=0, tn=0)
    files = sorted({f for pattern in args.episodes for f in glob.glob(pattern)})
    used = 0
    for f in files:
        ep = load_episode(f)
        if ep is None or ep.judge_success is None:
            continue
        used += 1
        truth = ep.judge_success
        said = model.probability({c: ep.obs[f"image_{c}"][1:] for c in model.spec.cameras}) >= threshold
        counts["tp"] += int((said & truth).sum())
        counts["fp"] += int((said & ~truth).sum())
        counts["fn"] += int((~said & truth).sum())
        counts["tn"] += int((~said & ~truth).sum())
    tp, fp, fn = counts["tp"], counts["fp"], counts["fn"]
    precision = tp / (tp + fp) if tp + fp else float("nan")
    recall = tp / (tp + fn) if tp + fn else float("nan")
    print(
        f"{args.model} at threshold {threshold}: {used} episodes with a judge verdict; TP {tp} FP {fp} FN {fn} "
        f"TN {counts['tn']}; precision {precision:.3f} recall {recall:.3f}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
