"""Placement: the grammar of placement strings and the planner that maps components onto nodes."""

from __future__ import annotations

from rlhw.placement.grammar import (
    PlacementSpec,
    RankRange,
    Segment,
    format_placement,
    format_ranks,
    parse_placement,
    parse_ranks,
)
from rlhw.placement.planner import PlacementPlan, plan
from rlhw.placement.records import Placement

__all__ = [
    "Placement",
    "PlacementPlan",
    "PlacementSpec",
    "RankRange",
    "Segment",
    "format_placement",
    "format_ranks",
    "parse_placement",
    "parse_ranks",
    "plan",
]
