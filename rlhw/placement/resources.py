"""What the ranks in a placement string refer to, for each node group.

* a group with ``hardware``: that type's devices, in config order (robot 0, robot 1, ...);
* a group without hardware whose nodes have accelerators: the GPUs, numbered across the group
  node-major (node 8's GPUs are 0-7, node 9's are 8-15, ...);
* a group without hardware or accelerators: its nodes, numbered by position in the group;
* the reserved ``node`` group: every node of the cluster, numbered by global node rank;
* the implicit ``cluster`` group (a component placed without ``node_group``): every accelerator in
  the cluster, node-major, when any node has accelerators; otherwise every node by global rank.
  Nodes without accelerators are not in it then: place CPU-only work with ``node_group: node``.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlhw.placement.view import ClusterView

ACCELERATOR = "Accelerator"
NODE = "node"


@dataclass(frozen=True)
class ResourceTable:
    """The ranked resources of one node group: resource ``i`` is on ``nodes[i]`` at local index ``local[i]``."""

    group: str
    hardware_type: str
    nodes: tuple[int, ...]
    local: tuple[int, ...]
    #: hardware rank reported for resource i (its index, or the global node rank in the ``node`` group)
    ranks: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.nodes)

    def describe(self) -> str:
        kind = {ACCELERATOR: "accelerator", NODE: "node"}.get(self.hardware_type, self.hardware_type)
        return f"group {self.group!r} has {len(self)} {kind} rank{'s' if len(self) != 1 else ''}"


def group_resources(cluster: ClusterView, label: str, accelerators: dict[int, int]) -> ResourceTable:
    if label == "node":
        nodes = tuple(range(cluster.num_nodes))
        return ResourceTable("node", NODE, nodes, (0,) * len(nodes), nodes)
    if label == "cluster":
        return _on_nodes("cluster", tuple(range(cluster.num_nodes)), accelerators, node_ranks_are_global=True)
    group = cluster.group(label)
    if group.hardware is not None:
        nodes, local, seen = [], [], {}
        for e in group.hardware.configs:
            nodes.append(e.node_rank)
            local.append(seen.get(e.node_rank, 0))
            seen[e.node_rank] = local[-1] + 1
        return ResourceTable(label, group.hardware.type, tuple(nodes), tuple(local), tuple(range(len(nodes))))
    return _on_nodes(label, group.node_ranks, accelerators, node_ranks_are_global=False)


def _on_nodes(
    label: str, node_ranks: tuple[int, ...], accelerators: dict[int, int], node_ranks_are_global: bool
) -> ResourceTable:
    if any(accelerators.get(n, 0) for n in node_ranks):
        nodes: list[int] = []
        local: list[int] = []
        for n in node_ranks:
            count = accelerators.get(n, 0)
            nodes.extend([n] * count)
            local.extend(range(count))
        return ResourceTable(label, ACCELERATOR, tuple(nodes), tuple(local), tuple(range(len(nodes))))
    ranks = node_ranks if node_ranks_are_global else tuple(range(len(node_ranks)))
    return ResourceTable(label, NODE, tuple(node_ranks), (0,) * len(node_ranks), ranks)
