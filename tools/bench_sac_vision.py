"""CPU cost of one SAC update from camera images, per image encoder, against proprio only in the same run.

    PYTHONPATH=$PWD nice -n 5 .venv/bin/python tools/bench_sac_vision.py [--size 64] [--batch 128] [--threads 1] \
        [--heap keep|default]

Why: on a robot PC the learner shares a few cores with the env servers; the encoder decides whether an
update from pixels costs milliseconds or a second. Each preset is one `SAC.update` with train.sac's
defaults (N=10 LayerNorm critics, hidden 128x128) on one camera plus 9 proprio values, DrQ random shift
included (augment_pad=4 unless the preset says 0). Figures are CPU seconds of this process
(``time.process_time``) per update, median of blocks run in turn so that a load change on a shared
machine hits every preset alike, and the ratio to the proprio-only update. ``--heap keep`` (the default)
sets up the process as a learner's is (`rlhw.runtime.heap.keep_freed_memory`); ``--heap default`` leaves
glibc's allocator as it is, to measure what that setting is worth.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch

from rlhw.config.train import SacConfig
from rlhw.config.vision import ImageEncoderConfig
from rlhw.rl.sac import SAC, ObsLayout
from rlhw.runtime.heap import keep_freed_memory

PRESETS = {
    "proprio only (baseline)": None,
    "cnn": dict(kind="cnn"),
    "cnn, target's own encoder": dict(kind="cnn", sac=dict(target_features="target")),
    "cnn, no augmentation": dict(kind="cnn", augment_pad=0),
    "resnet10 frozen": dict(kind="resnet10", frozen=True),
    "resnet10 trained": dict(kind="resnet10"),
}


def make(encoder: dict | None, size: int, batch: int, device="cpu") -> tuple[SAC, dict[str, np.ndarray]]:
    """A preset's agent on ``device`` (tools/bench_gpu.py times it on CUDA) and one random batch for it."""
    rng = np.random.default_rng(0)
    shapes, dtypes = {"proprio": (9,)}, {"proprio": "float32"}
    if encoder is not None:
        shapes["image_front"], dtypes["image_front"] = (size, size, 3), "uint8"
    layout = ObsLayout.from_shapes(shapes, dtypes)
    encoder_cfg = dict(encoder or {})
    sac_cfg = encoder_cfg.pop("sac", {})  # train.sac settings of the preset, beside its image encoder
    cfg = SacConfig(batch_size=batch, image_encoder=ImageEncoderConfig(**encoder_cfg), **sac_cfg)
    b = {
        "action": rng.uniform(-1, 1, (batch, 4)).astype(np.float32),
        "reward": rng.random(batch, np.float32),
        "terminated": np.zeros(batch, np.float32),
    }
    for prefix in ("obs/", "next_obs/"):
        for name, shape in shapes.items():
            b[prefix + name] = (
                rng.integers(0, 256, (batch, *shape), dtype=np.uint8)
                if len(shape) == 3
                else rng.random((batch, *shape), np.float32)
            )
    return SAC(layout, -np.ones(4), np.ones(4), cfg, device=device, augment_seed=0), b


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--blocks", type=int, default=3)
    ap.add_argument("--updates", type=int, default=3, help="updates per block")
    ap.add_argument(
        "--heap",
        choices=("keep", "default"),
        default="keep",
        help="keep freed memory for reuse, as a learner does (keep), or glibc's defaults",
    )
    ap.add_argument("--only", nargs="+", choices=list(PRESETS), help="run these presets (the baseline always runs)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    kept = keep_freed_memory() if args.heap == "keep" else False
    torch.manual_seed(0)
    names = [n for n in PRESETS if args.only is None or n in args.only or PRESETS[n] is None]
    agents = {n: make(PRESETS[n], args.size, args.batch) for n in names}
    for sac, batch in agents.values():
        sac.update(batch)  # warm-up
    cpu: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(args.blocks):
        for n, (sac, batch) in agents.items():
            t = time.process_time()
            for _ in range(args.updates):
                sac.update(batch)
            cpu[n].append((time.process_time() - t) / args.updates)
    print(
        f"{args.threads} thread(s), batch {args.batch}, one {args.size}x{args.size} camera + 9 proprio, "
        f"N=10 critics, {args.blocks} blocks x {args.updates} updates, freed memory "
        f"{'kept' if kept else 'returned (glibc defaults)'}; CPU ms per update (median of blocks)"
    )
    base = statistics.median(cpu[names[0]])
    for n in names:
        ms = statistics.median(cpu[n])
        print(f"  {n:28s} {ms * 1e3:9.1f} ms   x{ms / base:7.1f}")


if __name__ == "__main__":
    main()
