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

DEFAULT_CONFIG = "configs/hetero_18node.yaml"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser, default=DEFAULT_CONFIG)
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="plan from the config alone (accelerators_per_node), without looking at a live cluster",
    )
    parser.add_argument("--json", action="store_true", help="print JSON: {num_nodes, components: {name: {world_size, processes}}}")


def run(args: argparse.Namespace) -> int:
    from rlhw.config import load_config
    from rlhw.placement import plan

    config = load_config(args.config, args.overrides)
    accelerators = None if args.dry_run else detect_accelerators(config)
    placements = plan(config.cluster, accelerators)
    if args.json:
        json.dump(to_json(config.cluster.num_nodes, placements), sys.stdout, indent=None, separators=(",", ":"))
        sys.stdout.write("\n")
        return 0
    source = "dry run: accelerators from accelerators_per_node" if accelerators is None else "accelerators detected on the live cluster"
    if accelerators is None and not args.dry_run:
        source = "planned from the config: this command does no live detection, same as --dry-run"
    print_table(config.cluster.num_nodes, placements, source)
    return 0


def detect_accelerators(config) -> dict[int, int] | None:
    """GPU counts per node rank of a live cluster, or None to plan from the config.

    Live detection belongs to the runtime (rlhw.runtime.Cluster probes every node); this command
    does not start or attach to Ray, so it plans from the config and says so."""
    return None


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


def print_table(num_nodes: int, placements, source: str) -> None:
    from rich.console import Console
    from rich.table import Table

    from rlhw.placement.grammar import format_ranks

    table = Table(title=f"placement on {num_nodes} node{'s' if num_nodes != 1 else ''} ({source})", title_justify="left")
    for col, justify in (
        ("component", "left"),
        ("rank", "right"),
        ("node", "right"),
        ("group", "left"),
        ("hardware", "left"),
        ("hw ranks", "right"),
        ("local hw", "right"),
        ("local rank", "right"),
        ("visible accelerators", "left"),
    ):
        table.add_column(col, justify=justify, no_wrap=True)
    for name, records in placements.items():
        for i, p in enumerate(records):
            table.add_row(
                name if i == 0 else "",
                f"{p.rank}/{p.world_size}",
                str(p.node_rank),
                p.node_group,
                p.hardware_type,
                format_ranks(p.hardware_ranks),
                format_ranks(p.local_hardware_ranks),
                f"{p.local_rank}/{p.local_world_size}",
                ",".join(p.visible_accelerators) if p.visible_accelerators else "-",
                end_section=i == len(records) - 1,
            )
    Console(width=max(120, Console().width)).print(table)
