"""``env.teleop.device`` is checked against the teleop registry, not a closed list: a registered plugin's
device is accepted, and an unknown name is refused naming the field and every registered device."""

from __future__ import annotations

import pytest

from rlhw.config import load_config
from rlhw.drivers_registry import _TELEOPS, register_teleop, teleop_devices
from rlhw.errors import ConfigError


def _load(device: str):
    return load_config("configs/sim_reach.yaml", [f"env.teleop.device={device}"])


@pytest.mark.parametrize("device", ["none", "spacemouse", "keyboard", "scripted"])
def test_the_built_in_devices_and_none_are_accepted(device):
    assert _load(device).env.teleop.device == device


def test_an_unknown_device_is_refused_with_the_field_and_the_registered_names():
    with pytest.raises(ConfigError) as err:
        _load("spacemous")
    assert err.value.path == "env.teleop.device"
    assert "'spacemous'" in err.value.message
    for name in ["none", *teleop_devices()]:
        assert name in err.value.message


def test_a_registered_plugin_device_is_accepted_without_editing_the_config_schema():
    @register_teleop("test-pedal")
    class Pedal:
        pass

    try:
        assert "test-pedal" in teleop_devices()
        assert _load("test-pedal").env.teleop.device == "test-pedal"
    finally:
        del _TELEOPS["test-pedal"]
