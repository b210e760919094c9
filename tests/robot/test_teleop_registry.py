"""Teleop devices register by name like arms and cameras: the env looks them up, it never imports them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import rlhw.robot.takeover as takeover_module
from rlhw.config.env import TeleopConfig
from rlhw.errors import ConfigError
from rlhw.robot import registry
from rlhw.robot.teleop import TeleopDevice
from tests.config.test_layers import cycles, module_graph


def test_every_registered_device_is_accepted_by_the_config_and_registered_under_that_name():
    names = registry.teleop_devices()
    assert {"keyboard", "scripted", "spacemouse"} <= set(names)
    for name in names:
        assert TeleopConfig(device=name).device == name
        cls = registry.teleop_class(name)
        assert issubclass(cls, TeleopDevice) and cls.name == name


def test_a_device_is_built_from_its_own_fields_of_env_teleop():
    config = TeleopConfig(device="spacemouse", spacemouse_name="SpaceMouseCompact", deadband=0.2, gain=0.5)
    mouse = registry.teleop_class("spacemouse").from_config(config, None)
    assert (mouse.model, mouse.deadband, mouse.gain) == ("SpaceMouseCompact", 0.2, 0.5)


def test_an_unknown_device_names_the_config_key_and_the_known_devices():
    with pytest.raises(ConfigError) as err:
        registry.teleop_class("joystick")
    assert err.value.path == "env.teleop.device"
    for name in ("keyboard", "scripted", "spacemouse"):
        assert name in str(err.value)


def test_teleop_names_stay_out_of_the_arm_drivers_list():
    with pytest.raises(ConfigError) as err:
        registry.make_arm("keyboard")
    assert "unknown arm driver 'keyboard'" in str(err.value)


def test_the_takeover_reaches_devices_only_through_the_registry():
    tree = ast.parse(Path(takeover_module.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not any(m and m.split(".")[0] == "drivers" for m in imported), imported


def test_the_env_its_operator_and_the_teleop_interface_sit_on_no_import_cycle():
    """A device is built from an operator view, not the env: no module of the robot layer imports back."""
    found = [c for c in cycles(module_graph()) if any(m.startswith("rlhw.robot") for m in c)]
    assert found == [], "import cycles in the robot layer: " + "; ".join(" <-> ".join(c) for c in found)
