"""The operator next to the arm: which action a `RobotEnv` step executes, the client's or the operator's.

`Takeover` owns the env's teleop device (``env.teleop``). Once per step, before anything is commanded,
``choose(client_action)`` reads the device (bounded by ``env.teleop.read_timeout_s``) and returns a
`Choice`: the action that will go to the task and the safety layer, whether the operator intervened, and
the operator's events. Both actions take the same path afterwards, so the operator gets the same
workspace, step, velocity and gripper limits as the policy.

Rules:

- the operator's action is used while the reading is ``active`` (or always, with
  ``env.teleop.always_active``, as in ``rlhw record-demos``);
- the operator's action: the twist's linear part (the tasks hold the hand's orientation, so the angular
  part is not used), plus, when the action has a gripper component, the device's gripper command, or
  the last one given (the episode starts open, +1, as the reset opens the gripper);
- SUCCESS / FAILURE / END_EPISODE end the episode (the env reports ``operator_label``);
- when the success classifier ends an episode the env asks ``verdict()`` after the step's command, and commands
  nothing until the answer: the device's own, bounded by ``env.teleop.verdict_timeout_s`` (a person's device waits
  for a key; the scripted expert answers at once);
- a dead device raises ``RobotFault(FaultKind.TELEOP)`` from ``choose``: the env stops the arm and truncates the
  episode (fault path); ``reopen`` at the next reset tries once more and fails with a clear error.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rlhw.config.env import TeleopConfig
from rlhw.errors import FaultKind, RobotFault
from rlhw.robot.registry import teleop_class
from rlhw.robot.teleop import OperatorView, TeleopDevice, TeleopEvent

LABELS = {TeleopEvent.SUCCESS: "success", TeleopEvent.FAILURE: "failure", TeleopEvent.END_EPISODE: None}


@dataclass(frozen=True)
class Choice:
    """What one step executes, and why."""

    action: np.ndarray  # float32, the action's shape: what goes to the task and safety layer
    intervened: bool  # the operator's action was executed
    events: tuple[TeleopEvent, ...]  # the operator's events seen this step (sorted by name)
    ends_episode: bool  # a SUCCESS / FAILURE / END_EPISODE event came in
    label: str | None  # "success" / "failure" when the operator marked the episode


class Takeover:
    """The env's teleop device and the rule that picks the executed action."""

    def __init__(self, device: TeleopDevice, config: TeleopConfig, action_shape: tuple[int, ...]):
        self.device = device
        self.config = config
        self.action_shape = tuple(action_shape)
        self.gripper = 1.0
        self.opened = False

    @classmethod
    def from_config(cls, config: TeleopConfig, view: OperatorView) -> Takeover | None:
        """None for ``device: none``; else the device registered under that name (its module is imported
        only now, through the driver registry), built for the operator at ``view`` (what a person may see and do)."""
        if config.device == "none":
            return None
        device = teleop_class(config.device).from_config(config, view)
        return cls(device, config, view.action_shape)

    @property
    def operator(self):
        """Who drives the device (its declared `rlhw.robot.teleop.Operator`): the env paces a simulation for a person."""
        return self.device.operator

    def open(self) -> None:
        self.device.open(timeout_s=self.config.open_timeout_s)
        self.opened = True

    def reopen(self) -> None:
        """At reset: reopen a device that died (a live one is left alone). Raises RobotFault(FaultKind.TELEOP).

        The check is a read, which also drops events given between episodes: a late "success" key
        must not end the next episode at its first step."""
        try:
            self.device.read(timeout_s=self.config.read_timeout_s)
            return
        except RobotFault:
            pass
        self.device.close()
        try:
            self.open()
        except RobotFault as e:
            raise RobotFault(
                FaultKind.TELEOP,
                f"the teleop device ({self.config.device}) is still gone at reset: {e}; "
                "reconnect it, or set env.teleop.device=none to run without an operator",
            ) from e

    def start_episode(self) -> None:
        self.gripper = 1.0

    def close(self) -> None:
        self.device.close()

    def verdict(self) -> bool | None:
        """The operator's verdict on a success the classifier called (`TeleopDevice.verdict`), within
        ``env.teleop.verdict_timeout_s``; None: not judged."""
        return self.device.verdict(timeout_s=self.config.verdict_timeout_s)

    def choose(self, client_action: np.ndarray) -> Choice:
        reading = self.device.read(timeout_s=self.config.read_timeout_s)
        events = tuple(sorted(reading.events, key=lambda e: e.value))
        ending = [e for e in events if e in LABELS]
        label = next((LABELS[e] for e in ending if LABELS[e] is not None), None)
        if reading.gripper is not None:
            self.gripper = float(np.clip(reading.gripper, -1.0, 1.0))
        if not (reading.active or self.config.always_active):
            return Choice(client_action, False, events, bool(ending), label)
        action = np.zeros(self.action_shape, dtype=np.float32)
        n = min(3, action.shape[0])
        action[:n] = np.clip(reading.twist[:n], -1.0, 1.0)
        if action.shape[0] > 3:
            action[3] = self.gripper
        return Choice(action, True, events, bool(ending), label)
