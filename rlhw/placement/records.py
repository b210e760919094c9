"""The output of placement planning: one record per process of a component."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class Placement:
    """Where one process of one component runs and what hardware it owns.

    ``hardware_type`` is ``"Accelerator"``, a registered hardware type name (``"Franka"``,
    ``"RealSense"``) or ``"node"``. ``hardware_ranks`` are ranks within the node group (GPU index
    across the group, robot index, or node rank for ``node``); ``local_hardware_ranks`` are the
    indices of the same hardware on its node. ``visible_accelerators`` is what the process gets as
    CUDA_VISIBLE_DEVICES (empty when the node group has no accelerators).
    """

    component: str
    rank: int
    world_size: int
    node_rank: int
    node_group: str
    hardware_type: str
    hardware_ranks: tuple[int, ...]
    local_hardware_ranks: tuple[int, ...]
    local_rank: int
    local_world_size: int
    visible_accelerators: tuple[str, ...] = field(default_factory=tuple)

    @property
    def robot_rank(self) -> int:
        """The Franka arm this process drives (its first hardware rank) where it is placed on arms, else its own
        rank: a simulator's arm is numbered by its env worker. The one rule of a cell's robot rank."""
        return self.hardware_ranks[0] if self.hardware_type == "Franka" and self.hardware_ranks else self.rank

    def to_json(self) -> dict:
        d = asdict(self)
        for k in ("hardware_ranks", "local_hardware_ranks", "visible_accelerators"):
            d[k] = list(d[k])
        return d
