"""The report as a rich table (one row per check, grouped by node and target) plus hints."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from rlhw.smoke.results import FAIL, PASS, SKIP, SmokeReport

_STYLE = {PASS: "bold green", FAIL: "bold red", SKIP: "yellow"}


def render(report: SmokeReport, console: Console | None = None) -> None:
    if console is None:
        console = Console()
        if not console.is_terminal:  # a log or a pipe: wide enough that rows stay one line
            console = Console(width=max(console.width, 160))
    table = Table(title=f"rlhw smoke-test {report.config} ({report.mode})", show_lines=False, expand=False)
    table.add_column("node", justify="right", no_wrap=True)
    table.add_column("target", no_wrap=True)
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("value", min_width=14)
    table.add_column("detail", ratio=1)
    last = None
    for r, checks in _collapse(report.results):
        key = (r.node_rank, r.target)
        status = Text(r.status + ("" if r.required or r.status == PASS else " (optional)"), style=_STYLE[r.status])
        table.add_row(
            str(r.node_rank) if key != last else "", r.target if key != last else "", checks, status, r.value, r.detail
        )
        last = key
    console.print(table)
    hints: dict[str, list[str]] = {}
    for r in report.failures():
        if r.hint:
            hints.setdefault(r.hint, []).append(f"{r.target} {r.check}")
    if hints:
        console.print("[bold]Hints[/bold]")
        for hint, where in hints.items():
            console.print(f"  - {', '.join(where)}: {hint}")
    for note in report.notes:
        console.print(f"[dim]{note}[/dim]")
    c = report.counts()
    verdict = "[bold green]OK[/bold green]" if report.ok else "[bold red]NOT OK[/bold red]"
    required_failed = sum(1 for r in report.results if r.blocking)
    console.print(
        f"{verdict}: {c[PASS]} passed, {c[FAIL]} failed ({required_failed} required), {c[SKIP]} skipped "
        f"in {report.duration_s:.1f} s; exit status {report.exit_code}"
    )


def _collapse(results):
    """(row, check label) pairs; consecutive SKIPs of one target for the same reason become one
    row ("open .. dropped_frames (6)"), since they all say "skipped: <the failure above>"."""
    out = []
    i = 0
    while i < len(results):
        r = results[i]
        j = i + 1
        if r.status == SKIP and r.detail.startswith("skipped:"):
            while (
                j < len(results)
                and results[j].status == SKIP
                and results[j].target == r.target
                and results[j].detail == r.detail
            ):
                j += 1
        n = j - i
        label = r.check if n == 1 else f"{r.check} .. {results[j - 1].check} ({n})"
        out.append((r, label))
        i = j
    return out
