"""Hardware smoke test: per node, robot, camera and env server, what works and what does not.

``run_smoke_test(config, SmokeOptions(...)) -> SmokeReport`` checks everything the config declares
(filtered by node group / robot), each check bounded by a timeout, each on the node that owns the
hardware; it moves no arm unless ``SmokeOptions(motion="allowed")``. The CLI is `rlhw smoke-test`.
"""

from __future__ import annotations

from rlhw.smoke.options import CHECK_GROUPS, SmokeOptions
from rlhw.smoke.results import FAIL, PASS, SKIP, CheckResult, SmokeReport
from rlhw.smoke.runner import run_node, run_smoke_test
from rlhw.smoke.targets import select_targets

__all__ = [
    "CHECK_GROUPS",
    "FAIL",
    "PASS",
    "SKIP",
    "CheckResult",
    "SmokeOptions",
    "SmokeReport",
    "run_node",
    "run_smoke_test",
    "select_targets",
]
