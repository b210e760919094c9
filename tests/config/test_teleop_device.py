"""``env.teleop.device`` is checked against the teleop registry, not a closed list: a registered plugin's
device is accepted, and an unknown name is refused naming the field and every registered device. The time a person has
for a verdict (``env.teleop.verdict_timeout_s``) is bounded, and below the step's own timeout."""

from __future__ import annotations

import pytest

from rlhw.config import load_config
from rlhw.drivers_registry import _TELEOPS, register_teleop, teleop_devices
from rlhw.errors import ConfigError

PIXELS = "configs/sim_push_cube_pixels.yaml"  # camera frames: a success classifier may judge them


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


def test_a_person_has_four_seconds_for_a_verdict_unless_the_config_says_otherwise():
    """4 s: the step waits for the answer, and an env server stops a step still running after its 5 s deadline."""
    assert _load("keyboard").env.teleop.verdict_timeout_s == 4.0
    assert load_config("configs/sim_reach.yaml", ["env.teleop.verdict_timeout_s=2"]).env.teleop.verdict_timeout_s == 2


@pytest.mark.parametrize("value", ["0", "-1", "inf", "nan", "ten", "600"])
def test_a_bad_verdict_timeout_is_refused_naming_the_field(value):
    with pytest.raises(ConfigError) as err:
        load_config("configs/sim_reach.yaml", [f"env.teleop.verdict_timeout_s={value}"])
    assert err.value.path == "env.teleop.verdict_timeout_s"


@pytest.mark.parametrize(
    ("bounds", "tighter"),
    [
        (["server.step_deadline_s=5", "train.step_timeout_s=30"], "server.step_deadline_s"),
        (["server.step_deadline_s=30", "train.step_timeout_s=5"], "train.step_timeout_s"),
    ],
)
def test_a_verdict_timeout_the_step_that_asks_could_not_wait_for_is_refused_naming_the_field(tmp_path, bounds, tighter):
    """The verdict is awaited inside the step: an env server stops a step past server.step_deadline_s as hung, and
    a served env's client waits train.step_timeout_s for it. The step itself keeps a second of the tighter one."""
    asks = ["env.teleop.device=keyboard", f"env.reward.classifier={tmp_path / 'success.pt'}", *bounds]
    with pytest.raises(ConfigError) as err:
        load_config(PIXELS, [*asks, "env.teleop.verdict_timeout_s=4.5"])
    assert err.value.path == "env.teleop.verdict_timeout_s" and tighter in err.value.message
    assert "at most 4," in err.value.message and "to at least 5.5" in err.value.message
    assert load_config(PIXELS, [*asks, "env.teleop.verdict_timeout_s=4"]).env.teleop.verdict_timeout_s == 4


def test_a_long_verdict_timeout_is_fine_with_bounds_that_fit_it_or_where_nobody_is_asked(tmp_path):
    asks = ["env.teleop.device=keyboard", f"env.reward.classifier={tmp_path / 'success.pt'}"]
    ten = ["env.teleop.verdict_timeout_s=10"]
    fits = load_config(PIXELS, [*asks, *ten, "server.step_deadline_s=11", "train.step_timeout_s=30"])
    assert fits.env.teleop.verdict_timeout_s == 10
    assert load_config(PIXELS, ten).env.teleop.verdict_timeout_s == 10  # no device: nobody is asked
