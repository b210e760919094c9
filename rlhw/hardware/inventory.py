"""What a live node actually has, and whether that matches the config.

The runtime runs ``probe_local`` once on every node (inside a Ray task pinned to it) before any
worker starts, then calls ``check_inventory`` on the collected results, so a missing robot, camera
or GPU is reported up front, by node and device, instead of as a hang in some worker later.
"""

from __future__ import annotations

import socket
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from rlhw.errors import HardwareError
from rlhw.hardware.accelerators import count_accelerators
from rlhw.hardware.registry import HardwareEntry, get_hardware_type
from rlhw.placement.grammar import format_ranks


class DeclaredHardware(Protocol):
    """What the inventory reads of a cluster config (`rlhw.config.ClusterConfig` is one): a protocol, so
    that the hardware layer does not import the config, which validates hardware through this layer."""

    num_nodes: int

    def hardware_on_node(self, node_rank: int) -> Sequence[tuple[str, str, int, HardwareEntry]]:
        """(type name, node group label, hardware rank, entry) of every device declared on ``node_rank``."""
        ...

    def declared_accelerators(self) -> dict[int, int]:
        """node rank -> ``accelerators_per_node`` where a node group gives it."""
        ...


@dataclass(frozen=True)
class Inventory:
    """One node's probe result. ``devices`` maps type name -> identity -> problem (None = present)."""

    node_rank: int
    hostname: str
    accelerators: int
    devices: dict[str, dict[str, str | None]] = field(default_factory=dict)

    def missing(self) -> list[tuple[str, str, str]]:
        """(type, identity, problem) for every declared device that was not found."""
        return [(t, i, p) for t, found in self.devices.items() for i, p in found.items() if p is not None]

    def to_json(self) -> dict:
        return {
            "node_rank": self.node_rank,
            "hostname": self.hostname,
            "accelerators": self.accelerators,
            "devices": {t: dict(d) for t, d in self.devices.items()},
        }


def probe_local(node_rank: int, cluster: DeclaredHardware, timeout_s: float = 2.0) -> Inventory:
    """Probe this machine as node ``node_rank``: count accelerators and look for every device the
    config declares on this node. Each device check is bounded by ``timeout_s``."""
    if not 0 <= node_rank < cluster.num_nodes:
        raise HardwareError(f"node rank {node_rank} is outside the cluster's 0-{cluster.num_nodes - 1}")
    by_type: dict[str, list] = {}
    for type_name, _label, _rank, entry in cluster.hardware_on_node(node_rank):
        by_type.setdefault(type_name, []).append(entry)
    devices = {name: get_hardware_type(name).probe(entries, timeout_s) for name, entries in by_type.items()}
    return Inventory(node_rank, socket.gethostname(), count_accelerators(timeout_s=max(timeout_s, 5.0)), devices)


def check_inventory(cluster: DeclaredHardware, inventories: Mapping[int, Inventory] | Iterable[Inventory]) -> None:
    """Raise one HardwareError listing every node that is missing, every declared device that was
    not found, and every accelerator count that differs from ``accelerators_per_node``."""
    if isinstance(inventories, Mapping):
        by_node = dict(inventories)
    else:
        by_node = {inv.node_rank: inv for inv in inventories}
    problems: list[str] = []
    missing_nodes = [r for r in range(cluster.num_nodes) if r not in by_node]
    if missing_nodes:
        problems.append(
            f"node rank{'s' if len(missing_nodes) > 1 else ''} {format_ranks(missing_nodes)} did not report "
            f"(num_nodes is {cluster.num_nodes}; is every node started with its node rank?)"
        )
    declared = cluster.declared_accelerators()
    for rank in sorted(by_node):
        inv = by_node[rank]
        where = f"node {rank} ({inv.hostname})"
        if rank >= cluster.num_nodes:
            problems.append(f"{where} is outside the cluster's node ranks 0-{cluster.num_nodes - 1}")
            continue
        want = declared.get(rank)
        if want is not None and want != inv.accelerators:
            problems.append(
                f"{where}: config says accelerators_per_node: {want} but {inv.accelerators} "
                f"{'is' if inv.accelerators == 1 else 'are'} visible (check CUDA_VISIBLE_DEVICES or fix the config)"
            )
        for type_name, _label, hw_rank, entry in cluster.hardware_on_node(rank):
            result = inv.devices.get(type_name, {})
            ident = entry.identity()
            if ident not in result:
                problems.append(f"{where}: {type_name} {ident} was not probed")
            elif result[ident] is not None:
                problems.append(f"{where}: {type_name} {ident} (rank {hw_rank} of group {_label!r}): {result[ident]}")
    if problems:
        raise HardwareError("hardware does not match the config:\n  " + "\n  ".join(problems))
