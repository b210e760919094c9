"""A worker's name (WorkerAddress), its Ray actor name and its actors' concurrency groups.

Kept apart from ``worker.py`` so that ``group.py`` (which launches workers) and ``worker.py`` (whose
``create_group`` returns a group) both import it, and neither imports the other back.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Concurrency groups of every worker actor: user methods run one at a time in the default group;
#: deliveries have their own threads, so that a sender waiting on one full mailbox does not hold up
#: messages from other senders (one sender's messages keep their order because ``send`` returns only
#: once its message is in the mailbox); control calls (ping, info) have their own threads so they
#: answer even while user code is busy.
CONCURRENCY_GROUPS = {"rlhw_mailbox": 16, "rlhw_control": 2}
_ACTOR_PREFIX = "rlhw.worker:"


def actor_name(address: WorkerAddress | str) -> str:
    return _ACTOR_PREFIX + str(address)


@dataclass(frozen=True)
class WorkerAddress:
    """Hierarchical worker name ``group:rank[:rank...]``: ``learner:3`` is rank 3 of group ``learner``;
    ``learner:3:0`` is rank 0 of a group that worker 3 started."""

    group: str
    ranks: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if not self.group or ":" in self.group:
            raise ValueError(f"worker group name must be non-empty and contain no ':', got {self.group!r}")
        if any((not isinstance(r, int)) or r < 0 for r in self.ranks):
            raise ValueError(f"worker ranks must be ints >= 0, got {self.ranks!r}")

    @classmethod
    def parse(cls, text: str) -> WorkerAddress:
        parts = str(text).split(":")
        try:
            ranks = tuple(int(p) for p in parts[1:])
        except ValueError:
            raise ValueError(
                f"{text!r} is not a worker address; expected group:rank[:rank...], e.g. learner:0"
            ) from None
        return cls(parts[0], ranks)

    def __str__(self) -> str:
        return ":".join([self.group, *map(str, self.ranks)])

    @property
    def rank(self) -> int | None:
        """This worker's rank in its own group (the last rank), None for a bare group address."""
        return self.ranks[-1] if self.ranks else None

    @property
    def parent(self) -> WorkerAddress | None:
        return WorkerAddress(self.group, self.ranks[:-1]) if self.ranks else None

    def child(self, rank: int) -> WorkerAddress:
        return WorkerAddress(self.group, (*self.ranks, rank))
