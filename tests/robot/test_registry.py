"""Driver and task registries: names resolve lazily, unknown names get a ConfigError listing the known ones."""

from __future__ import annotations

import pytest

from rlhw.config.env import EnvConfig
from rlhw.errors import ConfigError
from rlhw.robot import registry
from rlhw.robot.task_registry import known_tasks, make_task, task_class


def test_mock_arm_and_camera_resolve_by_name():
    arm = registry.make_arm("mock", name="a", seed=3)
    cam = registry.make_camera("mock", serial="front", arm=arm, width=32, height=24)
    assert type(arm).__name__ == "MockArm" and arm.name == "a"
    assert type(cam).__name__ == "MockCamera" and cam.serial == "front"


def test_unknown_arm_driver_lists_the_known_names():
    with pytest.raises(ConfigError) as err:
        registry.make_arm("ur5")
    assert err.value.path == "env.driver"
    for name in ("franka", "mujoco", "mock"):
        assert name in str(err.value)


def test_unknown_camera_driver_names_the_camera_field():
    with pytest.raises(ConfigError) as err:
        registry.make_camera("zed")
    assert err.value.path == "env.camera_driver" and "realsense" in str(err.value)


def test_a_known_module_that_registers_nothing_for_the_kind_is_a_clear_error():
    # drivers.mock registers no arm called "realsense"-style cameras as arms: asking the camera table
    # for an arm-only name fails with the list of camera drivers.
    registry.DRIVER_MODULES["ghost"] = ("drivers.mock",)
    try:
        with pytest.raises(ConfigError) as err:
            registry.make_arm("ghost")
        assert "no arm driver named 'ghost'" in str(err.value)
    finally:
        del registry.DRIVER_MODULES["ghost"]


def test_a_driver_whose_module_is_missing_says_so():
    registry.DRIVER_MODULES["phantom"] = ("drivers.does_not_exist",)
    try:
        with pytest.raises(ConfigError) as err:
            registry.make_arm("phantom")
        assert "drivers.does_not_exist not found" in str(err.value)
    finally:
        del registry.DRIVER_MODULES["phantom"]


def test_registering_two_classes_under_one_name_is_refused():
    @registry.register_arm("twice-test")
    class A:  # noqa: D401 - a stand-in class
        pass

    with pytest.raises(ValueError, match="registered twice"):

        @registry.register_arm("twice-test")
        class B:
            pass


def test_tasks_resolve_by_name_and_unknown_task_lists_known():
    assert task_class("reach").name == "reach"
    assert "reach" in known_tasks() and "push_cube" in known_tasks()
    with pytest.raises(ConfigError) as err:
        make_task("juggle", EnvConfig())
    assert err.value.path == "env.task" and "reach" in str(err.value)


def test_unknown_task_option_is_named():
    with pytest.raises(ConfigError) as err:
        make_task("reach", EnvConfig(), {"speed": 2})
    assert err.value.path == "env.task_options.speed"


def test_task_options_are_type_checked_with_the_option_named():
    from rlhw.robot.tasks.reach import Reach

    task = Reach(EnvConfig())
    task.options = {"flag": "false", "size": "big"}
    with pytest.raises(ConfigError) as err:
        task.option("flag", True, bool)
    assert err.value.path == "env.task_options.flag"
    with pytest.raises(ConfigError) as err:
        task.option("size", 1.0)
    assert err.value.path == "env.task_options.size" and "expected float" in str(err.value)
    assert task.option("missing", 0.5) == 0.5
