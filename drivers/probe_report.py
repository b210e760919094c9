"""A device probe's report: one row per check, in the order they ran, each passed, failed or skipped.

Shared by the Franka probe (drivers.franka.probe) and the RealSense probe (drivers.realsense.probe_camera),
so that neither driver imports the other.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Check:
    name: str
    ok: bool | None  # None = skipped
    detail: str = ""
    hint: str = ""


@dataclass
class ProbeReport:
    """Checks on one device (``target``: a robot IP or a camera serial), in the order they ran."""

    target: str
    checks: list[Check] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.ok for c in self.checks)

    def add(self, name: str, ok: bool | None, detail: str = "", hint: str = "") -> Check:
        c = Check(name, ok, detail, hint)
        self.checks.append(c)
        return c

    def lines(self) -> list[str]:
        mark = {True: "ok  ", False: "FAIL", None: "skip"}
        out = []
        for c in self.checks:
            out.append(f"[{mark[c.ok]}] {self.target} {c.name}: {c.detail}" + (f"  -> {c.hint}" if c.hint else ""))
        return out
