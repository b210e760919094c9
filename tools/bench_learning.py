"""Time to learn sim reach, and the peak memory of every process of the run together.

    .venv/bin/python tools/bench_learning.py [CONFIG] [key=value ...] [--runs-root DIR]

Runs `rlhw train CONFIG` as a subprocess (default: configs/sim_reach.yaml, the full pipeline), samples
the memory of its whole process tree (driver, Ray's GCS/raylet, every worker, every env server child)
twice a second from /proc, and prints: wall time to the stop, env steps, the eval success that stopped
it, and the peak of summed PSS (proportional set size: shared pages such as the Ray object store and
torch's libraries are split between processes instead of counted once per process) next to the peak of
summed RSS (the pessimistic figure).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _children_map() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        kids.setdefault(ppid, []).append(int(d))
    return kids


def tree(pid: int) -> list[int]:
    kids, out, todo = _children_map(), [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += kids.get(p, [])
    return out


def memory_kib(pid: int) -> tuple[int, int]:
    """(rss, pss) in KiB, 0 when the process is gone."""
    rss = pss = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Rss:"):
                    rss = int(line.split()[1])
                elif line.startswith("Pss:"):
                    pss = int(line.split()[1])
    except OSError:
        pass
    return rss, pss


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("config", nargs="?", default="configs/sim_reach.yaml")
    ap.add_argument("overrides", nargs="*")
    ap.add_argument("--runs-root", default="runs/bench_learning")
    args = ap.parse_args()
    run_dir = Path(args.runs_root) / f"{Path(args.config).stem}-{time.strftime('%Y%m%d-%H%M%S')}"
    cmd = [
        sys.executable,
        "-m",
        "rlhw.cli.main",
        "train",
        args.config,
        *args.overrides,
        "train.progress=false",
        "--run-dir",
        str(run_dir),
    ]
    print("running:", " ".join(cmd), flush=True)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, cwd=ROOT)
    peak_rss = peak_pss = peak_procs = 0
    while proc.poll() is None:
        pids = tree(proc.pid)
        mem = [memory_kib(p) for p in pids]
        rss, pss = sum(m[0] for m in mem), sum(m[1] for m in mem)
        if pss > peak_pss:
            peak_pss, peak_procs = pss, len(pids)
        peak_rss = max(peak_rss, rss)
        time.sleep(0.5)
    wall = time.monotonic() - t0
    status = json.loads((ROOT / run_dir / "run.json").read_text()) if (ROOT / run_dir / "run.json").exists() else {}
    rows = (
        [json.loads(x) for x in (ROOT / run_dir / "metrics.jsonl").read_text().splitlines()]
        if (ROOT / run_dir / "metrics.jsonl").exists()
        else []
    )
    evals = [
        (r["env_steps"], r["eval/success_rate"], r["perf/elapsed_s"])
        for r in rows
        if r.get("eval/success_rate") is not None
    ]
    print()
    print(f"config                 {args.config} {' '.join(args.overrides)}")
    print(f"exit code              {proc.returncode}")
    print(f"status                 {status.get('status')}: {status.get('reason')}")
    print(
        f"wall time (process)    {wall:.0f} s  (training loop {status.get('wall_s', float('nan')):.0f} s; "
        "the rest is Ray start-up and shutdown)"
    )
    print(f"env steps / updates    {status.get('env_steps')} / {status.get('updates')}")
    print("eval curve             " + ", ".join(f"{s}:{v:.2f}@{t:.0f}s" for s, v, t in evals))
    print(
        f"peak memory, all procs PSS {peak_pss / 1024:.0f} MiB, RSS {peak_rss / 1024:.0f} MiB ({peak_procs} processes)"
    )
    print(f"run directory          {run_dir}")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
