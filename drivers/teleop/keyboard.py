"""The terminal keyboard as a `TeleopDevice`, for labs without a SpaceMouse. No package: termios on a fd.

Keys (robot base frame; lower or upper case):

    w / s   hand +x / -x (away from / toward the robot base)
    a / d   hand +y / -y (left / right, seen from behind the arm)
    r / f   hand +z / -z (up / down)
    space   stop moving (drops every held motion key)
    c / o   close / open the gripper
    t       take over / give back (a motion key also takes over)
    y       mark the episode a success (ends it)
    n       mark the episode a failure (ends it)
    x       end the episode without a label

When the env asks for a verdict on a success its classifier called (`TeleopDevice.verdict`), ``y`` answers yes
and ``n`` no; every other key is ignored until the answer or ``env.teleop.verdict_timeout_s`` (the question stays
open: a stray key neither answers nor moves the arm later).

A terminal sends no key-up, only key repeats (about 30 per second while a key is held), so a motion
key moves the hand for ``hold_s`` after its last press; keep the key down to keep moving. ``active``
is the takeover mode (toggled by ``t``, switched on by any motion key).

The fd is put in cbreak mode (no line buffering, no echo) while open and restored on close. A reader
thread waits on it with ``select``; end of file or a read error (the terminal went away) kills the
device, and the next ``read`` raises ``RobotFault(FaultKind.TELEOP)``.
"""

from __future__ import annotations

import os
import select
import sys
import termios
import time
import tty
from collections.abc import Callable

import numpy as np

from drivers.teleop.base import ReaderThreadDevice
from rlhw.config.env import TeleopConfig
from rlhw.robot.registry import register_teleop
from rlhw.robot.teleop import Operator, OperatorView, TeleopEvent, TeleopReading

#: key -> (axis, direction) of the hand's linear motion
MOTION_KEYS = {"w": (0, 1.0), "s": (0, -1.0), "a": (1, 1.0), "d": (1, -1.0), "r": (2, 1.0), "f": (2, -1.0)}
EVENT_KEYS = {"y": TeleopEvent.SUCCESS, "n": TeleopEvent.FAILURE, "x": TeleopEvent.END_EPISODE}
#: key -> the verdict it gives while one is asked (the keys that mark an episode otherwise)
VERDICT_KEYS = {"y": True, "n": False}
GRIPPER_KEYS = {"c": -1.0, "o": 1.0}


@register_teleop("keyboard")
class TerminalKeyboard(ReaderThreadDevice):
    """Reads keys from ``fd`` (default: standard input)."""

    name = "keyboard"
    operator = Operator.HUMAN  # a person's hand: a simulated env paces itself at env.control_hz

    def __init__(
        self,
        fd: int | None = None,
        *,
        hold_s: float = 0.15,
        gain: float = 1.0,
        poll_s: float = 0.02,
        clock: Callable[[], float] = time.monotonic,
    ):
        super().__init__(clock)
        self.fd = sys.stdin.fileno() if fd is None else fd
        self.hold_s, self.gain, self.poll_s = hold_s, min(gain, 1.0), poll_s
        self._saved_mode = None
        self._reset_state()

    @classmethod
    def from_config(cls, config: TeleopConfig, view: OperatorView | None = None) -> TerminalKeyboard:
        return cls(hold_s=config.keyboard_hold_s, gain=config.gain)

    def _reset_state(self) -> None:
        self._pressed_at: dict[int, tuple[float, float]] = {}  # axis -> (direction, clock time)
        self._gripper: float | None = None
        self._takeover = False
        self._stamp = 0.0

    def _start(self, timeout_s: float) -> None:
        self._reset_state()
        if os.isatty(self.fd):
            self._saved_mode = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd)

    def _release(self) -> None:
        saved, self._saved_mode = self._saved_mode, None
        if saved is not None:
            try:
                termios.tcsetattr(self.fd, termios.TCSADRAIN, saved)
            except (termios.error, OSError):
                pass  # the terminal is gone; nothing to restore

    def _poll(self) -> None:
        ready, _, _ = select.select([self.fd], [], [], self.poll_s)
        if not ready:
            return
        data = os.read(self.fd, 64)  # OSError (EIO) when the terminal closed
        if not data:
            raise EOFError("the terminal closed (end of input)")
        with self._lock:
            for key in data.decode(errors="ignore").lower():
                self._key(key)
            self._stamp = self.now()
            self._note_report()

    def _answer_keys(self) -> str:
        return "Press y = yes, n = no"

    def _key(self, key: str) -> None:
        """One key press (under the lock)."""
        if self._asking:  # a verdict is asked: y / n answer, any other key does nothing
            if key in VERDICT_KEYS:
                self._give_verdict(VERDICT_KEYS[key])
            return
        if key in MOTION_KEYS:
            axis, direction = MOTION_KEYS[key]
            self._pressed_at[axis] = (direction, self.clock())
            self._set_takeover(True)
        elif key == " ":
            self._pressed_at.clear()
        elif key in GRIPPER_KEYS:
            self._gripper = GRIPPER_KEYS[key]
        elif key == "t":
            self._set_takeover(not self._takeover)
        elif key in EVENT_KEYS:
            self._emit(EVENT_KEYS[key])

    def _set_takeover(self, on: bool) -> None:
        if on != self._takeover:
            self._takeover = on
            self._emit(TeleopEvent.TAKEOVER if on else TeleopEvent.GIVE_BACK)
            if not on:
                self._pressed_at.clear()

    def _snapshot(self) -> TeleopReading:
        twist = np.zeros(6, dtype=np.float32)
        now = self.clock()
        for axis, (direction, t) in self._pressed_at.items():
            if now - t <= self.hold_s:
                twist[axis] = direction * self.gain
        return TeleopReading(twist, self._gripper, (), frozenset(), self._takeover, self._stamp)
