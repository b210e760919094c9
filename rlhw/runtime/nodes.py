"""Which Ray node has which rlhw node rank.

A node's rank comes from the Ray node label ``rlhw.node_rank`` (``ray start --labels
rlhw.node_rank=3``) or, when the label is absent, from the ``RLHW_NODE_RANK`` variable in the
environment ``ray start`` ran in (read back by a tiny task pinned to that node). The embedded local
cluster is one node with rank 0.
"""

from __future__ import annotations

from dataclasses import dataclass

NODE_RANK_LABEL = "rlhw.node_rank"
NODE_RANK_ENV = "RLHW_NODE_RANK"
NAMESPACE = "rlhw"


@dataclass(frozen=True)
class RayNode:
    """One alive Ray node as rlhw sees it."""

    node_id: str
    ip: str
    node_rank: int | None
    resources: dict

    @property
    def num_gpus(self) -> int:
        return int(self.resources.get("GPU", 0))

    def describe(self) -> str:
        return f"node {self.ip} (Ray node id {self.node_id[:12]})"


def alive_nodes() -> list[RayNode]:
    """Alive Ray nodes with the rank found in their label (``None`` when unlabelled)."""
    import ray

    nodes = []
    for n in ray.nodes():
        if not n.get("Alive", False):
            continue
        labels = n.get("Labels") or {}
        raw = labels.get(NODE_RANK_LABEL)
        rank = _parse_rank(raw) if raw is not None else None
        nodes.append(RayNode(n["NodeID"], n["NodeManagerAddress"], rank, dict(n.get("Resources") or {})))
    return nodes


def _parse_rank(raw: str) -> int | None:
    try:
        return int(raw)
    except (TypeError, ValueError):
        return -1  # reported by the rank check as "not a non-negative integer"


def node_id_for_rank(rank: int) -> str:
    """Ray node id of the node labelled with ``rank`` (for pinning a channel without a Cluster)."""
    for node in alive_nodes():
        if node.node_rank == rank:
            return node.node_id
    nodes = alive_nodes()
    if len(nodes) == 1 and rank == 0:
        return nodes[0].node_id
    from rlhw.errors import ConfigError

    raise ConfigError(
        "node",
        f"no alive Ray node has {NODE_RANK_LABEL}={rank}; known: "
        f"{sorted(n.node_rank for n in nodes if n.node_rank is not None)}",
    )
