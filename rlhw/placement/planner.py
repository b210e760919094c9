"""Turn ``cluster.component_placement`` into one Placement record per process.

Each segment ``resources:processes`` shares its processes evenly over its resources: with more
processes than resources, consecutive processes share a resource (``0-1:0-3`` puts p0,p1 on 0 and
p2,p3 on 1); with more resources than processes, each process owns a consecutive block of
resources, which must lie on one node. Without ``:processes`` a segment takes the next block of
process ranks, one per resource, starting after the highest rank given so far in the component.
"""

from __future__ import annotations

import difflib

from rlhw.errors import PlacementError
from rlhw.placement.grammar import RankRange, check_multiple, format_ranks, parse_placement
from rlhw.placement.records import Placement
from rlhw.placement.resources import ACCELERATOR, NODE, ResourceTable, group_resources
from rlhw.placement.view import ClusterView, RuleView

#: More processes than this in one component is a typo, not a plan; refuse before allocating them.
MAX_PROCESSES = 1_000_000


class PlacementPlan(dict):
    """``{component: [Placement, ...]}`` ordered by rank; an unknown component is a PlacementError."""

    def __missing__(self, component: str):
        close = difflib.get_close_matches(str(component), list(self), n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        known = ", ".join(self) or "none"
        raise PlacementError(
            "cluster.component_placement",
            f"component {component!r} is not placed{hint} (placed components: {known}); add it to component_placement",
        )

    @property
    def num_nodes(self) -> int:
        return getattr(self, "_num_nodes", 0)


def plan(cluster: ClusterView, accelerators: dict[int, int] | None = None) -> PlacementPlan:
    """Plan every component. ``accelerators`` is the detected GPU count per node rank on a live
    cluster; without it (dry run) the groups' ``accelerators_per_node`` are used."""
    counts = _accelerator_counts(cluster, accelerators)
    tables: dict[str, ResourceTable] = {}
    out = PlacementPlan()
    out._num_nodes = cluster.num_nodes
    for name, (key, rule) in cluster.components().items():
        out[name] = _plan_component(name, key, rule, cluster, counts, tables)
    return out


def _accelerator_counts(cluster: ClusterView, detected: dict[int, int] | None) -> dict[int, int]:
    counts = cluster.declared_accelerators()
    if detected is None:
        return counts
    if not isinstance(detected, dict):
        raise PlacementError("", f"accelerators must map node rank -> GPU count, got {detected!r}")
    for node, n in detected.items():
        if isinstance(node, bool) or not isinstance(node, int) or not 0 <= node < cluster.num_nodes:
            raise PlacementError("", f"accelerators names node {node!r}, outside node ranks 0-{cluster.num_nodes - 1}")
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise PlacementError("", f"accelerators for node {node} must be a count >= 0, got {n!r}")
    merged = dict(counts)
    merged.update(detected)
    return merged


def _plan_component(
    name: str,
    key: str,
    rule: RuleView,
    cluster: ClusterView,
    counts: dict[int, int],
    tables: dict[str, ResourceTable],
) -> list[Placement]:
    # rank -> (table, resource indices, segment text) ; filled segment by segment
    assigned: dict[int, tuple[ResourceTable, list[int], str]] = {}
    next_rank = 0
    total = 0
    for i, entry in enumerate(rule.entries):
        path = rule.entry_path(key, i)
        label = entry.group_label
        if label not in tables:
            try:
                tables[label] = group_resources(cluster, label, counts)
            except PlacementError as e:
                raise PlacementError(rule.entry_path(key, i, "node_group"), e.message) from None
        table = tables[label]
        try:
            spec = parse_placement(entry.placement)
        except PlacementError as e:
            raise PlacementError(path, e.message) from None
        for seg in spec.segments:
            text = str(seg)
            res = seg.resources if seg.resources is not None else RankRange(0, len(table) - 1)
            if len(table) == 0:
                raise PlacementError(path, f"{table.describe()}; nothing to place {name} on")
            if res.end >= len(table):
                raise PlacementError(
                    path,
                    f"resource rank {res.end} in {text!r} is out of range: {table.describe()} "
                    f"(0-{len(table) - 1}){_range_hint(table)}",
                )
            procs = seg.processes if seg.processes is not None else RankRange(next_rank, next_rank + len(res) - 1)
            try:
                check_multiple(len(res), len(procs), text)
            except PlacementError as e:
                raise PlacementError(path, e.message) from None
            total += len(procs)
            if total > MAX_PROCESSES:
                raise PlacementError(
                    path, f"{name} would have more than {MAX_PROCESSES} processes; is {text!r} a typo?"
                )
            _assign(name, path, text, table, res, procs, assigned)
            next_rank = max(next_rank, procs.end + 1)
    _check_continuous(name, key, assigned)
    return _records(name, assigned)


def _range_hint(table: ResourceTable) -> str:
    if table.hardware_type == ACCELERATOR:
        return "; use fewer ranks, or check accelerators_per_node"
    if table.hardware_type == NODE and table.group != "node":
        return (
            "; no accelerators are declared or detected there, so its ranks are nodes. For GPU ranks in a "
            "dry run, set accelerators_per_node on the node group"
        )
    return ""


def _assign(name, path, text, table, res: RankRange, procs: RankRange, assigned) -> None:
    resources = list(res)
    n_res, n_proc = len(resources), len(procs)
    for j, p in enumerate(procs):
        if n_proc >= n_res:
            owned = [resources[j // (n_proc // n_res)]]
        else:
            per = n_res // n_proc
            owned = resources[j * per : (j + 1) * per]
            nodes = sorted({table.nodes[r] for r in owned})
            if len(nodes) > 1:
                raise PlacementError(
                    path,
                    f"process {p} of {name} would own resources {owned[0]}-{owned[-1]} of group {table.group!r}, "
                    f"which span nodes {format_ranks(nodes)}; a process runs on one node: "
                    "split the segment so each process's resources share a node",
                )
        if p in assigned:
            raise PlacementError(
                path, f"process rank {p} of {name} is given twice (in {assigned[p][2]!r} and {text!r}); each rank once"
            )
        assigned[p] = (table, owned, text)


def _check_continuous(name: str, key: str, assigned: dict) -> None:
    n = len(assigned)
    if n and max(assigned) != n - 1:
        missing = [r for r in range(max(assigned) + 1) if r not in assigned]
        raise PlacementError(
            f"cluster.component_placement.{key}",
            f"process ranks of {name} must be continuous from 0 to N-1; {format_ranks(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} missing",
        )


def _records(name: str, assigned: dict[int, tuple[ResourceTable, list[int], str]]) -> list[Placement]:
    world = len(assigned)
    per_node: dict[int, int] = {}
    rows = []
    for rank in range(world):
        table, owned, _ = assigned[rank]
        node = table.nodes[owned[0]]
        local_rank = per_node.get(node, 0)
        per_node[node] = local_rank + 1
        rows.append((rank, table, owned, node, local_rank))
    out = []
    for rank, table, owned, node, local_rank in rows:
        local = tuple(table.local[r] for r in owned)
        out.append(
            Placement(
                component=name,
                rank=rank,
                world_size=world,
                node_rank=node,
                node_group=table.group,
                hardware_type=table.hardware_type,
                hardware_ranks=tuple(table.ranks[r] for r in owned),
                local_hardware_ranks=local,
                local_rank=local_rank,
                local_world_size=per_node[node],
                visible_accelerators=tuple(str(x) for x in local) if table.hardware_type == ACCELERATOR else (),
            )
        )
    return out
