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

REPORTS = load_reports(Path(__file__).parent / "data" / "spacemouse_compact.hex")


def feed(mouse: SpaceMouse, hid: RecordedHid, *reports: bytes):
    """Queue reports, wait until the reader thread decoded them all, return the reading after them."""
    target = mouse.reports + len(reports)
    for report in reports:
        hid.push(report)
    assert mouse.wait_reports(target, 2.0), "the reader thread did not take the reports"
    return mouse.read(timeout_s=1.0)


@pytest.fixture
def device():
    hid = RecordedHid()
    mouse = SpaceMouse("SpaceMouseCompact", deadband=0.1, hid_device=hid)
    mouse.open(timeout_s=2.0)
    yield mouse, hid
    mouse.close()


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
