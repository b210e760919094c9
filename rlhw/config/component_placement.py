"""The ``component_placement`` section of ``cluster``: where each component runs, in the three
spellings users write (short, one node group, several node groups), kept in the user's form so a
config round-trips. Rules that need the whole cluster (known groups, node ranks in range) are in
rlhw.config.cluster.ClusterConfig; this module checks one key's value on its own.
"""

from __future__ import annotations

import warnings
from typing import Any, Literal

from pydantic import Field, ValidationError, field_validator, model_serializer, model_validator

from rlhw.config.base import StrictModel, as_text
from rlhw.config.errors import config_error
from rlhw.errors import ConfigError
from rlhw.placement.grammar import parse_placement

#: Old component names a config may still write -> the name they stand for. ``actor`` named the learner
#: until the word also meant the policy network (`rlhw.rl.sac.Actor`), Ray's actors and SERL's acting process.
COMPONENT_ALIASES = {"actor": "learner"}

_said: set[str] = set()  # the aliases this process has already warned about


def component_names(key: str) -> list[str]:
    """The components one ``component_placement`` key places: ``"env"``, or ``"rollout, learner"`` for
    components that share one placement. The one place that knows the key's spelling."""
    return [name.strip() for name in key.split(",")]


def canonical_component(name: str) -> str:
    """``name``, or the component an old alias stands for (with a warning, once per process, saying what to
    write instead)."""
    new = COMPONENT_ALIASES.get(name)
    if new is None:
        return name
    if name not in _said:
        _said.add(name)
        warnings.warn(
            f"cluster.component_placement: component {name!r} is now called {new!r}; write {new!r} "
            f"(the old name is still read)",
            FutureWarning,
            stacklevel=2,
        )
    return new


class PlacementEntry(StrictModel):
    """One ``{node_group, placement}`` pair; without node_group the implicit ``cluster`` group."""

    node_group: str | None = Field(None, description="a node group label, 'node', or omitted for the whole cluster")
    placement: str = Field(description="resource_ranks[:process_ranks], comma separated, e.g. 0-1:0-3,4-7")

    @field_validator("node_group", mode="before")
    @classmethod
    def _group(cls, value: Any) -> Any:
        return as_text(value)

    @field_validator("placement", mode="before")
    @classmethod
    def _placement(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        parse_placement(value)  # syntax and string-level rules, with a PlacementError naming the part
        return value.strip()

    @property
    def group_label(self) -> str:
        return "cluster" if self.node_group is None else self.node_group


class ComponentRule(StrictModel):
    """The placement of one ``component_placement`` key, in any of its three spellings:

    * short form ``learner,inference: 0-7`` (the whole cluster's resources),
    * node-group form ``learner: {node_group: a800, placement: 0-63}``,
    * several node groups: ``learner: [{node_group: a800, placement: 0-7}, {node_group: 4090, placement: 0-7}]``;
      process ranks are numbered across the list in order (implicit ranks continue after the
      previous entry), and explicit ranks are the component's global ranks.
    """

    entries: tuple[PlacementEntry, ...]
    style: Literal["short", "group", "list"] = "group"

    @model_validator(mode="before")
    @classmethod
    def _normalise(cls, data: Any) -> Any:
        if isinstance(data, (str, int)) and not isinstance(data, bool):
            try:
                entry = _entry({"placement": data}, "")
            except ConfigError as e:  # the short form has no 'placement' key to point at
                raise type(e)("", e.message) from None
            return {"entries": (entry,), "style": "short"}
        if isinstance(data, dict):
            return {"entries": (_entry(data, ""),), "style": "group"}
        if isinstance(data, (list, tuple)):
            if not data:
                raise ConfigError(
                    "", "the list of node-group entries is empty; give at least one {node_group, placement}"
                )
            return {"entries": tuple(_entry(d, f"[{i}]") for i, d in enumerate(data)), "style": "list"}
        raise ConfigError(
            "",
            f"a placement is a string ('0-7'), a map {{node_group, placement}} or a list of such maps; got {data!r}",
        )

    @model_serializer(mode="plain")
    def _user_form(self) -> Any:
        def one(e: PlacementEntry) -> dict:
            return (
                {"placement": e.placement}
                if e.node_group is None
                else {"node_group": e.node_group, "placement": e.placement}
            )

        if self.style == "short":
            return self.entries[0].placement
        if self.style == "group":
            return one(self.entries[0])
        return [one(e) for e in self.entries]

    def entry_path(self, key: str, index: int, field: str = "placement") -> str:
        """Dotted config path of one entry's field, for messages."""
        base = f"cluster.component_placement.{key}"
        if self.style == "short":
            return base
        if self.style == "group":
            return f"{base}.{field}"
        return f"{base}[{index}].{field}"


def _entry(data: Any, path: str) -> PlacementEntry:
    if not isinstance(data, dict):
        raise ConfigError(path, f"each entry must be a map {{node_group, placement}}, got {data!r}")
    try:
        return PlacementEntry.model_validate(data)
    except ValidationError as e:
        err = config_error(e, PlacementEntry, path)
        raise type(err)(err.path, err.message) from None
