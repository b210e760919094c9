"""`rlhw placement CONFIG [key=value ...] [--dry-run] [--json]`: where every process goes.

Meant to be run on a laptop before booking a cluster: it needs neither Ray nor torch (neither is
imported), reads accelerator counts from ``accelerators_per_node`` in a dry run, and prints one row
per process, or with ``--json`` a machine-readable document of a fixed shape.
"""

from __future__ import annotations

import argparse
import json
import sys

from rlhw.cli.common import add_config_arguments
from rlhw.config.root import Config

DEFAULT_CONFIG = "configs/hetero_18node.yaml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, default=DEFAULT_CONFIG)
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="plan from the config alone (accelerators_per_node), without looking at a live cluster",
    )
    parser.add_argument(
        "--address",
        metavar="RAY_ADDRESS",
        help="attach to a running Ray cluster ('auto' or head-ip:6379), check node ranks and hardware, "
        "and plan with the GPUs Ray sees on each node",
    )
    parser.add_argument(
        "--json", action="store_true", help="print JSON: {num_nodes, components: {name: {world_size, processes}}}"
    )
    parser.add_argument(
        "--per-process",
        action="store_true",
        help="one table row per process (default: one row per run of processes that follow one rule)",
    )


def run(args: argparse.Namespace) -> int:
    from rlhw.config import load_config
    from rlhw.errors import ConfigError
    from rlhw.placement import plan

    if args.dry_run and args.address:
        raise ConfigError("--address", "--dry-run plans from the config alone; drop one of --dry-run and --address")
    config = load_config(args.config, args.overrides)
    if args.address:
        accelerators = detect_accelerators(config, args.address)
        source = f"live cluster at {args.address}: GPUs per node " + ", ".join(
            f"{r}:{n}" for r, n in sorted(accelerators.items())
        )
    else:
        accelerators = None
        source = "dry run: accelerators from accelerators_per_node"
        if not args.dry_run:
            source = "planned from the config; pass --address to detect on a live Ray cluster"
    placements = plan(config.cluster, accelerators)
    if args.json:
        json.dump(to_json(config.cluster.num_nodes, placements), sys.stdout, indent=None, separators=(",", ":"))
        sys.stdout.write("\n")
        return 0
    print_table(config.cluster.num_nodes, placements, source, per_process=args.per_process)
    return 0


def detect_accelerators(config: Config, address: str) -> dict[int, int]:
    """GPUs per node rank of the running Ray cluster at ``address``, after the runtime has checked
    node ranks and probed every node's hardware against the config (HardwareError otherwise).
    Only this path imports Ray."""
    import ray

    from rlhw.runtime.cluster import Cluster

    was_connected = ray.is_initialized()
    cluster = Cluster(config, address=address)
    try:
        return dict(cluster.accelerators)
    finally:
        cluster.shutdown()  # stops nothing it did not start; an attached cluster keeps running
        if not was_connected and ray.is_initialized():
            ray.shutdown()  # disconnect this driver only


def to_json(num_nodes: int, placements) -> dict:
    return {
        "num_nodes": num_nodes,
        "components": {
            name: {
                "world_size": len(records),
                "processes": [
                    {
                        "rank": p.rank,
                        "node_rank": p.node_rank,
                        "node_group": p.node_group,
                        "hardware_type": p.hardware_type,
                        "hardware_ranks": list(p.hardware_ranks),
                        "local_hardware_ranks": list(p.local_hardware_ranks),
                        "local_rank": p.local_rank,
                        "local_world_size": p.local_world_size,
                        "visible_accelerators": list(p.visible_accelerators),
                    }
                    for p in records
                ],
            }
            for name, records in placements.items()
        },
    }


def compact_rows(records) -> list[list]:
    """Group consecutive processes into runs that follow one rule, so 400 agents are 4 rows.

    A run is consecutive ranks on one node and group where every process owns ``k`` consecutive
    resources and ``s`` consecutive processes share each one (k > 1 or s > 1, never both), which is
    exactly what one placement segment produces; any irregularity starts a new run."""
    runs: list[list] = []
    for p in records:
        if runs and _extends(runs[-1], p):
            runs[-1].append(p)
        else:
            runs.append([p])
    out: list[list] = []
    for run in runs:  # a run that ends inside a share group is split so every row is exact
        share = _share(run)
        cut = len(run) - len(run) % share if len(run) > share else len(run)
        out.append(run[:cut])
        if cut < len(run):
            out.append(run[cut:])
    return out


def _share(run) -> int:
    first = run[0].hardware_ranks
    return next((j for j, p in enumerate(run) if p.hardware_ranks != first), len(run))


def _extends(run: list, p) -> bool:
    r0 = run[0]
    if (p.node_rank, p.node_group, p.hardware_type) != (r0.node_rank, r0.node_group, r0.hardware_type):
        return False
    k = len(r0.hardware_ranks)
    if len(p.hardware_ranks) != k or p.rank != run[-1].rank + 1:
        return False
    j = len(run)
    if k > 1:
        step = j * k
        return p.hardware_ranks == tuple(h + step for h in r0.hardware_ranks) and p.local_hardware_ranks == tuple(
            h + step for h in r0.local_hardware_ranks
        )
    share = _share(run)
    if share == len(run):  # every process so far shares one resource: p shares it too, or takes the next
        return _offset_ok(r0, p, 0) or _offset_ok(r0, p, 1)
    return _offset_ok(r0, p, j // share)


def _offset_ok(r0, p, offset: int) -> bool:
    if r0.node_group == "node":  # node ranks: one resource per node, never an offset within a run
        return offset == 0 and p.hardware_ranks == r0.hardware_ranks
    return (
        p.hardware_ranks[0] == r0.hardware_ranks[0] + offset
        and p.local_hardware_ranks[0] == r0.local_hardware_ranks[0] + offset
    )


def print_table(num_nodes: int, placements, source: str, per_process: bool = False) -> None:
    from rich.console import Console
    from rich.table import Table

    from rlhw.placement.grammar import format_ranks

    table = Table(
        title=f"placement on {num_nodes} node{'s' if num_nodes != 1 else ''} ({source})", title_justify="left"
    )
    for col, justify in (
        ("component", "left"),
        ("ranks", "right"),
        ("node", "right"),
        ("group", "left"),
        ("hardware", "left"),
        ("hw ranks", "right"),
        ("local hw", "right"),
        ("local ranks", "right"),
        ("per process", "left"),
        ("visible accelerators", "left"),
    ):
        table.add_column(col, justify=justify, no_wrap=True)
    for name, records in placements.items():
        rows = [[p] for p in records] if per_process else compact_rows(records)
        for i, run in enumerate(rows):
            p0, p1 = run[0], run[-1]
            hw = sorted({h for p in run for h in p.hardware_ranks})
            local = sorted({h for p in run for h in p.local_hardware_ranks})
            share = _share(run)
            k = len(p0.hardware_ranks)
            unit = "node" if p0.hardware_type == "node" else p0.hardware_type
            if k > 1:
                each = f"owns {k} {unit}s"
            elif share > 1:
                each = f"{share} share one {unit}"
            else:
                each = f"one {unit}"
            if len(run) == 1 or not p0.visible_accelerators:
                visible = ",".join(p0.visible_accelerators) or "-"
            else:
                visible = "its own local hw"
            ranks = str(p0.rank) if p0 is p1 else f"{p0.rank}-{p1.rank}"
            local_ranks = str(p0.local_rank) if p0 is p1 else f"{p0.local_rank}-{p1.local_rank}"
            table.add_row(
                name if i == 0 else "",
                f"{ranks} of {p0.world_size}",
                str(p0.node_rank),
                p0.node_group,
                p0.hardware_type,
                format_ranks(hw),
                format_ranks(local),
                f"{local_ranks} of {p0.local_world_size}",
                each,
                visible,
                end_section=i == len(rows) - 1,
            )
    Console(width=max(140, Console().width)).print(table)
