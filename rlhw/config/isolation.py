"""Robot-loop isolation settings of a node (``cluster.node_groups[i].env_configs[j]``).

On a one-workstation layout the learner trains on the same CPUs as the robot loop, so the loop's
deadlines are only kept if the loop gets CPUs of its own, a scheduling priority above the learner's, and
the learner a bounded number of threads. These are node facts (how many CPUs, what the OS allows), hence
per node group next to the node's env vars; they are applied by `rlhw.runtime.isolation`.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from rlhw.config.base import StrictModel
from rlhw.errors import ConfigError, PlacementError
from rlhw.placement.grammar import parse_ranks

#: SCHED_FIFO priorities Linux accepts (sched_get_priority_min/max of SCHED_FIFO).
REALTIME_RANGE = (1, 99)
NICE_RANGE = (-20, 19)


class LoopPriority(StrictModel):
    """``{realtime: 80}`` (SCHED_FIFO at that priority) or ``{nice: -5}`` (normal scheduling, that nice)."""

    realtime: int | None = Field(None, description="SCHED_FIFO priority 1-99 (CAP_SYS_NICE or rtprio limit)")
    nice: int | None = Field(None, description="nice value -20..19 (below 0 needs CAP_SYS_NICE)")

    @model_validator(mode="after")
    def _one_of(self) -> LoopPriority:
        if (self.realtime is None) == (self.nice is None):
            raise ConfigError("", "give exactly one of realtime (e.g. {realtime: 80}) or nice (e.g. {nice: -5})")
        for key, value, (lo, hi) in (("realtime", self.realtime, REALTIME_RANGE), ("nice", self.nice, NICE_RANGE)):
            if value is not None and not lo <= value <= hi:
                raise ConfigError(key, f"{value} is out of range; use {lo}..{hi}")
        return self


class LoopIsolation(StrictModel):
    """The three isolation keys of one env_configs entry (all optional: unset means leave the OS default)."""

    loop_cpus: tuple[int, ...] | None = Field(None, description='CPUs of the robot loop, e.g. "2-3" or [2, 3]')
    loop_priority: LoopPriority | None = Field(None, description="{realtime: 80} or {nice: -5}")
    learner_threads: int | None = Field(
        None, ge=1, description="torch threads of the learner (learner worker, or the local runner)"
    )

    @field_validator("loop_cpus", mode="before")
    @classmethod
    def _cpus(cls, value: Any) -> Any:
        if value is None:
            return None
        try:
            return parse_ranks(value, what="loop_cpus")
        except PlacementError as e:
            raise ConfigError("", e.message.replace("ranks", "CPUs").replace("rank", "CPU")) from None

    def is_empty(self) -> bool:
        return self.loop_cpus is None and self.loop_priority is None and self.learner_threads is None


def merge_isolation(entries: list[tuple[str, LoopIsolation]]) -> LoopIsolation:
    """One node's settings from every env_configs entry it is in (``(where, entry)`` pairs); a key that two
    groups both give must agree, as env vars do."""
    out: dict[str, Any] = {}
    given: dict[str, str] = {}
    for where, entry in entries:
        for key in ("loop_cpus", "loop_priority", "learner_threads"):
            value = getattr(entry, key)
            if value is None:
                continue
            if key in out and out[key] != value:
                raise ConfigError(
                    f"{where}.{key}",
                    f"this node already gets {key} {out[key]} from {given[key]}; a node has one value, keep one",
                )
            out[key], given[key] = value, where
    return LoopIsolation(**out)
