"""Every relative link in README.md and docs/ leads somewhere: the file exists and, where the link names a
heading (``guide.md#anchor``), that file has the heading. Guides were split and moved (issue 39); a link left
pointing at the old place would send a reader nowhere, and nothing else would notice.

Anchors are GitHub's: the heading's text lowercased, every character that is not a letter, digit, '_', '-' or
space dropped, spaces turned into '-', and a repeated heading numbered ``-1``, ``-2``, ... Headings inside
fenced code blocks are not headings.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
#: A guide a user reads stays short enough to read; the measurement log is not a guide.
GUIDE_LINES = 500
NOT_GUIDES = {"history.md", "benchmarks.md"}

_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def _outside_code(text: str) -> list[str]:
    """The lines of a markdown file that are not inside a fenced code block."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def github_anchor(heading: str) -> str:
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    found = set()
    for line in _outside_code(path.read_text()):
        match = _HEADING.match(line)
        if not match:
            continue
        base = github_anchor(match.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        found.add(base if n == 0 else f"{base}-{n}")
    return found


def links(path: Path) -> list[str]:
    out = []
    for line in _outside_code(path.read_text()):
        for target in _LINK.findall(line):
            if not re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto: ... are not checked here
                out.append(target)
    return out


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    broken = []
    for target in links(path):
        name, _, anchor = target.partition("#")
        dest = path if not name else (path.parent / name).resolve()
        if not dest.exists():
            broken.append(f"{target}: no file {dest.relative_to(root) if dest.is_relative_to(root) else dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: {dest.name} has no heading with the anchor #{anchor}")
    return broken


def test_github_anchors_drop_punctuation_and_keep_underscores():
    assert (
        github_anchor("Safety faults that teach (`train.fault_signal`)") == "safety-faults-that-teach-trainfault_signal"
    )
    assert github_anchor("`train:` keys (rlhw/config/train.py)") == "train-keys-rlhwconfigtrainpy"


def test_a_link_to_a_missing_heading_is_reported(tmp_path):
    (tmp_path / "a.md").write_text("# Title\n\n```\n# not a heading\n```\n[ok](#title) [bad](#not-a-heading)\n")
    (tmp_path / "b.md").write_text("[file](a.md) [gone](c.md) [there](a.md#title) [no](a.md#nope)\n")
    assert broken_links(tmp_path / "a.md", tmp_path) == [
        "#not-a-heading: a.md has no heading with the anchor #not-a-heading"
    ]
    assert broken_links(tmp_path / "b.md", tmp_path) == [
        "c.md: no file c.md",
        "a.md#nope: a.md has no heading with the anchor #nope",
    ]


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_relative_link_leads_to_a_file_and_heading(path):
    assert broken_links(path) == []


@pytest.mark.parametrize(
    "path", [p for p in DOCS if p.parent.name == "docs" and p.name not in NOT_GUIDES], ids=lambda p: p.name
)
def test_a_guide_stays_short_enough_to_read(path):
    lines = len(path.read_text().splitlines())
    assert lines <= GUIDE_LINES * 1.05, f"{path.name} has {lines} lines: split it along its topics (issue 39)"
