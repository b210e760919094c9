"""Benchmark: the per-step CPU cost of vision, against a proprio-only env step measured in the same run.

Measured (CPU seconds of this process, ``time.process_time``, so the figures do not depend on what
else the machine runs; torch on ONE thread, the setting of an env server or learner sharing cores):

- ``env step, proprio only``: make_env push_cube on MuJoCo, no cameras: the baseline;
- ``env step + 1 camera``: the same with one front camera at 64 and 128 px (rendering dominates);
- ``render``: one MujocoCamera frame after the scene changed, 64 and 128 px;
- both again with ``env.sim_camera_meshes=collision`` (the arm drawn as its collision shapes);
- ``env step + classifier``: images on (64 px) and ``env.reward.classifier`` set (a cnn classifier at
  64 px input), with the classifier's own latency (``info["timing"]["classifier"]``);
- ``encoder forward``: each kind (cnn, resnet10, resnet18), batch 1 and 256, 64 and 128 px, no grad;
- ``random shift``: one augmentation call on a batch of 256 uint8 images, 64 and 128 px.

    PYTHONPATH=. nice -n 5 .venv/bin/python tools/bench_vision.py           # about a minute of CPU
    PYTHONPATH=. nice -n 5 .venv/bin/python tools/bench_vision.py --quick   # a smoke run
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import drivers.mujoco  # noqa: E402,F401  (chooses the GL backend before mujoco is imported)
from rlhw.config import load_config  # noqa: E402
from rlhw.config.vision import ImageEncoderConfig  # noqa: E402
from rlhw.robot import make_env  # noqa: E402
from rlhw.robot.pose import Pose  # noqa: E402
from rlhw.vision.augment import random_shift  # noqa: E402
from rlhw.vision.classifier import ClassifierSpec, SuccessClassifier, save_classifier  # noqa: E402
from rlhw.vision.encoders import build_image_encoder  # noqa: E402

PUSH = [
    "env.sim=mujoco",
    "env.task=push_cube",
    "env.safety.workspace_low=[0.25,-0.3,0.02]",
    "env.task_options.terminate_on_success=false",
    "env.max_episode_steps=1000",
]


def per_call(fn, n: int) -> tuple[float, float]:
    """(CPU ms, wall ms) per call of ``fn``, after one warm-up call."""
    fn()
    c, w = time.process_time(), time.perf_counter()
    for _ in range(n):
        fn()
    return (time.process_time() - c) / n * 1e3, (time.perf_counter() - w) / n * 1e3


def env_steps(overrides: list[str], n: int) -> dict[str, float]:
    env = make_env(load_config("configs/sim_reach.yaml", PUSH + overrides))
    rng = np.random.default_rng(0)
    try:
        env.reset(seed=0)
        timings = []

        def step():
            timings.append(env.step(rng.uniform(-0.3, 0.3, 3).astype(np.float32)).timing.get("classifier", 0.0))

        cpu, wall = per_call(step, n)
        return {"cpu_ms": cpu, "wall_ms": wall, "classifier_ms": float(np.median(timings[1:])) * 1e3}
    finally:
        env.close()


def camera(size: int, meshes: str = "visual") -> list[str]:
    return [
        "env.images=true",
        f"env.image_size=[{size},{size}]",
        "env.sim_cameras=[front]",
        f"env.sim_camera_meshes={meshes}",
    ]


def render(size: int, n: int, meshes: str = "visual") -> tuple[float, float]:
    env = make_env(load_config("configs/sim_reach.yaml", PUSH + camera(size, meshes)))
    cam, arm = env.cameras["front"], env.arm
    xs = iter(np.linspace(0.42, 0.52, n + 1))
    try:
        return per_call(lambda: (arm.set_object_pose("cube", Pose((next(xs), 0.0, 0.025))), cam.latest()), n)
    finally:
        env.close()


@torch.no_grad()
def encoder_forward(kind: str, size: int, batch: int, n: int) -> tuple[float, float]:
    enc = build_image_encoder(ImageEncoderConfig(kind=kind), (size, size, 3)).eval()
    x = torch.randint(0, 256, (batch, size, size, 3), dtype=torch.uint8)
    return per_call(lambda: enc(x), n)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", default=None, help="also write the figures to this file")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    steps, frames, small = (5, 3, 2) if a.quick else (40, 15, 10)
    rows: dict[str, dict] = {}

    base = env_steps([], steps * 5)
    rows["env step, proprio only (baseline)"] = base
    for size in (64, 128):
        for meshes, label in (("visual", ""), ("collision", ", arm as collision shapes")):
            rows[f"env step + 1 camera {size}px{label}"] = env_steps(camera(size, meshes), steps)
            cpu, wall = render(size, frames, meshes)
            rows[f"render one frame {size}px{label}"] = {"cpu_ms": cpu, "wall_ms": wall}
    with tempfile.TemporaryDirectory() as tmp:
        model = save_classifier(SuccessClassifier(ClassifierSpec(("front",), (64, 64))), os.path.join(tmp, "c.pt"))
        rows["env step + 1 camera 64px + classifier"] = env_steps(
            [*camera(64), f"env.reward.classifier={model}", "env.reward.terminate_on_success=false"], steps
        )
    for kind in ("cnn", "resnet10", "resnet18"):
        for size, batch in ((64, 1), (128, 1), (64, 256), (128, 256)):
            if a.quick and batch == 256 and (kind != "cnn" or size == 128):
                continue
            cpu, wall = encoder_forward(kind, size, batch, small if batch == 1 else 1)
            rows[f"encoder {kind} forward {size}px batch {batch}"] = {"cpu_ms": cpu, "wall_ms": wall}
    gen = torch.Generator().manual_seed(0)
    for size in (64, 128):
        x = torch.randint(0, 256, (256, size, size, 3), dtype=torch.uint8)
        cpu, wall = per_call(lambda: random_shift(x, 4, gen), small)
        rows[f"random shift, batch 256, {size}px"] = {"cpu_ms": cpu, "wall_ms": wall}

    print(f"{'what':68} {'CPU ms':>9} {'wall ms':>9} {'x baseline':>11}")
    for name, r in rows.items():
        print(f"{name:68} {r['cpu_ms']:9.2f} {r['wall_ms']:9.2f} {r['cpu_ms'] / base['cpu_ms']:11.1f}")
    cls = rows["env step + 1 camera 64px + classifier"]
    print(f"classifier latency per step at the env (info timing, median): {cls['classifier_ms']:.2f} ms")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
