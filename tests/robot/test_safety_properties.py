"""Property tests of the command limits: for ANY finite target, the step is bounded and stays in the box."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlhw.config.env import SafetyConfig
from rlhw.errors import SafetyViolation
from rlhw.robot.safety import SafetyLayer


class _NoArm:
    name = "none"
    max_gripper_width = 0.08


LAYER = SafetyLayer(_NoArm(), SafetyConfig(), control_period_s=0.1)
LOW, HIGH = LAYER.low, LAYER.high
coord = st.floats(min_value=-10, max_value=10, allow_nan=False, allow_infinity=False)
xyz = st.tuples(coord, coord, coord).map(np.array)
inside = st.tuples(*[st.floats(min_value=float(lo), max_value=float(hi)) for lo, hi in zip(LOW, HIGH)]).map(np.array)


@settings(max_examples=300, deadline=None)
@given(target=xyz, current=inside)
def test_from_inside_the_box_every_target_is_in_the_box_and_one_bounded_step_away(target, current):
    report = LAYER.clip_target(target, current)
    assert np.all(report.target >= LOW - 1e-12) and np.all(report.target <= HIGH + 1e-12)
    assert np.linalg.norm(report.target - current) <= LAYER.max_step + 1e-9


@settings(max_examples=300, deadline=None)
@given(target=xyz, current=xyz)
def test_from_anywhere_the_step_is_bounded_and_never_moves_away_from_the_box(target, current):
    report = LAYER.clip_target(target, current)
    assert np.linalg.norm(report.target - current) <= LAYER.max_step + 1e-9

    def gap(p):
        return np.linalg.norm(p - np.clip(p, LOW, HIGH))

    assert gap(report.target) <= gap(current) + 1e-9


@settings(max_examples=100, deadline=None)
@given(target=xyz, current=inside)
def test_a_reachable_target_inside_the_box_is_sent_unchanged(target, current):
    boxed = np.clip(target, LOW, HIGH)
    if np.linalg.norm(boxed - current) <= LAYER.max_step:
        assert np.allclose(LAYER.clip_target(boxed, current).target, boxed)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_any_non_finite_coordinate_is_refused(bad):
    for axis in range(3):
        target = np.array([0.4, 0.0, 0.3])
        target[axis] = bad
        with pytest.raises(SafetyViolation):
            LAYER.clip_target(target, np.array([0.4, 0.0, 0.3]))
