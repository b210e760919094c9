"""A person can rehearse at a simulated arm: with a human-driven teleop device the env paces itself at
``env.control_hz`` (`RobotEnv.paced`), so keys typed at a person's pace land in the episode.

Time is the test's (`FakeClock`): it moves only when the env sleeps, and the person's key presses are
scheduled on it, so the paced times are asserted exactly.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from drivers.teleop.keyboard import TerminalKeyboard
from drivers.teleop.scripted import ScriptedExpert
from rlhw.config.env import TeleopConfig
from rlhw.robot.takeover import Takeover
from rlhw.robot.teleop import Operator
from tests.robot.fake_clock import FakeClock


class PersonAtATerminal(FakeClock):
    """The test's time, and a person typing on a pseudo-terminal at given times: a key whose time has come is
    written when the env's sleep reaches it, and the keyboard's reader thread takes it in before time moves on."""

    def __init__(self, keyboard: TerminalKeyboard, master: int, presses: list[tuple[float, str]]):
        super().__init__()
        self.keyboard, self.master, self.presses = keyboard, master, sorted(presses)

    def sleep_until(self, deadline: float) -> None:
        super().sleep_until(deadline)
        while self.presses and self.presses[0][0] <= self.t:
            _, key = self.presses.pop(0)
            target = self.keyboard.reports + 1
            os.write(self.master, key.encode())
            assert self.keyboard.wait_reports(target, 2.0), "the keyboard did not take the key"


@pytest.fixture
def terminal():
    master, slave = os.openpty()
    yield master, slave
    for fd in (master, slave):
        try:
            os.close(fd)
        except OSError:
            pass


def test_the_keyboard_drives_a_paced_simulated_arm_a_motion_then_a_success_label(mock_env, terminal):
    master, slave = terminal
    env = mock_env(max_episode_steps=300, control_hz=10.0)
    keyboard = TerminalKeyboard(slave, hold_s=0.15)
    # A person presses "w" (hand +x) at 0.25 s and "y" (success) at 0.95 s, as record-demos lets them.
    person = PersonAtATerminal(keyboard, master, [(0.25, "w"), (0.95, "y")])
    keyboard.clock = person.now
    env.clock = person
    env.takeover = Takeover(keyboard, TeleopConfig(device="keyboard", always_active=True), env.spec.action.shape)
    env.takeover.open()
    try:
        assert env.paced and not env.realtime
        env.reset(seed=0)
        executed, done, info = [], False, {}
        while not done:
            _, _, terminated, truncated, info = env.step(np.zeros(3, np.float32)).gym()
            executed.append(info["executed_action"].tolist())
            done = terminated or truncated
    finally:
        env.takeover.close()
    # Each step ended at the end of its 0.1 s period: the episode took the person's time, not the CPU's.
    assert person.wakeups == pytest.approx([0.1 * k for k in range(1, 12)])
    # "w" arrived during step 3's period: steps 4 and 5 moved the hand (held 0.15 s), then it held still.
    assert executed == [[0, 0, 0]] * 3 + [[1, 0, 0]] * 2 + [[0, 0, 0]] * 6
    # "y" arrived during step 10's period and ended the episode at step 11, labelled a success.
    assert info["episode_step"] == 11 and terminated and info["operator_label"] == "success" and info["success"]


def test_without_a_person_a_simulated_arm_runs_as_fast_as_it_can(mock_env):
    env = mock_env(max_episode_steps=20)
    env.clock = FakeClock()
    assert not env.paced  # no operator
    env.takeover = Takeover(
        ScriptedExpert(env.operator_view), TeleopConfig(device="scripted", always_active=True), env.spec.action.shape
    )
    assert ScriptedExpert.operator is Operator.PROGRAM and not env.paced  # a program reads the simulator
    env.reset(seed=0)
    for _ in range(5):
        env.step(np.zeros(3, np.float32))
    assert env.clock.wakeups == [] and env.clock.now() == 0.0  # it never slept


def test_the_human_devices_declare_a_person_and_the_scripted_expert_a_program():
    from drivers.teleop.spacemouse import SpaceMouse

    assert TerminalKeyboard.operator is Operator.HUMAN and SpaceMouse.operator is Operator.HUMAN
    assert ScriptedExpert.operator is Operator.PROGRAM
