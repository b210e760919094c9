"""The terminal keyboard through a pseudo-terminal: the driver reads the slave end as it would a real tty."""

from __future__ import annotations

import os
import termios

import pytest

from drivers.teleop.keyboard import TerminalKeyboard
from rlhw.errors import RobotFault
from rlhw.robot.teleop import TeleopEvent


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


@pytest.fixture
def terminal():
    master, slave = os.openpty()
    clock = Clock()
    keyboard = TerminalKeyboard(slave, hold_s=0.15, clock=clock)
    before = termios.tcgetattr(slave)
    keyboard.open()

    def press(keys: str):
        target = keyboard.reports + 1
        os.write(master, keys.encode())
        assert keyboard.wait_reports(target, 2.0), "the keyboard did not take the keys"
        return keyboard.read(timeout_s=1.0)

    yield keyboard, press, master, slave, clock, before
    keyboard.close()
    for fd in (master, slave):
        try:
            os.close(fd)
        except OSError:
            pass


def test_motion_keys_move_the_hand_along_the_base_axes_and_take_over(terminal):
    keyboard, press, *_ = terminal
    forward = press("w")
    assert forward.twist.tolist() == [1, 0, 0, 0, 0, 0] and forward.active
    assert forward.events == {TeleopEvent.TAKEOVER}
    assert press("a").twist.tolist() == [1, 1, 0, 0, 0, 0]  # both keys are held within hold_s
    assert press(" ").twist.tolist() == [0] * 6  # space drops every held key
    for key, twist in {"s": [-1, 0, 0], "d": [0, -1, 0], "r": [0, 0, 1], "f": [0, 0, -1]}.items():
        press(" ")
        assert press(key).twist[:3].tolist() == twist, key


def test_a_motion_key_stops_moving_after_the_hold_time_without_a_repeat(terminal):
    keyboard, press, master, slave, clock, _ = terminal
    press("w")
    clock.t += 0.1
    assert keyboard.read().twist[0] == 1.0
    clock.t += 0.1  # 0.2 s after the press: the key was released (no repeat came)
    reading = keyboard.read()
    assert reading.twist[0] == 0.0 and reading.active  # still in takeover: the hand holds still


def test_gripper_takeover_and_episode_keys(terminal):
    keyboard, press, *_ = terminal
    assert press("c").gripper == -1.0
    assert press("o").gripper == 1.0
    taken = press("t")
    assert taken.active and taken.events == {TeleopEvent.TAKEOVER}
    back = press("t")
    assert not back.active and back.events == {TeleopEvent.GIVE_BACK}
    assert press("y").events == {TeleopEvent.SUCCESS}
    assert press("n").events == {TeleopEvent.FAILURE}
    assert press("x").events == {TeleopEvent.END_EPISODE}
    assert press("Y").events == {TeleopEvent.SUCCESS}  # upper case works too (caps lock)


def test_the_terminal_is_in_cbreak_mode_while_open_and_restored_on_close(terminal):
    keyboard, press, master, slave, clock, before = terminal
    assert not termios.tcgetattr(slave)[3] & termios.ICANON
    keyboard.close()
    assert termios.tcgetattr(slave) == before


def test_a_closed_terminal_is_a_teleop_fault(terminal):
    keyboard, press, master, slave, clock, _ = terminal
    press("w")
    os.close(master)  # the terminal goes away: the slave reads EIO / end of file
    keyboard._thread.join(2.0)
    with pytest.raises(RobotFault) as caught:
        keyboard.read(timeout_s=0.05)
    assert caught.value.kind == "teleop" and "gone" in str(caught.value)
