"""The 3Dconnexion SpaceMouse as a `TeleopDevice`, read through pyspacemouse 2.1 (easyhid over libhidapi).

pyspacemouse does the decoding: its device table (``devices.toml``) says, per model, which HID report
channel and bytes carry each axis and which bit each button; ``SpaceMouseDevice.read`` pulls one report
from the HID handle and ``_process`` decodes it into ``SpaceMouseState`` (axes as raw / ``axis_scale``,
about [-1, 1]). We open the device the way ``pyspacemouse.open`` does (``api._create_and_open_device``
with the HID_Z_UP axis convention, non-blocking), so a recorded-report handle (drivers/teleop/recorded.py)
and a real easyhid handle go through the same code; only the USB enumeration differs.

On top of pyspacemouse this driver adds:

- frames: the device's HID_Z_UP frame (X right, Y away from the operator, Z up) is mapped to the robot
  base frame for an operator standing behind the arm, looking along the base +x axis:
  linear (x, y, z) = (dev_y, -dev_x, dev_z), angular = (dev_pitch, -dev_roll, dev_yaw);
- a deadband (deflections under ``deadband`` read 0; the rest is rescaled so the output is continuous)
  and a gain, then a clip to [-1, 1];
- buttons (two-button models: LEFT, RIGHT; Pro/Enterprise: BTN_1, BTN_2): the first toggles the gripper
  (first press closes, next opens...), the second toggles takeover (events TAKEOVER / GIVE_BACK).
  ``active`` is true while the cap is deflected past the deadband or takeover is latched on;
- the verdict (`TeleopDevice.verdict`, asked when the success classifier ends an episode): while asked, the first
  button answers yes and the second no (both pressed in one report answer nothing), and neither toggles anything;
  the cap's reports are taken as always.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from drivers.teleop.base import ReaderThreadDevice
from rlhw.config.env import TeleopConfig
from rlhw.errors import FaultKind, RobotFault
from rlhw.robot.registry import register_teleop
from rlhw.robot.teleop import Operator, OperatorView, TeleopEvent, TeleopReading

GRIPPER_BUTTONS = ("LEFT", "BTN_1")
TAKEOVER_BUTTONS = ("RIGHT", "BTN_2")


def device_spec(name: str):
    """pyspacemouse's decoding table entry for model ``name`` (e.g. "SpaceMouseCompact")."""
    from pyspacemouse.loader import get_device_specs

    specs = get_device_specs()
    if name not in specs:
        raise RobotFault(
            FaultKind.TELEOP, f"unknown SpaceMouse model {name!r}; pyspacemouse knows {', '.join(sorted(specs))}"
        )
    return specs[name]


def shape_axis(value: float, deadband: float, gain: float) -> float:
    """Deadband (continuous at its edge), gain, clip to [-1, 1]."""
    magnitude = abs(value)
    if magnitude <= deadband:
        return 0.0
    scaled = (magnitude - deadband) / (1.0 - deadband) * gain
    return float(np.copysign(min(scaled, 1.0), value))


@register_teleop("spacemouse")
class SpaceMouse(ReaderThreadDevice):
    """A SpaceMouse; ``hid_device`` replaces the USB enumeration with a given HID handle (recorded reports)."""

    name = "spacemouse"
    operator = Operator.HUMAN  # a person's hand: a simulated env paces itself at env.control_hz

    def __init__(
        self,
        model: str | None = None,
        *,
        deadband: float = 0.1,
        gain: float = 1.0,
        poll_s: float = 0.001,
        hid_device: Any = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        super().__init__(clock)
        if not 0 <= deadband < 1:
            raise ValueError(f"deadband must be in [0, 1), got {deadband}")
        self.model, self.deadband, self.gain, self.poll_s = model, deadband, gain, poll_s
        self._hid = hid_device
        self._mouse = None
        self._last_t = None
        self._reset_state()

    @classmethod
    def from_config(cls, config: TeleopConfig, view: OperatorView | None = None) -> SpaceMouse:
        return cls(config.spacemouse_name, deadband=config.deadband, gain=config.gain)

    def _reset_state(self) -> None:
        self._twist = np.zeros(6, dtype=np.float32)
        self._buttons: tuple[bool, ...] = ()
        self._gripper: float | None = None
        self._takeover = False
        self._stamp = 0.0

    # -- opening -------------------------------------------------------------------------------
    def _start(self, timeout_s: float) -> None:
        self._reset_state()
        box: dict[str, Any] = {}

        def attempt() -> None:
            try:
                box["mouse"] = self._open_mouse()
            except Exception as e:  # noqa: BLE001 - reported below as a teleop fault
                box["error"] = e

        opener = threading.Thread(target=attempt, name="spacemouse-open", daemon=True)
        opener.start()
        opener.join(timeout_s)
        if opener.is_alive():
            raise RobotFault(
                FaultKind.TELEOP, f"opening the SpaceMouse took over {timeout_s} s (env.teleop.open_timeout_s)"
            )
        if "error" in box:
            e = box["error"]
            raise RobotFault(
                FaultKind.TELEOP,
                f"no usable SpaceMouse ({type(e).__name__}: {e}); plug one in, check "
                "the hidraw permissions (udev rule), or set env.teleop.device",
            ) from e
        self._mouse = box["mouse"]
        self._last_t = -1.0  # SpaceMouseState.t before its first report
        self._gripper_button = self._button_index(GRIPPER_BUTTONS)
        self._takeover_button = self._button_index(TAKEOVER_BUTTONS)

    def _open_mouse(self):
        import pyspacemouse
        from pyspacemouse.api import _create_and_open_device
        from pyspacemouse.types import AxisConvention

        if self._hid is None:  # a real device: pyspacemouse enumerates USB HID devices
            return pyspacemouse.open(device=self.model, nonblocking=True, axis_convention=AxisConvention.HID_Z_UP)
        spec = device_spec(self.model or "SpaceMouseCompact")
        return _create_and_open_device(
            spec=spec, hid_device=self._hid, nonblocking=True, axis_convention=AxisConvention.HID_Z_UP
        )

    def _button_index(self, names: tuple[str, ...]) -> int | None:
        known = list(self._mouse.info.button_names)
        return next((known.index(n) for n in names if n in known), None)

    def _answer_keys(self) -> str | None:
        """The gripper button answers yes, the takeover button no (None on a model without both)."""
        if self._mouse is None or None in (self._gripper_button, self._takeover_button):
            return None
        names = self._mouse.info.button_names
        return f"Press {names[self._gripper_button]} = yes, {names[self._takeover_button]} = no"

    def _release(self) -> None:
        mouse, self._mouse = self._mouse, None
        if mouse is not None:
            try:
                mouse.close()
            except Exception:  # noqa: BLE001 - closing a vanished device may fail; nothing to do
                pass

    # -- reading -------------------------------------------------------------------------------
    def _poll(self) -> None:
        with self._lock:
            state = self._mouse.read()  # pyspacemouse: one HID report (non-blocking) -> decoded state
            fresh = state.t != self._last_t
            if fresh:
                self._last_t = state.t
                self._take(state)
        if not fresh:
            self._stop.wait(self.poll_s)

    def _take(self, state) -> None:
        """A decoded report -> twist (robot frame), buttons, edges -> events (under the lock)."""
        d, g = self.deadband, self.gain
        dev = [shape_axis(getattr(state, a), d, g) for a in ("x", "y", "z", "roll", "pitch", "yaw")]
        self._twist = np.array([dev[1], -dev[0], dev[2], dev[4], -dev[3], dev[5]], dtype=np.float32)
        buttons = tuple(bool(b) for b in state.buttons)
        before = self._buttons or (False,) * len(buttons)
        first, second = (self._pressed(b, before, buttons) for b in (self._gripper_button, self._takeover_button))
        if self._asking:  # a verdict is asked: the buttons answer and toggle nothing (both at once: no answer)
            if first != second:
                self._give_verdict(first)
        else:
            self._toggle(first, second)
        self._buttons = buttons
        self._stamp = self.now()
        self._note_report()

    def _toggle(self, gripper: bool, takeover: bool) -> None:
        """Presses of the first (gripper) and second (takeover) button, out of a verdict (under the lock)."""
        if gripper:
            self._gripper = 1.0 if self._gripper == -1.0 else -1.0
        if takeover:
            self._takeover = not self._takeover
            self._emit(TeleopEvent.TAKEOVER if self._takeover else TeleopEvent.GIVE_BACK)

    @staticmethod
    def _pressed(index: int | None, before: tuple[bool, ...], now: tuple[bool, ...]) -> bool:
        return index is not None and index < len(now) and now[index] and not before[index]

    def _snapshot(self) -> TeleopReading:
        active = self._takeover or bool(np.any(self._twist != 0.0))
        return TeleopReading(self._twist.copy(), self._gripper, self._buttons, frozenset(), active, self._stamp)
