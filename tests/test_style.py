"""The tree passes ruff, the formatter and the linter configured in pyproject.toml ([tool.ruff])."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def ruff() -> str:
    """ruff from the same environment as this Python (a dev dependency), else from PATH."""
    here = Path(sys.executable).with_name("ruff")
    found = str(here) if here.exists() else shutil.which("ruff")
    if found is None:
        pytest.fail("ruff is not installed: it is a dev dependency; run `bash tools/dev.sh setup`")
    return found


def test_the_linter_finds_nothing():
    out = subprocess.run(
        [ruff(), "check", "--no-cache", "--output-format", "concise", "."],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, (
        f"ruff check found problems (`ruff check --fix .` fixes some):\n{out.stdout}{out.stderr}"
    )


def test_every_file_is_formatted():
    out = subprocess.run(
        [ruff(), "format", "--no-cache", "--check", "."], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, f"files ruff would reformat (run `ruff format .`):\n{out.stdout}{out.stderr}"
