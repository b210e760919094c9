"""Benchmark the placement planner.

1. `rlhw placement configs/hetero_18node.yaml --dry-run` end to end (a fresh interpreter each time),
   against `python -c pass` measured in the same run: the difference is what rlhw itself costs.
2. Planning 1,000 nodes x 8 GPUs with three 8,000-process components (load + validate, then plan),
   with peak traced memory and the process's max RSS.

    .venv/bin/python tools/bench_placement.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import gc
import os
import resource
import statistics
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def time_command(cmd: list[str], repeat: int) -> tuple[float, float, float, int]:
    """Median wall time, min wall time, median CPU time (user+sys) of a fresh process.

    CPU time is reported because on a shared machine wall time mostly measures the neighbours."""
    times, cpu = [], []
    rc = 0
    for _ in range(repeat):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        t = time.perf_counter()
        out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120)
        times.append(time.perf_counter() - t)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
        rc = rc or out.returncode
        if out.returncode:
            print(f"  ! {' '.join(cmd[1:])} exited {out.returncode}: {out.stderr.strip().splitlines()[-1:]}")
    return statistics.median(times), min(times), statistics.median(cpu), rc


def big_config(nodes: int, gpus: int) -> dict:
    n = nodes * gpus
    return {
        "cluster": {
            "num_nodes": nodes,
            "node_groups": [
                {
                    "label": "gpu",
                    "node_ranks": f"0-{nodes - 1}",
                    "accelerators_per_node": gpus,
                    "env_configs": [{"node_ranks": f"0-{nodes - 1}", "env_vars": [{"NCCL_DEBUG": "WARN"}]}],
                },
            ],
            "component_placement": {
                "learner": {"node_group": "gpu", "placement": "all"},
                "rollout": {"node_group": "gpu", "placement": f"0-{n - 1}:0-{n - 1}"},
                "agent": {"node_group": "node", "placement": f"0-{nodes - 1}:0-{n - 1}"},
            },
        }
    }


def bench_plan(nodes: int, gpus: int, repeat: int):
    from rlhw.config import load_config_dict
    from rlhw.placement import plan

    data = big_config(nodes, gpus)
    load_times, plan_times = [], []
    for _ in range(repeat):
        gc.collect()
        t = time.perf_counter()
        cfg = load_config_dict(data)
        load_times.append(time.perf_counter() - t)
        t = time.perf_counter()
        placements = plan(cfg.cluster)
        plan_times.append(time.perf_counter() - t)
    assert {k: len(v) for k, v in placements.items()} == {
        "learner": nodes * gpus,
        "rollout": nodes * gpus,
        "agent": nodes * gpus,
    }
    del placements
    gc.collect()
    tracemalloc.start()
    cfg = load_config_dict(data)
    placements = plan(cfg.cluster)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return statistics.median(load_times), statistics.median(plan_times), peak, sum(len(v) for v in placements.values())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    py = sys.executable
    print(f"python {sys.version.split()[0]}, {args.repeat} repeats, medians (min)\n")

    base = time_command([py, "-c", "pass"], args.repeat)
    cli = time_command([py, "-m", "rlhw.cli.main", "placement", "configs/hetero_18node.yaml", "--dry-run"], args.repeat)
    js = time_command(
        [py, "-m", "rlhw.cli.main", "placement", "configs/hetero_18node.yaml", "--dry-run", "--json"], args.repeat
    )
    # The placement module alone, without rlhw.cli.main (which builds every subcommand's parser).
    alone = (
        "import argparse; from rlhw.cli import placement as m; p = argparse.ArgumentParser(); m.add_arguments(p); "
        "raise SystemExit(m.run(p.parse_args(['configs/hetero_18node.yaml', '--dry-run'])))"
    )
    mod = time_command([py, "-c", alone], args.repeat)
    print(f"load average at start: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(
        f"{'end to end (fresh interpreter)':48} {'wall med':>9} {'wall min':>9} {'cpu med':>8} {'cpu - baseline':>15}"
    )
    for label, r in (
        ("python -c pass (baseline)", base),
        ("rlhw placement hetero_18node --dry-run", cli),
        ("rlhw placement hetero_18node --dry-run --json", js),
        ("placement module alone, --dry-run (no cli.main)", mod),
    ):
        extra = "" if r is base else f"{r[2] - base[2]:15.3f}"
        print(f"{label:48} {r[0]:9.3f} {r[1]:9.3f} {r[2]:8.3f} {extra}")
    rc = cli[3] or js[3] or mod[3]
    if rc:
        print("  (the CLI failed; figures above are not valid)")

    nodes, gpus = 1000, 8
    load_s, plan_s, peak, records = bench_plan(nodes, gpus, args.repeat)
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\nplanning {nodes} nodes x {gpus} GPUs, components learner/rollout/agent of {nodes * gpus} processes each")
    print(f"{'load + validate config':48} {load_s:9.3f} s")
    print(
        f"{'plan (' + str(records) + ' records)':48} {plan_s:9.3f} s   goal < 2 s: {'yes' if plan_s + load_s < 2 else 'NO'}"
    )
    print(f"{'peak traced memory (load + plan)':48} {peak / 2**20:9.1f} MiB")
    print(f"{'process max RSS':48} {rss_mb:9.1f} MiB")
    return 0 if not rc else 1


if __name__ == "__main__":
    sys.exit(main())
