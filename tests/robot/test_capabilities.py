"""Optional arm abilities are declared (`ArmCapability` in ``Arm.capabilities``), checked once, and asked with ``has``."""

from __future__ import annotations

import pytest

from drivers.franka import FrankaArm
from drivers.mock import MockArm
from rlhw.robot.arm import ArmCapability
from rlhw.robot.rehearsal import MeasuredArm


def test_a_driver_that_declares_an_ability_it_does_not_implement_fails_when_defined():
    with pytest.raises(TypeError, match="declares ArmCapability.PLACE_OBJECTS but does not implement park_object"):

        class HalfSim(MockArm):  # noqa: F841  (defining it is the test)
            capabilities = frozenset({ArmCapability.PLACE_OBJECTS})

            def set_object_pose(self, name, pose):
                pass


def test_the_simulator_declares_every_ability_and_the_real_and_mock_arms_none():
    from drivers.mujoco import MujocoArm

    assert MujocoArm.capabilities == frozenset(ArmCapability)
    assert FrankaArm.capabilities == MockArm.capabilities == frozenset()
    arm = MockArm()
    assert not any(arm.has(c) for c in ArmCapability)


def test_calling_an_undeclared_ability_says_to_ask_first():
    with pytest.raises(NotImplementedError, match=r"MockArm does not declare ArmCapability.TARGET_MARKER; ask arm.has"):
        MockArm().set_target_marker([0.4, 0.0, 0.1])


def test_a_rehearsal_keeps_the_scene_writes_and_hides_the_simulators_reads():
    from drivers.mujoco import MujocoArm

    measured = MeasuredArm(MujocoArm(cube=True))
    assert measured.has(ArmCapability.PLACE_OBJECTS) and measured.has(ArmCapability.TARGET_MARKER)
    assert not measured.has(ArmCapability.OBJECT_STATE) and not measured.has(ArmCapability.RESTORE_INITIAL_STATE)
    with pytest.raises(AttributeError, match="real cell does not measure"):
        measured.restore_initial_state()
