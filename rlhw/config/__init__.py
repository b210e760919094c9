"""Typed configuration: YAML + overrides validated once into frozen pydantic models."""

from __future__ import annotations

from rlhw.config.base import StrictModel
from rlhw.config.cluster import ClusterConfig, ComponentRule, NodeGroup, NodeGroupEnvConfig, PlacementEntry
from rlhw.config.loader import load_config, load_config_dict, parse_override, validate_config
from rlhw.config.root import Config

__all__ = [
    "ClusterConfig",
    "ComponentRule",
    "Config",
    "NodeGroup",
    "NodeGroupEnvConfig",
    "PlacementEntry",
    "StrictModel",
    "load_config",
    "load_config_dict",
    "parse_override",
    "validate_config",
]
