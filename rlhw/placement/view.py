"""What the planner reads of a cluster config, as protocols.

`rlhw.config.ClusterConfig` satisfies them; they live here so that the placement layer does not import the
config, which uses the placement grammar to validate ``component_placement`` (the dependency points one way:
config -> placement). A test or a tool may hand the planner any object with these attributes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol


class DeclaredDevice(Protocol):
    """One ``hardware.configs`` entry: the planner needs only the node it is attached to."""

    node_rank: int


class HardwareView(Protocol):
    """A node group's ``hardware`` section: its type gives the ranks their kind, its entries their order."""

    type: str
    configs: Sequence[DeclaredDevice]


class GroupView(Protocol):
    node_ranks: tuple[int, ...]
    hardware: HardwareView | None


class EntryView(Protocol):
    """One ``{node_group, placement}`` entry of a component's placement."""

    placement: str

    @property
    def group_label(self) -> str: ...


class RuleView(Protocol):
    """The placement of one ``component_placement`` key."""

    entries: Sequence[EntryView]

    def entry_path(self, key: str, index: int, field: str = "placement") -> str: ...


class ClusterView(Protocol):
    num_nodes: int

    def group(self, label: str) -> GroupView: ...

    def components(self) -> Mapping[str, tuple[str, RuleView]]: ...

    def declared_accelerators(self) -> dict[int, int]: ...
