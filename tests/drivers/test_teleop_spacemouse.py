"""The SpaceMouse driver on recorded HID reports, decoded by pyspacemouse's own code (no USB device here).

The reports (tests/drivers/data/spacemouse_compact.hex) are in the SpaceMouse Compact's report layout
from pyspacemouse's devices.toml; `RecordedHid` stands in for the easyhid handle only.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from drivers.teleop.recorded import RecordedHid, load_reports
from drivers.teleop.spacemouse import SpaceMouse, shape_axis
from rlhw.errors import RobotFault
from rlhw.robot.teleop import TeleopEvent
from tests.drivers.asking import Asked

REPORTS = load_reports(Path(__file__).parent / "data" / "spacemouse_compact.hex")
LEFT_DOWN, LEFT_UP, RIGHT_DOWN, RIGHT_UP, BOTH_DOWN = REPORTS[7], REPORTS[8], REPORTS[9], REPORTS[10], REPORTS[11]


def feed(mouse: SpaceMouse, hid: RecordedHid, *reports: bytes):
    """Queue reports, wait until the reader thread decoded them all, return the reading after them."""
    push(mouse, hid, *reports)
    return mouse.read(timeout_s=1.0)


class Clock:
    """The device's clock, on test time: it moves when the test says."""

    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


@pytest.fixture
def device():
    hid = RecordedHid()
    mouse = SpaceMouse("SpaceMouseCompact", deadband=0.1, hid_device=hid, clock=Clock())
    mouse.open(timeout_s=2.0)
    yield mouse, hid
    mouse.close()


def push(mouse: SpaceMouse, hid: RecordedHid, *reports: bytes) -> None:
    """Queue reports and wait until the reader thread decoded them all (nothing is read: a verdict may be asked)."""
    target = mouse.reports + len(reports)
    for report in reports:
        hid.push(report)
    assert mouse.wait_reports(target, 2.0), "the reader thread did not take the reports"


def test_a_half_deflection_to_the_right_moves_the_hand_to_the_robots_right_after_the_deadband(device):
    mouse, hid = device
    reading = feed(mouse, hid, REPORTS[0])  # HID x = +175 of 350 counts
    expected = (0.5 - 0.1) / (1 - 0.1)
    assert reading.twist[1] == pytest.approx(-expected, abs=1e-6)  # robot -y is the operator's right
    assert reading.twist[[0, 2, 3, 4, 5]].tolist() == [0.0] * 5
    assert reading.active and reading.twist.dtype == np.float32


def test_full_deflections_map_to_plus_and_minus_one_in_the_robot_frame(device):
    mouse, hid = device
    away = feed(mouse, hid, REPORTS[5], REPORTS[1])
    assert away.twist.tolist() == pytest.approx([1, 0, 0, 0, 0, 0])  # away from the operator = base +x
    up = feed(mouse, hid, REPORTS[5], REPORTS[2])
    assert up.twist.tolist() == pytest.approx([0, 0, 1, 0, 0, 0])  # lift = +z
    turn = feed(mouse, hid, REPORTS[5], REPORTS[4])
    assert turn.twist.tolist() == pytest.approx([0, 0, 0, 0, 0, -1])  # clockwise from above = -yaw


def test_a_touch_inside_the_deadband_reads_as_no_motion_and_the_device_is_not_active(device):
    mouse, hid = device
    reading = feed(mouse, hid, REPORTS[3])  # 20 counts = 0.057
    assert not reading.twist.any() and not reading.active


def test_the_left_button_toggles_the_gripper_and_the_right_button_toggles_takeover(device):
    mouse, hid = device
    first = feed(mouse, hid, REPORTS[7], REPORTS[8])
    assert first.gripper == -1.0  # first press closes
    again = feed(mouse, hid, REPORTS[7], REPORTS[8])
    assert again.gripper == 1.0  # next press opens
    taken = feed(mouse, hid, REPORTS[9], REPORTS[10])
    assert taken.events == {TeleopEvent.TAKEOVER} and taken.active  # latched on with the cap at rest
    assert mouse.read().events == frozenset()  # events are edges, reported once
    back = feed(mouse, hid, REPORTS[9], REPORTS[10])
    assert back.events == {TeleopEvent.GIVE_BACK} and not back.active


def test_an_unplugged_device_raises_a_teleop_fault_within_the_read_bound(device):
    mouse, hid = device
    feed(mouse, hid, REPORTS[1])
    hid.unplug()
    mouse._thread.join(2.0)  # the reader thread meets the HID read error and ends
    with pytest.raises(RobotFault) as caught:
        mouse.read(timeout_s=0.05)
    assert caught.value.kind == "teleop" and "HIDException" in str(caught.value)


def test_opening_an_unplugged_device_is_a_teleop_fault_that_says_what_to_do():
    hid = RecordedHid()
    hid.unplug()
    with pytest.raises(RobotFault, match="plug one in") as caught:
        SpaceMouse("SpaceMouseCompact", hid_device=hid).open(timeout_s=2.0)
    assert caught.value.kind == "teleop"


def test_the_deadband_is_continuous_at_its_edge_and_the_output_is_clipped():
    assert shape_axis(0.1, 0.1, 1.0) == 0.0
    assert shape_axis(0.1001, 0.1, 1.0) == pytest.approx(0.0, abs=1e-3)
    assert shape_axis(-1.3, 0.1, 1.0) == -1.0
    assert shape_axis(0.55, 0.1, 2.0) == 1.0


def test_the_real_usb_enumeration_opens_an_attached_spacemouse_or_says_none_is_attached():
    # The real path: pyspacemouse.open enumerates HID devices through easyhid and libhidapi.
    import pyspacemouse

    mouse = SpaceMouse()
    if pyspacemouse.get_connected_devices():  # a workstation with a SpaceMouse plugged in
        mouse.open(timeout_s=5.0)
        try:
            assert mouse.read(timeout_s=0.5).twist.shape == (6,)
        finally:
            mouse.close()
        return
    with pytest.raises(RobotFault, match="No connected or supported devices found") as caught:
        mouse.open(timeout_s=5.0)
    assert caught.value.kind == "teleop"


# -- the verdict: asked when the success classifier ends an episode (TeleopDevice.verdict) ----------------------


def test_asked_for_a_verdict_the_left_button_answers_yes_and_toggles_no_gripper(device, capsys):
    mouse, hid = device
    asked = Asked(mouse, timeout_s=10.0)
    said = capsys.readouterr().err
    assert "Is it? Press LEFT = yes, RIGHT = no" in said and "no answer within 10 s" in said
    push(mouse, hid, LEFT_DOWN, LEFT_UP)
    assert asked.returned() is True
    after = mouse.read()
    assert after.gripper is None and after.events == frozenset() and not after.active  # it answered, nothing more


def test_asked_for_a_verdict_the_right_button_answers_no_and_takes_nothing_over(device):
    mouse, hid = device
    asked = Asked(mouse)
    push(mouse, hid, RIGHT_DOWN, RIGHT_UP)
    assert asked.returned() is False
    after = mouse.read()
    assert after.events == frozenset() and not after.active
    assert feed(mouse, hid, RIGHT_DOWN, RIGHT_UP).events == {TeleopEvent.TAKEOVER}  # asked no more: it toggles again


def test_no_button_within_the_timeout_is_no_verdict(device, capsys):
    mouse, hid = device
    asked = Asked(mouse, timeout_s=10.0)
    mouse.clock.t += 10.0  # the bound, on the device's clock: no real time passes
    assert asked.returned() is None
    assert "verdict: no answer: the classifier's call stands" in capsys.readouterr().err


def test_while_a_verdict_is_asked_the_cap_and_both_buttons_at_once_answer_nothing(device):
    """Neither is an answer: the question stays open (not asked again) until a single button is pressed."""
    mouse, hid = device
    asked = Asked(mouse)
    push(mouse, hid, REPORTS[1], REPORTS[5], BOTH_DOWN, REPORTS[8])  # the cap pushed and let go; both buttons
    push(mouse, hid, RIGHT_DOWN, RIGHT_UP)
    assert asked.returned() is False  # the first single press after them answered
    assert mouse.read().gripper is None and mouse.questions == 1


def test_a_spacemouse_never_opened_gives_no_verdict():
    assert SpaceMouse("SpaceMouseCompact", hid_device=RecordedHid()).verdict(timeout_s=60.0) is None
