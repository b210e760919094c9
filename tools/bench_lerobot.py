"""Benchmark: LeRobotDataset export and import, against rlhw's own episode files, in the same run.

Frames are real: MuJoCo renders the insert task's wrist and front cameras at 128 x 128 while random
actions move the arm (collected once, not timed). Then, repeated ``--repeats`` times on the same steps:

- ``rlhw write``: EpisodeRecorder writes the episodes (rlhw's own format; the baseline of export);
- ``export``: `export_episodes` reads those episode files and writes a LeRobotDataset (h264, and AV1);
- ``rlhw read``: `load_demos` on the rlhw episodes (the baseline of import);
- ``import``: `load_demos` on the export (what `train.demos` does with a LeRobotDataset);
- disk size of each, and the image loss of each codec (PSNR over every frame, dB).

    PYTHONPATH=. nice -n 5 .venv/bin/python tools/bench_lerobot.py              # ~2 min, mostly rendering
    PYTHONPATH=. nice -n 5 .venv/bin/python tools/bench_lerobot.py --quick      # a smoke run
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import drivers.mujoco  # noqa: E402,F401  (chooses the GL backend before mujoco is imported)
from rlhw.config import load_config  # noqa: E402
from rlhw.rl.demos import load_demos  # noqa: E402
from rlhw.rl.episodes import EpisodeRecorder, episode_files  # noqa: E402
from rlhw.rl.lerobot.export import ExportOptions, export_episodes  # noqa: E402
from rlhw.robot import make_env  # noqa: E402

CAMERAS = ["env.images=true", "env.sim_cameras=[wrist,front]", "env.image_size=[128,128]"]


def collect(episodes: int, steps: int, seed: int) -> tuple[list, dict, tuple, dict]:
    """Real rendered episodes [(reset obs, [(action, reward, term, trunc, obs, success)])], the observation
    shapes, the action shape and the env config."""
    config = load_config("configs/sim_insert.yaml", CAMERAS + [f"env.max_episode_steps={steps}"])
    env = make_env(config)
    rng = np.random.default_rng(seed)
    out = []
    try:
        for e in range(episodes):
            obs, _ = env.reset(seed=seed + e).gym()
            first, trace, done = obs, [], False
            while not done:
                action = rng.uniform(-0.5, 0.5, env.spec.action.shape).astype(np.float32)
                obs, reward, terminated, truncated, info = env.step(action).gym()
                trace.append((action, reward, terminated, truncated, obs, info["success"]))
                done = terminated or truncated
            out.append((first, trace))
        shapes = {k: tuple(v.shape) for k, v in env.spec.observations.items()}
        return out, shapes, tuple(env.spec.action.shape), config.env.model_dump(mode="json")
    finally:
        env.close()


def write_rlhw(episodes: list, directory: Path, env_config: dict) -> None:
    rec = EpisodeRecorder(directory)
    for first, trace in episodes:
        rec.begin(first, kind="demo", meta={"control_hz": env_config["control_hz"], "env_config": env_config})
        for action, reward, term, trunc, obs, success in trace:
            rec.step(action, reward, term, trunc, obs, success)
        rec.end()


def size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float(10 * np.log10(255.0**2 / mse))


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=8)
    parser.add_argument("--steps", type=int, default=50, help="steps per episode")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", default=None, help="also write the figures to this file")
    args = parser.parse_args()
    if args.quick:
        args.episodes, args.steps, args.repeats = 2, 10, 1
    t0 = time.perf_counter()
    episodes, shapes, action, env_config = collect(args.episodes, args.steps, args.seed)
    steps = sum(len(t) for _, t in episodes)
    print(
        f"collected {steps} steps in {len(episodes)} episodes, 2 cameras at 128 px, in "
        f"{time.perf_counter() - t0:.0f} s (rendering, not timed)",
        flush=True,
    )
    figures: dict[str, list[float]] = {}
    sizes: dict[str, int] = {}
    quality: dict[str, float] = {}
    work = Path(tempfile.mkdtemp(prefix="bench_lerobot_"))
    try:
        warm = work / "warm"  # the first call of each path imports pyarrow, PyAV, PIL...: not what is measured
        write_rlhw(episodes[:1], warm / "rlhw", env_config)
        for codec in ("h264", "libsvtav1"):
            export_episodes(episode_files(warm / "rlhw", "demo"), warm / codec, ExportOptions(codec=codec))
            load_demos([str(warm / codec)], shapes, action)
        load_demos([str(warm / "rlhw")], shapes, action)
        for r in range(args.repeats):
            rlhw_dir = work / f"rlhw{r}"
            figures.setdefault("rlhw write", []).append(
                steps / timed(lambda: write_rlhw(episodes, rlhw_dir, env_config))
            )
            files = episode_files(rlhw_dir, "demo")
            figures.setdefault("rlhw read", []).append(
                steps / timed(lambda: load_demos([str(rlhw_dir)], shapes, action))
            )
            sizes["rlhw"] = size(rlhw_dir)
            ours = load_demos([str(rlhw_dir)], shapes, action)
            for codec in ("h264", "libsvtav1"):
                out = work / f"{codec}{r}"
                options = ExportOptions(repo_id="bench/insert", codec=codec)
                figures.setdefault(f"export {codec}", []).append(
                    steps / timed(lambda: export_episodes(files, out, options))
                )
                back: list = []
                figures.setdefault(f"import {codec}", []).append(
                    steps / timed(lambda: back.extend(load_demos([str(out)], shapes, action)))
                )
                sizes[codec] = size(out)
                quality[codec] = min(
                    psnr(np.concatenate([b[k] for b in ours]), np.concatenate([b[k] for b in back]))
                    for k in ours[0]
                    if k.startswith("obs/image_")
                )
                shutil.rmtree(out)
            shutil.rmtree(rlhw_dir)
            print(
                f"repeat {r + 1}/{args.repeats}: " + ", ".join(f"{k} {v[-1]:.0f}" for k, v in figures.items()),
                flush=True,
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in figures.items()}
    print(f"\n{steps} steps, 2 cameras at 128 px; steps/s, median of {args.repeats} (min-max)")
    for k, v in figures.items():
        base = med["rlhw write"] if not k.startswith(("import", "rlhw read")) else med["rlhw read"]
        print(f"  {k:16s} {med[k]:8.0f}  ({min(v):.0f}-{max(v):.0f})  {med[k] / base:5.2f}x rlhw's own")
    print("disk, bytes per step:")
    for k, v in sizes.items():
        extra = (
            f"  {sizes['rlhw'] / v:5.1f}x smaller than rlhw's, worst camera PSNR {quality[k]:.1f} dB"
            if k != "rlhw"
            else ""
        )
        print(f"  {k:16s} {v / steps:8.0f}{extra}")
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "steps": steps,
                    "steps_per_s": figures,
                    "median": med,
                    "bytes": sizes,
                    "psnr_db": quality,
                    "args": vars(args),
                },
                indent=2,
            )
        )


if __name__ == "__main__":
    main()
