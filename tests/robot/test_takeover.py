"""Takeover semantics of RobotEnv: the operator's action replaces the client's, through the same safety layer.

The operator here is a SpaceMouse fed recorded HID reports (the real pyspacemouse decoding path) on the
mock arm, which records every command it receives.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from drivers.teleop.recorded import RecordedHid, load_reports
from drivers.teleop.spacemouse import SpaceMouse
from rlhw.config.env import TeleopConfig
from rlhw.errors import ConfigError, RobotFault, SafetyViolation
from rlhw.robot.takeover import Takeover
from rlhw.robot.teleop import TeleopDevice, TeleopEvent, TeleopReading
from tests.robot.conftest import make_config
from tests.robot.fake_clock import FakeClock

REPORTS = load_reports(Path(__file__).parents[1] / "drivers" / "data" / "spacemouse_compact.hex")
AWAY, LIFT, LET_GO, RIGHT_DOWN, RIGHT_UP = REPORTS[1], REPORTS[2], REPORTS[5], REPORTS[9], REPORTS[10]


class Operator:
    """A SpaceMouse on recorded reports, plugged into an env."""

    def __init__(self, env):
        self.hid = RecordedHid()
        self.mouse = SpaceMouse("SpaceMouseCompact", hid_device=self.hid)
        env.takeover = Takeover(self.mouse, TeleopConfig(device="spacemouse"), env.spec.action.shape)
        env.takeover.open()

    def send(self, *reports):
        target = self.mouse.reports + len(reports)
        for r in reports:
            self.hid.push(r)
        assert self.mouse.wait_reports(target, 2.0)


@pytest.fixture
def env(mock_env):
    e = mock_env(max_episode_steps=20)
    e.clock = FakeClock()  # a person's device paces the simulated arm (tests/robot/test_pacing.py): on test time
    e.reset(seed=0)
    return e


def last_target(env):
    return [m[1] for m in env.arm.motions if m[0] == "command_pose"][-1]


def test_without_an_operator_the_clients_action_is_executed_and_reported_on_every_step(env):
    action = np.array([0.5, -0.2, 0.1], np.float32)
    _, _, _, _, info = env.step(action).gym()
    assert info["intervened"] is False and info["teleop_events"] == [] and info["operator_label"] is None
    assert info["executed_action"].dtype == np.float32 and info["executed_action"].tolist() == action.tolist()


def test_while_the_operator_deflects_the_cap_the_operators_action_goes_to_the_arm_instead(env):
    op = Operator(env)
    op.send(AWAY)  # full deflection away from the operator = +x
    hand = env.status()["arm"]["ee_pose"][:3]
    _, _, _, _, info = env.step(np.array([-1.0, 0.0, 0.0], np.float32)).gym()  # the client wants -x
    assert info["intervened"] is True
    assert info["executed_action"].tolist() == [1.0, 0.0, 0.0]
    moved = last_target(env) - np.array(hand)
    assert moved[0] > 0  # the arm was sent +x, the operator's way
    assert np.linalg.norm(moved) <= env.safety.max_step + 1e-9  # bounded like any policy step


def test_the_operators_command_is_bounded_by_the_same_workspace(env):
    op = Operator(env)
    op.send(LIFT)
    for _ in range(19):
        _, _, _, truncated, info = env.step(np.zeros(3, np.float32)).gym()
        assert info["intervened"]
    assert last_target(env)[2] <= env.config.safety.workspace_high[2] + 1e-9


def test_when_the_operator_lets_go_the_client_drives_again(env):
    op = Operator(env)
    op.send(AWAY)
    env.step(np.zeros(3, np.float32))
    op.send(LET_GO)
    _, _, _, _, info = env.step(np.array([0.0, 0.3, 0.0], np.float32)).gym()
    assert info["intervened"] is False and info["executed_action"].tolist() == pytest.approx([0.0, 0.3, 0.0])


def test_a_latched_takeover_holds_the_arm_still_and_reports_the_events(env):
    op = Operator(env)
    op.send(RIGHT_DOWN, RIGHT_UP)
    _, _, _, _, info = env.step(np.array([1.0, 1.0, 1.0], np.float32)).gym()
    assert info["intervened"] and info["executed_action"].tolist() == [0.0, 0.0, 0.0]
    assert info["teleop_events"] == ["takeover"]


def test_a_device_that_dies_mid_intervention_stops_the_arm_and_truncates_the_episode_with_reason_teleop(env):
    op = Operator(env)
    op.send(AWAY)
    env.step(np.zeros(3, np.float32))
    stops = env.arm.calls.get("stop", 0)
    commands = env.arm.motion_count
    op.hid.unplug()
    op.mouse._thread.join(2.0)
    _, _, terminated, truncated, info = env.step(np.zeros(3, np.float32)).gym()
    assert truncated and not terminated
    assert info["fault"] == "teleop" and "gone" in info["fault_message"]
    assert env.arm.calls["stop"] > stops and env.arm.motion_count == commands  # stopped; nothing sent
    assert info["intervened"] is False and info["executed_action"].tolist() == [0.0, 0.0, 0.0]
    with pytest.raises(SafetyViolation):
        env.step(np.zeros(3, np.float32))
    with pytest.raises(RobotFault, match="still gone at reset") as caught:
        env.reset()
    assert caught.value.kind == "teleop"
    op.hid.plug()  # the operator reconnects it: the next reset reopens it
    env.reset()
    op.send(AWAY)
    _, _, _, _, info = env.step(np.zeros(3, np.float32)).gym()
    assert info["intervened"] and info["fault"] is None


class Marker(TeleopDevice):
    """An operator who only presses one key (an event), once."""

    def __init__(self, event):
        self.events = {event}

    def open(self, timeout_s=5.0):
        pass

    def close(self):
        pass

    def read(self, timeout_s=0.05):
        events, self.events = frozenset(self.events), set()
        return TeleopReading(np.zeros(6, np.float32), None, (), events, False, 0.0)


@pytest.mark.parametrize(
    "event, terminated, success, label",
    [
        (TeleopEvent.SUCCESS, True, True, "success"),
        (TeleopEvent.FAILURE, False, False, "failure"),
        (TeleopEvent.END_EPISODE, False, False, None),
    ],
)
def test_the_operators_marks_end_the_episode_with_a_label(env, event, terminated, success, label):
    env.takeover = Takeover(Marker(event), TeleopConfig(device="keyboard"), (3,))
    _, _, term, trunc, info = env.step(np.zeros(3, np.float32)).gym()
    assert (term, trunc) == (terminated, not terminated)
    assert info["success"] is success and info["operator_label"] == label
    assert info["teleop_events"] == [event.value]


def test_an_unknown_teleop_device_is_a_config_error_naming_the_field():
    with pytest.raises(ConfigError, match=r"env\.teleop\.device"):
        make_config({"teleop": {"device": "joystick"}})
    with pytest.raises(ConfigError, match=r"env\.teleop\.deadband"):
        make_config({"teleop": {"deadband": 1.5}})
    with pytest.raises(ConfigError, match=r"env\.teleop\.device: one spacemouse drives one arm"):
        make_config({"teleop": {"device": "spacemouse"}, "num_envs": 4})


def test_with_a_gripper_action_the_operators_gripper_button_is_executed_and_kept(mock_env):
    env = mock_env(max_episode_steps=20, action={"gripper": True})
    env.reset(seed=0)
    op = Operator(env)
    op.send(AWAY)
    _, _, _, _, info = env.step(np.zeros(4, np.float32)).gym()
    assert info["executed_action"].tolist() == [1.0, 0.0, 0.0, 1.0]  # the episode starts open
    op.send(REPORTS[7], REPORTS[8])  # LEFT pressed and released: close
    _, _, _, _, info = env.step(np.zeros(4, np.float32)).gym()
    assert info["executed_action"][3] == -1.0
    _, _, _, _, info = env.step(np.ones(4, np.float32)).gym()
    assert info["executed_action"][3] == -1.0  # kept until the next press, whatever the client sends


def test_the_terminal_keyboard_drives_the_env_and_ends_the_episode_with_its_success_key(env):
    import os

    from drivers.teleop.keyboard import TerminalKeyboard

    master, slave = os.openpty()
    keyboard = TerminalKeyboard(slave, hold_s=10.0)
    env.takeover = Takeover(keyboard, TeleopConfig(device="keyboard"), (3,))
    env.takeover.open()
    try:

        def press(keys):
            target = keyboard.reports + 1
            os.write(master, keys.encode())
            assert keyboard.wait_reports(target, 2.0)

        press("w")
        _, _, _, _, info = env.step(np.array([0.0, -1.0, 0.0], np.float32)).gym()
        assert info["intervened"] and info["executed_action"].tolist() == [1.0, 0.0, 0.0]
        assert info["teleop_events"] == ["takeover"]
        press("y")
        _, _, terminated, _, info = env.step(np.zeros(3, np.float32)).gym()
        assert terminated and info["success"] and info["operator_label"] == "success"
    finally:
        env.takeover.close()
        os.close(master)
        os.close(slave)
