"""The `TeleopDevice` interface every teleop driver implements (SpaceMouse, terminal keyboard, scripted expert).

An operator drives the arm through the same action space as the policy: a reading's ``twist`` is
normalised to [-1, 1] per axis (full deflection), so its first three components map one to one onto
the env's hand-displacement action, and the same safety layer bounds both.

A device is read once per control step by whoever acts for the operator (the env's takeover,
``rlhw record-demos``). ``read`` never blocks longer than its bound: it returns the newest state the
device has reported, and raises ``RobotFault(FaultKind.TELEOP, ...)`` when the device has gone away (unplugged,
its reader thread died, no report within the device's own liveness bound), so a dead device stops the
arm instead of freezing the operator's last command.

A device is built from ``env.teleop`` and an `OperatorView`: what a person at the cell may see and do, and
nothing more. A person's device (SpaceMouse, keyboard) ignores it: the person has eyes. The scripted expert, a
program standing in for the person in simulation, sees through it: a `Sight` per step (the measured hand, the
task's goal as an operator knows it, the scene's objects a person would see) and the task's `Expert`. Neither
reads the env, its task or its simulator; the policy, the replay and the reward never see what a `Sight` holds.
"""

from __future__ import annotations

import abc
import enum
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, TextIO

import numpy as np

if TYPE_CHECKING:
    from rlhw.config.env import TeleopConfig


_operator_lines: TextIO | None = None  # where `tell_operator` writes; None: this process's stderr


def tell_operator(text: str) -> None:
    """A line for the person at the operator's device (a verdict's question, its answer): on this process's
    console (stderr: stdout may carry a command's output), or on the pipe `send_operator_lines_to` named."""
    print(text, file=_operator_lines or sys.stderr, flush=True)


def send_operator_lines_to(stream: TextIO) -> None:
    """Send `tell_operator`'s lines to ``stream``. Why: a served arm's `rlhw serve-env` child writes its output to
    a log file nobody reads while the arm runs; its parent (an env worker, `rlhw eval`) passes ``--operator-fd``
    and echoes what arrives there on its own console, so the person at a served cell sees the question."""
    global _operator_lines
    _operator_lines = stream


class Operator(enum.Enum):
    """Who drives a teleop device: what a simulated env must do about time.

    A person needs the arm to move at the control rate (``env.control_hz``): a simulated env stepped as fast as
    the CPU allows would run a whole episode before the first key press. A program (the scripted expert)
    reads the simulator's state and needs no wall clock, so a simulated env with it runs as fast as it can.
    """

    HUMAN = "human"
    PROGRAM = "program"


class TeleopEvent(enum.Enum):
    """Operator intents carried by button or key presses (edges, reported once)."""

    TAKEOVER = "takeover"  # the operator takes control from the policy
    GIVE_BACK = "give_back"  # the operator hands control back to the policy
    SUCCESS = "success"  # mark the episode a success and end it
    FAILURE = "failure"  # mark the episode a failure and end it
    END_EPISODE = "end_episode"  # end the episode without a label


@dataclass(frozen=True)
class TeleopReading:
    """One reading of a teleop device.

    ``twist``: (6,) float32 in [-1, 1]: hand linear (x, y, z) then angular (x, y, z) command in the
    robot's base frame, as a fraction of full deflection. ``gripper``: the action's gripper
    convention (-1 closes, +1 opens fully), or None for "no gripper command". ``buttons``: raw button
    states in device order. ``events``: intents since the previous read. ``active``: the operator is
    commanding the arm now (the device's own rule: a SpaceMouse deflected past its deadband, the
    keyboard in takeover mode, the scripted expert intervening). ``timestamp``: wall-clock time
    (``time.time()``) of the newest device report this reading reflects.
    """

    twist: np.ndarray
    gripper: float | None
    buttons: tuple[bool, ...]
    events: frozenset[TeleopEvent]
    active: bool
    timestamp: float


@dataclass(frozen=True)
class Sight:
    """What an operator at the cell sees at one step of an episode.

    ``hand``: the measured hand (TCP) position (m, base frame), as the arm last reported it. ``goal``: the task's
    goal position as an operator knows it (the reach target, the tape on the table, the hole). ``objects``: the
    positions of the scene's objects a person sees (push_cube: the cube), read from the simulator for a scripted
    stand-in; empty where the task names none. ``sees_success``: the operator sees the task done
    (`Task.operator_sees_success`, a person's eyes, which no sensor of a real cell would give the policy);
    ``sees_failure``: the operator sees the task plainly not done (`Task.operator_sees_failure`).
    ``episode`` counts the env's episodes (a new number: a new episode) and ``step`` the steps of this one.
    """

    episode: int
    step: int
    hand: np.ndarray
    goal: np.ndarray
    objects: Mapping[str, np.ndarray] = field(default_factory=dict)
    sees_success: bool = False
    sees_failure: bool = False


@dataclass(frozen=True)
class Aim:
    """Where an operator moves the hand now: a target position (m, base frame) and the gripper (-1 closes, +1 opens)."""

    target: np.ndarray
    gripper: float = 1.0


@dataclass(frozen=True)
class Expert:
    """A task's scripted stand-in for a person: where it aims the hand, and how it judges a policy's progress (intervene
    mode: higher is better), both from a `Sight` alone. Each task registers its own (rlhw/robot/tasks)."""

    aim: Callable[[Sight], Aim]
    progress: Callable[[Sight], float]


class OperatorView(Protocol):
    """What a person or a scripted stand-in may see and do at one env: the only thing a device is built with.

    ``seed``: the env's seed (the instances of a batched env differ). ``rehearsal``: a simulator rehearses a real
    cell (``env.sim_state: hidden``), where an operator marks success as a person presses a key. The command
    channel: a device's reading, whose twist of 1 moves the hand ``action_scale_m`` in a step; ``action_shape`` is
    the action's. ``look()``: the `Sight` now, None between episodes. ``expert()``: the task's `Expert`
    (ConfigError naming ``env.teleop.device`` when the task has none)."""

    @property
    def seed(self) -> int: ...

    @property
    def rehearsal(self) -> bool: ...

    @property
    def action_scale_m(self) -> float: ...

    @property
    def action_shape(self) -> tuple[int, ...]: ...

    def look(self) -> Sight | None: ...

    def expert(self) -> Expert: ...


class TeleopDevice(abc.ABC):
    """A 6-DoF input device with a gripper command and buttons."""

    name: str = "teleop"
    #: who drives it (a class's declaration, read by the env: see `Operator`); a person unless a device says
    #: otherwise, so a new device is paced until it declares itself a program.
    operator: Operator = Operator.HUMAN

    @classmethod
    def from_config(cls, config: TeleopConfig, view: OperatorView) -> TeleopDevice:
        """The device that ``env.teleop`` describes, for the operator at ``view`` (the registry's constructor: a
        device registered with ``@register_teleop`` implements it; it reads its own fields of ``config``)."""
        raise NotImplementedError(f"{cls.__qualname__} cannot be built from env.teleop; implement from_config")

    @abc.abstractmethod
    def open(self, timeout_s: float = 5.0) -> None:
        """Find and open the device. Raises RobotFault(FaultKind.TELEOP) when it is absent or unreadable."""

    @abc.abstractmethod
    def close(self) -> None:
        """Release the device. Safe to call twice."""

    @abc.abstractmethod
    def read(self, timeout_s: float = 0.05) -> TeleopReading:
        """The newest state, within ``timeout_s``. Raises RobotFault(FaultKind.TELEOP) when the device is gone."""

    def verdict(self, timeout_s: float) -> bool | None:
        """The operator's verdict on the episode the success classifier has just called done: True (it is), False
        (it is not: a false success, whose frames become the classifier's negatives, `rlhw.rl.classifier_refresh`)
        or None (not judged: the classifier's call stands). A person's device asks on the console and waits at most
        ``timeout_s`` (``env.teleop.verdict_timeout_s``) for a key or button (drivers/teleop/base.py); the scripted
        expert answers at once from its `Sight`. The default, for a device with nothing to answer with: None."""
        return None

    def __enter__(self) -> TeleopDevice:
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.close()


__all__ = ["Aim", "Expert", "Operator", "OperatorView", "Sight", "TeleopDevice", "TeleopEvent", "TeleopReading"]
