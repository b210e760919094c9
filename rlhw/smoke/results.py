"""What a smoke test reports: one `CheckResult` per check, collected into a `SmokeReport`.

A check is *required* when a failure means the hardware is not fit for a run (the robot does not
answer, a camera is missing); optional checks (a slow simulated camera, a motion the operator did
not allow) are shown but never change the exit status. The exit status is 0 only when every
required check passed: a required check that was skipped because an earlier one failed leaves the
failure itself to carry the non-zero status.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

PASS = "PASS"
FAIL = "FAIL"
SKIP = "SKIP"
STATUSES = (PASS, FAIL, SKIP)


@dataclass
class CheckResult:
    """One row of the report.

    ``target`` names what was checked (``franka@172.16.0.2``, ``camera 322142001230``, ``node 3``,
    ``env-server robot 0``); ``value`` is the measured figure in the user's units; ``detail`` says
    why (for a FAIL: the reason); ``hint`` what to do about it.
    """

    node_rank: int
    target: str
    check: str
    status: str
    value: str = ""
    detail: str = ""
    hint: str = ""
    required: bool = True
    duration_s: float = 0.0
    measured: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self):
        if self.status not in STATUSES:
            raise ValueError(f"status must be one of {STATUSES}, got {self.status!r}")

    @property
    def blocking(self) -> bool:
        """True when this row alone makes the smoke test fail."""
        return self.required and self.status == FAIL

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CheckResult:
        return cls(**data)


@dataclass
class SmokeReport:
    """All rows of one smoke test, in the order they ran per target."""

    config: str
    results: list[CheckResult] = field(default_factory=list)
    started: float = field(default_factory=time.time)
    duration_s: float = 0.0
    mode: str = "local"
    notes: list[str] = field(default_factory=list)

    def extend(self, rows: Iterable[CheckResult]) -> None:
        self.results.extend(rows)

    @property
    def ok(self) -> bool:
        return not any(r.blocking for r in self.results)

    @property
    def exit_code(self) -> int:
        return 0 if self.ok else 1

    def failures(self) -> list[CheckResult]:
        return [r for r in self.results if r.status == FAIL]

    def counts(self) -> dict[str, int]:
        out = {s: 0 for s in STATUSES}
        for r in self.results:
            out[r.status] += 1
        return out

    def find(self, check: str, target: str | None = None) -> list[CheckResult]:
        """Rows of one check (optionally of one target): handy for scripts and tests."""
        return [r for r in self.results if r.check == check and (target is None or r.target == target)]

    def to_json(self) -> dict[str, Any]:
        return {
            "config": self.config,
            "ok": self.ok,
            "exit_code": self.exit_code,
            "mode": self.mode,
            "started": self.started,
            "duration_s": round(self.duration_s, 3),
            "counts": self.counts(),
            "notes": list(self.notes),
            "checks": [r.to_json() for r in self.results],
        }

    def write_json(self, path: str) -> None:
        with open(path, "w", encoding="utf-8") as f:
            json.dump(self.to_json(), f, indent=2, default=str)
            f.write("\n")
