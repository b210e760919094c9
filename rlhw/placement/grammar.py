"""The placement string grammar, parsed once into small immutable records.

    placement := segment ("," segment)*
    segment   := resources [":" processes]
    resources := "all" | range
    processes := range                       (never "all")
    range     := INT | INT "-" INT           (inclusive, ascending)

Whitespace around tokens is ignored. ``format_placement`` writes the canonical spelling, so
``parse_placement(format_placement(spec)) == spec`` for every spec the parser accepts.

Rules that need only the string are checked here (syntax, ascending ranges, resource ranks
ascending and unique across segments, resource/process counts multiples of each other where both
are written). Rules that need the node group (ranges in bounds, ``all``) or the whole component
(process ranks continuous from 0) are checked by the planner.

The same range syntax (without ``:``) is used for node rank lists such as ``node_ranks: 0-3,8``;
see ``parse_ranks``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from rlhw.errors import PlacementError

# Ranks above this are certainly typos; refusing them early keeps a bad string from allocating
# millions of records before the range check against the node group could run.
MAX_RANK = 10_000_000

# A rank list (node ranks) longer than this is certainly a typo.
MAX_LIST = 1_000_000

_RANGE = re.compile(r"^\s*([0-9]+)\s*(?:-\s*([0-9]+)\s*)?$")


@dataclass(frozen=True)
class RankRange:
    """An inclusive, ascending range of ranks: ``RankRange(3, 5)`` is 3, 4, 5."""

    start: int
    end: int

    def __len__(self) -> int:
        return self.end - self.start + 1

    def __iter__(self) -> Iterator[int]:
        return iter(range(self.start, self.end + 1))

    def __str__(self) -> str:
        return str(self.start) if self.start == self.end else f"{self.start}-{self.end}"


@dataclass(frozen=True)
class Segment:
    """One ``resources[:processes]`` item. ``resources is None`` means ``all``;
    ``processes is None`` means implicit (the next block of process ranks)."""

    resources: RankRange | None
    processes: RankRange | None = None

    def __str__(self) -> str:
        text = "all" if self.resources is None else str(self.resources)
        return text if self.processes is None else f"{text}:{self.processes}"


@dataclass(frozen=True)
class PlacementSpec:
    segments: tuple[Segment, ...]

    def __str__(self) -> str:
        return format_placement(self)


def parse_range(text: str, *, what: str, whole: str) -> RankRange:
    """Parse ``a`` or ``a-b``. ``what`` names the thing for messages ("resource ranks")."""
    m = _RANGE.match(text)
    if not m:
        hint = ""
        if text.strip().startswith("-") or "--" in text:
            hint = " (ranks are never negative)"
        raise PlacementError(
            "",
            f"{what} {text.strip()!r} in {whole!r} is not a rank or an a-b range{hint}; write e.g. '3' or '0-7'",
        )
    start = int(m.group(1))
    end = int(m.group(2)) if m.group(2) is not None else start
    if end < start:
        raise PlacementError("", f"{what} range {start}-{end} in {whole!r} is descending; write {end}-{start}")
    if end > MAX_RANK:
        raise PlacementError("", f"{what} rank {end} in {whole!r} is larger than {MAX_RANK}; is it a typo?")
    return RankRange(start, end)


def parse_placement(text: str | int) -> PlacementSpec:
    """Parse a placement string; raise PlacementError (path "") naming the bad part."""
    if isinstance(text, bool) or not isinstance(text, (str, int)):
        raise PlacementError("", f"a placement must be a string such as '0-7' or '0-1:0-3,4', got {text!r}")
    whole = str(text)
    if not whole.strip():
        raise PlacementError("", "the placement is empty; write e.g. '0-7' or 'all'")
    segments: list[Segment] = []
    for raw in whole.split(","):
        if not raw.strip():
            raise PlacementError("", f"empty segment in {whole!r}: remove the extra comma")
        parts = raw.split(":")
        if len(parts) > 2:
            raise PlacementError(
                "", f"segment {raw.strip()!r} in {whole!r} has more than one ':'; write resources:processes"
            )
        res_text = parts[0]
        if not res_text.strip():
            raise PlacementError("", f"segment {raw.strip()!r} in {whole!r} has no resource ranks before ':'")
        resources = None if res_text.strip() == "all" else parse_range(res_text, what="resource ranks", whole=whole)
        processes = None
        if len(parts) == 2:
            proc_text = parts[1]
            if proc_text.strip() == "all":
                raise PlacementError(
                    "", f"process ranks cannot be 'all' (in {whole!r}); write an explicit range such as 0-7"
                )
            if not proc_text.strip():
                raise PlacementError("", f"segment {raw.strip()!r} in {whole!r} has no process ranks after ':'")
            processes = parse_range(proc_text, what="process ranks", whole=whole)
        segments.append(Segment(resources, processes))
    spec = PlacementSpec(tuple(segments))
    _check_resources_ascending(spec, whole)
    for seg in spec.segments:
        if seg.resources is not None and seg.processes is not None:
            check_multiple(len(seg.resources), len(seg.processes), str(seg))
    return spec


def _check_resources_ascending(spec: PlacementSpec, whole: str) -> None:
    if len(spec.segments) > 1 and any(s.resources is None for s in spec.segments):
        raise PlacementError(
            "", f"'all' already covers every resource; it cannot be combined with other segments in {whole!r}"
        )
    previous: RankRange | None = None
    for seg in spec.segments:
        r = seg.resources
        if previous is not None and r is not None and r.start <= previous.end:
            relation = "repeats" if r.start >= previous.start else "comes before"
            raise PlacementError(
                "",
                f"resource ranks must be ascending and unique: {r} {relation} {previous} in {whole!r}",
            )
        previous = r


def check_multiple(n_resources: int, n_processes: int, segment: str) -> None:
    """A segment's resources and processes must divide: processes share a resource, or a process
    owns several resources. Anything else would leave some resource with a different share."""
    if n_resources % n_processes and n_processes % n_resources:
        raise PlacementError(
            "",
            f"segment {segment!r} maps {n_processes} processes onto {n_resources} resources; one count must be "
            "a multiple of the other (e.g. 2 processes per resource, or 2 resources per process)",
        )


def format_placement(spec: PlacementSpec) -> str:
    return ",".join(str(s) for s in spec.segments)


def parse_ranks(value: object, *, what: str = "node ranks") -> tuple[int, ...]:
    """Parse a rank list given as an int, a string ``"0-3,8"`` or a list of ints/strings.

    Returns the ranks sorted; a rank listed twice is an error (it is almost always a typo)."""
    items: list[object]
    if isinstance(value, bool):
        raise PlacementError("", f"{what} must be ranks such as 0-7 or [0, 2], got {value!r}")
    if isinstance(value, (list, tuple)):
        items = list(value)
    elif isinstance(value, (int, str)):
        items = [value]
    else:
        raise PlacementError("", f"{what} must be ranks such as 0-7 or [0, 2], got {value!r}")
    if not items:
        raise PlacementError("", f"{what} is empty; list at least one rank, e.g. 0 or 0-3")
    ranks: list[int] = []
    for item in items:
        if isinstance(item, bool) or not isinstance(item, (int, str)):
            raise PlacementError("", f"{what} must be ranks such as 0-7 or [0, 2], got {item!r}")
        if isinstance(item, int):
            if item < 0:
                raise PlacementError("", f"{what} {item} is negative; ranks start at 0")
            ranks.append(item)
            continue
        for part in item.split(","):
            rng = parse_range(part, what=what, whole=str(value))
            if len(ranks) + len(rng) > MAX_LIST:
                raise PlacementError("", f"{what} {value!r} lists more than {MAX_LIST} ranks; is it a typo?")
            ranks.extend(rng)
    seen: set[int] = set()
    for r in ranks:
        if r in seen:
            raise PlacementError("", f"{what} list {value!r} names rank {r} twice")
        seen.add(r)
    return tuple(sorted(ranks))


def format_ranks(ranks: tuple[int, ...] | list[int]) -> str:
    """Compact spelling of a rank set: (0,1,2,3,8) -> '0-3,8'."""
    out: list[str] = []
    rs = sorted(ranks)
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    return ",".join(out)
