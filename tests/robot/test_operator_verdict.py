"""A person's verdict at the env: when the success classifier calls a success, the env asks the operator through its
takeover (`Takeover.verdict`, the scripted expert's path too), commands nothing until the answer or
``env.teleop.verdict_timeout_s``, and carries the answer in the step's notes (``StepNotes.operator_verdict``, what
the classifier's retraining reads).

The person presses keys on the terminal keyboard, read through a pseudo-terminal as a real tty. The classifier is a
real one that calls every frame a success (tests/vision/test_classifier_env.py). The env and the device share one
test clock, so the timeout passes when the test says, not on the wall.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from drivers.teleop.keyboard import TerminalKeyboard
from rlhw.config.env import TeleopConfig
from rlhw.robot import make_env
from rlhw.robot.takeover import Takeover
from tests.drivers.asking import UNANSWERED, Asked
from tests.robot.conftest import make_config
from tests.robot.fake_clock import FakeClock
from tests.vision.test_classifier_env import constant_classifier

pytestmark = pytest.mark.timeout(120)


class Cell:
    """A mock arm with a camera, a classifier that always says done, and a person at the keyboard."""

    def __init__(self, tmp_path):
        classifier = constant_classifier(tmp_path / "yes.pt", 3.0)
        env = {"images": True, "image_size": [32, 32], "sim_cameras": ["front"], "reward": {"classifier": classifier}}
        self.env = make_env(make_config(env))
        self.env.clock = FakeClock()  # a person's device paces the simulated arm (tests/robot/test_pacing.py)
        self.master, self.slave = os.openpty()
        self.keyboard = TerminalKeyboard(self.slave, clock=self.env.clock.now)
        teleop = TeleopConfig(device="keyboard", verdict_timeout_s=10.0)
        self.env.takeover = Takeover(self.keyboard, teleop, self.env.spec.action.shape)
        self.env.takeover.open()
        self.env.reset(seed=0)

    def step_asking(self) -> Asked:
        """The client's step, on its own thread: the classifier calls a success and the person is asked."""
        return Asked(self.keyboard, ask=lambda: self.env.step(np.zeros(3, np.float32)))

    def press(self, keys: str) -> None:
        os.write(self.master, keys.encode())

    def close(self) -> None:
        self.env.close()
        for fd in (self.master, self.slave):
            os.close(fd)


@pytest.fixture
def cell(tmp_path):
    c = Cell(tmp_path)
    yield c
    c.close()


def test_the_arm_is_not_commanded_while_the_operator_is_asked_and_a_no_is_the_steps_verdict(cell):
    before = len(cell.env.arm.motions)
    asked = cell.step_asking()
    commanded = list(cell.env.arm.motions)
    assert len(commanded) > before  # the step's own command went out before the question
    cell.press("wwrt")  # motion and takeover keys while asked: ignored, nothing moves
    assert cell.keyboard.wait_reports(1, 2.0)
    cell.press("n")
    step = asked.returned()
    assert list(cell.env.arm.motions) == commanded  # nothing was commanded from the question to the step's end
    assert step.notes[0].operator_verdict is False
    assert step.terminated[0] and step.success[0]  # the classifier's call ends the episode; the verdict rides with it
    assert step.gym()[4]["operator_verdict"] is False


def test_a_yes_is_the_steps_verdict(cell):
    asked = cell.step_asking()
    cell.press("y")
    assert asked.returned().notes[0].operator_verdict is True


def test_no_answer_within_the_configured_timeout_keeps_the_classifiers_call_with_no_verdict(cell):
    asked = cell.step_asking()
    cell.env.clock.advance(9.0)
    cell.press("q")  # a stray key wakes the wait: 9 s is not env.teleop.verdict_timeout_s
    assert cell.keyboard.wait_reports(1, 2.0) and asked.result is UNANSWERED
    cell.env.clock.advance(1.0)
    step = asked.returned()
    assert step.notes[0].operator_verdict is None and "operator_verdict" not in step.gym()[4]
    assert step.terminated[0] and step.success[0]


def test_a_stop_reaches_the_arm_while_the_operator_is_asked(cell):
    """The env server's Stop calls env.stop without waiting for the step (rlhw/env/host.py stop_arm)."""
    asked = cell.step_asking()
    stops = cell.env.arm.calls.get("stop", 0)
    cell.env.stop()  # from another thread than the step's, as the server's Stop handler
    assert cell.env.arm.calls["stop"] == stops + 1
    commanded = list(cell.env.arm.motions)
    cell.press("n")
    assert asked.returned().notes[0].operator_verdict is False  # the answer still counts for the classifier
    assert list(cell.env.arm.motions) == commanded  # and the step that asked sent nothing after the stop
