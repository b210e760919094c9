"""Helpers for the smoke-test tests: run the smoke test in this process on a real config file.

Runs are kept short (``window_s`` well under a second, a few seconds of timeout) so the whole
folder stays within its budget; what is measured is still measured on the real drivers.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from rlhw.config import load_config
from rlhw.smoke import SmokeOptions, SmokeReport, run_smoke_test

ROOT = Path(__file__).resolve().parents[2]
SIM_CONFIG = str(ROOT / "configs" / "sim_reach.yaml")
FRANKY_CONFIG = str(ROOT / "configs" / "franky_sim.yaml")


def smoke(config_path: str, overrides=(), **options) -> SmokeReport:
    """run_smoke_test on ``config_path`` + ``overrides`` with short windows unless given."""
    options.setdefault("window_s", 0.5)
    options.setdefault("timeout_s", 5.0)
    opts = SmokeOptions(config_path=config_path, overrides=tuple(overrides), **options)
    return run_smoke_test(load_config(config_path, list(overrides)), opts, config_name=config_path)


def rows(report: SmokeReport, target_prefix: str = "") -> dict[str, object]:
    """check name -> row for the first target whose name starts with ``target_prefix``."""
    out = {}
    for r in report.results:
        if r.target.startswith(target_prefix):
            out.setdefault(r.check, r)
    return out


def robot_ip_override(host: str) -> str:
    return f"cluster.node_groups[0].hardware.configs[0].robot_ip={host}"


@pytest.fixture
def mock_arms(monkeypatch):
    """Every MockArm the smoke test builds, so a test can inspect what it was commanded."""
    from drivers.mock import MockArm

    built: list[MockArm] = []
    original = MockArm.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        built.append(self)

    monkeypatch.setattr(MockArm, "__init__", init)
    return built
