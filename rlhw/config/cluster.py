"""The ``cluster`` section: what machines there are and where each component runs.

Node groups may overlap: a node can belong to several groups (a workstation with a GPU and a
Franka is in a GPU group and a robot group). What must not overlap is one group's ``env_configs``,
and the same hardware type declared by two groups for one node (the same robot would get two
hardware ranks). Per-node settings that overlapping groups both give (an env var, the interpreter,
``accelerators_per_node``) must agree.

Every rule raises rlhw.errors.ConfigError with a path relative to the model being validated; the
loader prefixes the location, so users see ``cluster.node_groups[2].env_configs[0].node_ranks: ...``.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any

from pydantic import Field, ValidationError, field_validator, model_validator

from rlhw.config.base import StrictModel, as_text
from rlhw.config.component_placement import ComponentRule, PlacementEntry, canonical_component, component_names  # noqa: F401 - PlacementEntry re-exported
from rlhw.config.errors import config_error
from rlhw.config.isolation import LoopIsolation, merge_isolation
from rlhw.errors import ConfigError, PlacementError
from rlhw.hardware.registry import HardwareType, get_hardware_type
from rlhw.placement.grammar import format_ranks, parse_ranks

#: Labels the planner gives a meaning of its own: ``node`` (every node, ranks are node ranks) and
#: ``cluster`` (what a component without ``node_group`` is placed on).
RESERVED_LABELS = ("cluster", "node")

_LABEL = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")
_COMPONENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _ranks(value: Any, what: str = "node ranks") -> tuple[int, ...]:
    if isinstance(value, tuple) and all(isinstance(v, int) for v in value):
        return value
    return parse_ranks(value, what=what)


class NodeGroupEnvConfig(LoopIsolation):
    """The software environment of some nodes of a group, and how their robot loop is isolated from the
    learner (``loop_cpus``, ``loop_priority``, ``learner_threads``: see rlhw.config.isolation)."""

    node_ranks: tuple[int, ...] = Field(description="subset of the group's node_ranks")
    env_vars: tuple[dict[str, str], ...] = Field((), description="list of one-key maps: - NAME: value")
    python_interpreter_path: str | None = Field(None, description="absolute path of the Python to run workers with")

    @field_validator("node_ranks", mode="before")
    @classmethod
    def _parse_node_ranks(cls, value: Any) -> Any:
        return _ranks(value)

    @field_validator("env_vars", mode="before")
    @classmethod
    def _env_vars(cls, value: Any) -> Any:
        if isinstance(value, dict):
            raise ConfigError("", "env_vars is a list of one-key maps; write '- NAME: value' for each variable")
        if not isinstance(value, (list, tuple)):
            return value
        out: list[dict[str, str]] = []
        seen: dict[str, int] = {}
        for j, item in enumerate(value):
            if not isinstance(item, dict) or len(item) != 1:
                got = f"{len(item)} keys" if isinstance(item, dict) else repr(item)
                raise ConfigError(f"[{j}]", f"each env_vars entry must have exactly one key (NAME: value), got {got}")
            ((key, val),) = item.items()
            if not isinstance(key, str) or not _ENV_NAME.match(key):
                raise ConfigError(f"[{j}]", f"{key!r} is not a valid environment variable name")
            if key in seen:
                raise ConfigError(f"[{j}]", f"env var {key} is already set by entry [{seen[key]}]; keep one")
            if isinstance(val, bool) or val is None or not isinstance(val, (str, int, float)):
                raise ConfigError(f"[{j}].{key}", f'value {val!r} is not text; quote it, e.g. {key}: "{val}"')
            seen[key] = j
            out.append({key: str(val)})
        return tuple(out)

    @field_validator("python_interpreter_path")
    @classmethod
    def _interpreter(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith("/"):
            raise ConfigError("", f"{value!r} is not an absolute path; write e.g. /opt/venv/bin/python3")
        return value


class HardwareSection(StrictModel):
    """``hardware: {type: Franka, configs: [...]}``: the devices that give the group its ranks."""

    type: str
    configs: tuple[Any, ...]

    @model_validator(mode="before")
    @classmethod
    def _typed_entries(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            raise ConfigError("", f"hardware must be a map with 'type' and 'configs', got {data!r}")
        extra = sorted(set(data) - {"type", "configs"})
        if extra:
            close = difflib.get_close_matches(str(extra[0]), ["type", "configs"], n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?" if close else "hardware has only 'type' and 'configs'"
            raise ConfigError(str(extra[0]), f"unknown key {extra[0]!r}; {hint}")
        if "type" not in data:
            raise ConfigError("type", "required key is missing; name the hardware type, e.g. type: Franka")
        try:
            hw = get_hardware_type(data["type"])
        except ConfigError as e:
            raise ConfigError("type", e.message) from None
        entries = data.get("configs")
        if not isinstance(entries, (list, tuple)) or not entries:
            raise ConfigError("configs", f"list at least one {hw.name} entry (one per device), each with its node_rank")
        built = []
        for k, entry in enumerate(entries):
            if isinstance(entry, hw.entry_model):
                built.append(entry)
                continue
            try:
                built.append(hw.entry_model.model_validate(entry))
            except ValidationError as e:
                err = config_error(e, hw.entry_model, f"configs[{k}]")
                raise ConfigError(err.path, err.message) from None
        return {"type": hw.name, "configs": tuple(built)}

    @property
    def hardware_type(self) -> type[HardwareType]:
        return get_hardware_type(self.type)


class NodeGroup(StrictModel):
    label: str = Field(description="unique, case-sensitive name used by component_placement")
    node_ranks: tuple[int, ...] = Field(description="global node ranks in this group, e.g. 0-7 or [0, 3]")
    accelerators_per_node: int | None = Field(
        None, ge=0, description="GPUs on each node; used in a dry run, checked against detection on a live cluster"
    )
    env_configs: tuple[NodeGroupEnvConfig, ...] = ()
    hardware: HardwareSection | None = None

    @field_validator("node_ranks", mode="before")
    @classmethod
    def _parse_node_ranks(cls, value: Any) -> Any:
        return _ranks(value)

    @field_validator("label", mode="before")
    @classmethod
    def _label(cls, value: Any) -> Any:
        value = as_text(value)
        if not isinstance(value, str):
            return value
        if value in RESERVED_LABELS:
            raise ConfigError(
                "",
                f"the label {value!r} is reserved ('node' means every node, 'cluster' the whole cluster); choose another",
            )
        if not _LABEL.match(value):
            raise ConfigError(
                "", f"label {value!r} must be letters, digits, '_', '-' or '.' (no spaces, commas or colons)"
            )
        return value

    @model_validator(mode="after")
    def _subsets(self) -> NodeGroup:
        mine = set(self.node_ranks)
        owner: dict[int, int] = {}
        for i, env in enumerate(self.env_configs):
            outside = [r for r in env.node_ranks if r not in mine]
            if outside:
                raise ConfigError(
                    f"env_configs[{i}].node_ranks",
                    f"{format_ranks(outside)} is not inside the group's node_ranks {format_ranks(self.node_ranks)}",
                )
            for r in env.node_ranks:
                if r in owner:
                    raise ConfigError(
                        f"env_configs[{i}].node_ranks",
                        f"node {r} is already configured by env_configs[{owner[r]}]; env_configs of a group must not overlap",
                    )
                owner[r] = i
        if self.hardware is not None:
            for k, entry in enumerate(self.hardware.configs):
                if entry.node_rank not in mine:
                    raise ConfigError(
                        f"hardware.configs[{k}].node_rank",
                        f"node {entry.node_rank} is not in the group's node_ranks {format_ranks(self.node_ranks)}; "
                        "add it to node_ranks or fix node_rank",
                    )
        return self

    def node_env(self, node_rank: int) -> NodeGroupEnvConfig | None:
        for env in self.env_configs:
            if node_rank in env.node_ranks:
                return env
        return None


@dataclass(frozen=True)
class NodeEnv:
    """What a worker on one node gets: env vars from every group the node is in, and its interpreter."""

    env_vars: dict[str, str] = field(default_factory=dict)
    python_interpreter_path: str | None = None
    isolation: LoopIsolation = field(default_factory=LoopIsolation)


class ClusterConfig(StrictModel):
    num_nodes: int = Field(ge=1, description="number of nodes; node ranks are 0..num_nodes-1")
    node_groups: tuple[NodeGroup, ...] = ()
    component_placement: dict[str, ComponentRule] = Field(default_factory=dict)

    @field_validator("component_placement", mode="before")
    @classmethod
    def _component_names(cls, value: Any) -> Any:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise ConfigError("", f"component_placement is a map of component name -> placement, got {value!r}")
        seen: dict[str, str] = {}
        out = {}
        for key, rule in value.items():
            key_text = as_text(key)
            if not isinstance(key_text, str):
                raise ConfigError(str(key), "component names are text")
            written = component_names(key_text)
            for name in written:
                if not _COMPONENT.match(name):
                    raise ConfigError(
                        key_text,
                        f"{name!r} is not a component name; use letters, digits, '_' or '-', and commas between names",
                    )
            names = [canonical_component(name) for name in written]
            for name, as_written in zip(names, written):
                if name in seen:
                    alias = "" if name == as_written else f" (written {as_written!r}, its old name)"
                    raise ConfigError(
                        key_text, f"component {name!r}{alias} is already placed by key {seen[name]!r}; place it once"
                    )
                seen[name] = key_text
            out[",".join(names)] = rule
        return out

    @model_validator(mode="after")
    def _cross_group_rules(self) -> ClusterConfig:
        labels: dict[str, int] = {}
        for i, g in enumerate(self.node_groups):
            if g.label in labels:
                raise ConfigError(
                    f"node_groups[{i}].label",
                    f"label {g.label!r} is already used by node_groups[{labels[g.label]}]; labels must be unique (case-sensitive)",
                )
            labels[g.label] = i
            outside = [r for r in g.node_ranks if r >= self.num_nodes]
            if outside:
                raise ConfigError(
                    f"node_groups[{i}].node_ranks",
                    f"{format_ranks(outside)} is outside the cluster's node ranks 0-{self.num_nodes - 1} "
                    f"(num_nodes: {self.num_nodes}); raise num_nodes or fix node_ranks",
                )
        self._check_per_node_agreement()
        for r in range(self.num_nodes):
            self.node_env(r)  # isolation settings two groups give one node must agree (raises where not)
        self._check_hardware_unique()
        self._check_component_groups(labels)
        return self

    def _check_per_node_agreement(self) -> None:
        accel: dict[int, tuple[int, int]] = {}
        env: dict[tuple[int, str], tuple[str, str]] = {}
        python: dict[int, tuple[str, str]] = {}
        for i, g in enumerate(self.node_groups):
            if g.accelerators_per_node is not None:
                for r in g.node_ranks:
                    if r in accel and accel[r][0] != g.accelerators_per_node:
                        raise ConfigError(
                            f"node_groups[{i}].accelerators_per_node",
                            f"node {r} is also in node_groups[{accel[r][1]}] with accelerators_per_node: "
                            f"{accel[r][0]}; a node has one GPU count",
                        )
                    accel[r] = (g.accelerators_per_node, i)
            for j, ec in enumerate(g.env_configs):
                where = f"node_groups[{i}].env_configs[{j}]"
                for k, item in enumerate(ec.env_vars):
                    ((key, val),) = item.items()
                    for r in ec.node_ranks:
                        prev = env.get((r, key))
                        if prev is not None and prev[0] != val:
                            raise ConfigError(
                                f"{where}.env_vars[{k}]",
                                f"env var {key} for node {r} is already {prev[0]!r} in {prev[1]}; a node gets one value",
                            )
                        env[(r, key)] = (val, where)
                if ec.python_interpreter_path is not None:
                    for r in ec.node_ranks:
                        prev_py = python.get(r)
                        if prev_py is not None and prev_py[0] != ec.python_interpreter_path:
                            raise ConfigError(
                                f"{where}.python_interpreter_path",
                                f"node {r} already uses {prev_py[0]} ({prev_py[1]}); a node has one interpreter",
                            )
                        python[r] = (ec.python_interpreter_path, where)

    def _check_hardware_unique(self) -> None:
        per_node: dict[tuple[str, int], int] = {}
        identity: dict[tuple[str, str], str] = {}
        cameras: dict[str, str] = {}
        arm_nodes: dict[str, tuple[int, str]] = {}
        for i, g in enumerate(self.node_groups):
            if g.hardware is None:
                continue
            hw = g.hardware.hardware_type
            for k, e in enumerate(g.hardware.configs):
                where = f"node_groups[{i}].hardware.configs[{k}]"
                other = per_node.get((hw.name, e.node_rank))
                if other is not None and other != i:
                    raise ConfigError(
                        f"{where}.node_rank",
                        f"node {e.node_rank} already has {hw.name} hardware declared by group "
                        f"{self.node_groups[other].label!r}; declare all {hw.name} devices of a node in one group",
                    )
                per_node[(hw.name, e.node_rank)] = i
                ident = e.identity()
                if (hw.name, ident) in identity:
                    raise ConfigError(
                        f"{where}.{e.identity_field}",
                        f"{hw.name} {ident} is already declared at {identity[(hw.name, ident)]}; each device once",
                    )
                identity[(hw.name, ident)] = f"cluster.{where}"
                for s, serial in enumerate(getattr(e, "camera_serials", ())):
                    if serial in cameras:
                        raise ConfigError(
                            f"{where}.camera_serials[{s}]",
                            f"camera {serial} is already attached to {cameras[serial]}; a camera observes one arm",
                        )
                    cameras[serial] = f"cluster.{where}"
                    arm_nodes[serial] = (e.node_rank, f"{where}.camera_serials[{s}]")
        # A camera listed by an arm and declared as a RealSense device must be on the arm's node.
        for i, g in enumerate(self.node_groups):
            if g.hardware is None or g.hardware.type != "RealSense":
                continue
            for k, cam in enumerate(g.hardware.configs):
                arm = arm_nodes.get(cam.serial)
                if arm is not None and arm[0] != cam.node_rank:
                    raise ConfigError(
                        f"node_groups[{i}].hardware.configs[{k}].node_rank",
                        f"camera {cam.serial} is on node {cam.node_rank} here but its arm ({arm[1]}) is on node "
                        f"{arm[0]}; a camera is read on the node that drives its arm",
                    )

    def _check_component_groups(self, labels: dict[str, int]) -> None:
        known = list(labels) + ["node"]
        for key, rule in self.component_placement.items():
            for i, entry in enumerate(rule.entries):
                if entry.node_group is None or entry.node_group in labels or entry.node_group == "node":
                    continue
                path = rule.entry_path(key, i, "node_group")[len("cluster.") :]
                if entry.node_group == "cluster":
                    raise ConfigError(path, "'cluster' is implied when node_group is omitted; remove node_group")
                raise ConfigError(path, unknown_group_message(entry.node_group, known))

    # ----------------------------------------------------------------- queries

    def group(self, label: str) -> NodeGroup:
        """The node group with this label (PlacementError with a suggestion if there is none)."""
        for g in self.node_groups:
            if g.label == label:
                return g
        raise PlacementError("", unknown_group_message(label, [g.label for g in self.node_groups] + ["node"]))

    def components(self) -> dict[str, tuple[str, ComponentRule]]:
        """Component name -> (its component_placement key, its rule); shared keys are split."""
        out: dict[str, tuple[str, ComponentRule]] = {}
        for key, rule in self.component_placement.items():
            for name in component_names(key):
                out[name] = (key, rule)
        return out

    def declared_accelerators(self) -> dict[int, int]:
        """Node rank -> accelerators_per_node, for nodes in a group that states it."""
        out: dict[int, int] = {}
        for g in self.node_groups:
            if g.accelerators_per_node is not None:
                for r in g.node_ranks:
                    out[r] = g.accelerators_per_node
        return out

    def node_env(self, node_rank: int) -> NodeEnv:
        """Env vars, interpreter and robot-loop isolation for one node, merged over every group the node belongs to."""
        env: dict[str, str] = {}
        python: str | None = None
        isolation: list[tuple[str, LoopIsolation]] = []
        for i, g in enumerate(self.node_groups):
            if node_rank not in g.node_ranks:
                continue
            ec = g.node_env(node_rank)
            if ec is None:
                continue
            for item in ec.env_vars:
                env.update(item)
            python = ec.python_interpreter_path or python
            isolation.append((f"node_groups[{i}].env_configs[{g.env_configs.index(ec)}]", ec))
        return NodeEnv(env, python, merge_isolation(isolation))

    def hardware_on_node(self, node_rank: int) -> list[tuple[str, str, int, Any]]:
        """(type name, group label, hardware rank in the group, entry) for each device on the node."""
        out = []
        for g in self.node_groups:
            if g.hardware is None:
                continue
            for rank, e in enumerate(g.hardware.configs):
                if e.node_rank == node_rank:
                    out.append((g.hardware.type, g.label, rank, e))
        return out


def unknown_group_message(label: str, known: list[str]) -> str:
    close = difflib.get_close_matches(label, known, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"unknown node group {label!r}{hint} (known: {', '.join(known)})"
