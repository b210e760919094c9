"""Does a full garbage collection land inside the robot loop's step? With and without `GcGuard`, same run.

A step here is a stand-in for the env worker's work per step (build an observation dict, a transition, some
reference cycles as protobuf/Ray/dataclass churn makes); the process holds a large long-lived heap, as an env
worker with torch, Ray and grpc imported does, so that a full (generation-2) collection costs what it costs
there. gc.callbacks counts every collection that starts while a step runs, by generation, and times it.

    .venv/bin/python tools/bench_gc_step.py --steps 3000 --heap 200000
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from collections import deque

import numpy as np

from rlhw.runtime.isolation import GcGuard


def one_step(rng: np.random.Generator, window: deque) -> None:
    """Short-lived cycles, plus records that live a few hundred steps (recent transitions, timing history)
    and so reach generation 2 before they die: what makes the interpreter start full collections."""
    obs = {"state": rng.standard_normal(16).astype(np.float32), "meta": {"t": time.perf_counter()}}
    for _ in range(200):  # reference cycles: only a collection frees them
        a: list = [obs]
        b = [a]
        a.append(b)
    record = [{"obs": obs, "reward": float(rng.random()), "i": i} for i in range(100)]
    record.append(record)  # a cycle, so it needs a collection once the window drops it
    window.append(record)


def run(steps: int, episode_len: int, guard: GcGuard | None) -> dict:
    """Time ``steps`` steps; count and time the collections that start inside one, per generation."""
    state = {"in_step": False, "t0": 0.0}
    inside = {0: 0, 1: 0, 2: 0}
    pauses: list[float] = []

    def on_gc(phase, info):
        if not state["in_step"]:
            return
        if phase == "start":
            inside[info["generation"]] += 1
            state["t0"] = time.perf_counter()
        elif info["generation"] == 2:
            pauses.append(time.perf_counter() - state["t0"])

    rng = np.random.default_rng(0)
    window: deque = deque(maxlen=500)
    durations, between = [], []
    gc.callbacks.append(on_gc)
    if guard is not None:
        guard.start()
    try:
        for k in range(steps):
            if guard is not None and k % episode_len == 0:
                t0 = time.perf_counter()
                guard.idle()  # between episodes
                between.append(time.perf_counter() - t0)
            state["in_step"] = True
            t0 = time.perf_counter()
            one_step(rng, window)
            durations.append(time.perf_counter() - t0)
            state["in_step"] = False
    finally:
        if guard is not None:
            guard.stop()
        gc.callbacks.remove(on_gc)
    d = np.array(durations) * 1e3
    return {
        "step_p50_ms": round(float(np.percentile(d, 50)), 3),
        "step_p99_ms": round(float(np.percentile(d, 99)), 3),
        "step_max_ms": round(float(d.max()), 3),
        "collections_in_steps_by_gen": inside,
        "full_pause_in_step_max_ms": round(max(pauses) * 1e3, 3) if pauses else 0.0,
        "full_between_episodes_p50_ms": round(float(np.median(between)) * 1e3, 3) if between else None,
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--episode-len", type=int, default=100)
    p.add_argument("--heap", type=int, default=200_000, help="long-lived objects the process holds")
    args = p.parse_args()
    heap = [{"i": i, "v": [i]} for i in range(args.heap)]  # noqa: F841 - the long-lived heap a full collection walks
    baseline = run(args.steps, args.episode_len, None)
    guarded = run(args.steps, args.episode_len, GcGuard())
    print(json.dumps({"args": vars(args), "interpreter_schedule": baseline, "gc_guard": guarded}, indent=1))


if __name__ == "__main__":
    main()
