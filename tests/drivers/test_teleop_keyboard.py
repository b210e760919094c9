"""The terminal keyboard through a pseudo-terminal: the driver reads the slave end as it would a real tty."""

from __future__ import annotations

import os
import signal
import termios
import threading

import pytest

from drivers.teleop.keyboard import TerminalKeyboard
from rlhw.errors import RobotFault
from rlhw.robot.teleop import TeleopEvent
from tests.drivers.asking import Asked


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


# -- the verdict: asked when the success classifier ends an episode (TeleopDevice.verdict) ----------------------


def test_asked_for_a_verdict_y_answers_yes_and_the_console_says_what_is_asked_and_what_each_key_does(terminal, capsys):
    keyboard, press, master, *_ = terminal
    asked = Asked(keyboard, timeout_s=10.0)
    said = capsys.readouterr().err
    assert "Is it? Press y = yes, n = no" in said and "no answer within 10 s keeps the classifier's call" in said
    os.write(master, b"y")
    assert asked.returned() is True
    assert "verdict: yes" in capsys.readouterr().err
    assert keyboard.read().events == frozenset()  # the y answered: it did not also mark (end) the next episode


def test_asked_for_a_verdict_n_answers_no(terminal, capsys):
    keyboard, press, master, *_ = terminal
    asked = Asked(keyboard)
    os.write(master, b"N")  # upper case too
    assert asked.returned() is False
    assert "verdict: no, not done" in capsys.readouterr().err
    assert keyboard.read().events == frozenset()


def test_no_answer_within_the_timeout_is_no_verdict_which_keeps_the_classifiers_call(terminal, capsys):
    keyboard, press, master, slave, clock, _ = terminal
    asked = Asked(keyboard, timeout_s=10.0)
    clock.t += 9.9
    os.write(master, b"q")  # a report wakes the wait: 9.9 s is not yet the bound
    assert keyboard.wait_reports(1, 2.0) and asked.result == "still waiting"
    clock.t += 0.1  # the bound, on the device's clock: no real time passes
    assert asked.returned() is None
    assert "verdict: no answer: the classifier's call stands" in capsys.readouterr().err


def test_while_a_verdict_is_asked_other_keys_do_nothing_and_the_question_stays_open(terminal):
    """Ignored, not asked again: a stray key neither answers nor leaves a motion, takeover or mark for later."""
    keyboard, press, master, *_ = terminal
    asked = Asked(keyboard)
    os.write(master, b"wrt cox")
    assert keyboard.wait_reports(1, 2.0)
    os.write(master, b"n")
    assert asked.returned() is False  # the n, after every other key, was the answer
    after = keyboard.read()
    assert not after.twist.any() and not after.active and after.gripper is None and after.events == frozenset()
    assert press("y").events == {TeleopEvent.SUCCESS}  # asked no more: y marks the episode again


def test_the_first_answer_counts(terminal):
    keyboard, press, master, *_ = terminal
    asked = Asked(keyboard)
    os.write(master, b"ny")  # one report, two answers
    assert asked.returned() is False


def test_closing_the_device_while_a_verdict_is_asked_ends_the_wait_with_no_verdict(terminal):
    keyboard, *_ = terminal
    asked = Asked(keyboard, timeout_s=60.0)
    keyboard.close()  # the env closing (its takeover closes the device)
    assert asked.returned() is None


def test_a_dead_or_closed_device_gives_no_verdict_without_asking(terminal):
    keyboard, press, master, *_ = terminal
    assert TerminalKeyboard(master).verdict(timeout_s=60.0) is None  # never opened
    os.close(master)  # the terminal went away
    assert keyboard.wait_reports(keyboard.reports + 1, 2.0)  # returns at the device's death
    assert keyboard.verdict(timeout_s=60.0) is None and keyboard.questions == 0


@pytest.mark.timeout(30)
def test_ctrl_c_gets_through_while_a_verdict_is_awaited(terminal):
    keyboard, press, *_ = terminal
    main = threading.get_ident()

    def interrupt() -> None:  # the person presses Ctrl-C: SIGINT to the main thread, which waits for the verdict
        if keyboard.wait_asked(1, 5.0):
            signal.pthread_kill(main, signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        keyboard.verdict(timeout_s=60.0)  # the test clock stands still: only the interrupt ends this wait
    assert press("y").events == {TeleopEvent.SUCCESS}  # the question closed with it
