"""Hints for common failures: what an operator should try next, keyed on the failure's text.

The rules are ordered: the first that matches wins, so specific causes (a firmware mismatch says
"version") come before generic ones (a network error). Each hint names a concrete action.
"""

from __future__ import annotations

import re

REALTIME_KERNEL = (
    "this kernel has no PREEMPT_RT: install a realtime kernel on the robot PC (libfranka needs it), "
    "or set controller.realtime: ignore for franky-sim only"
)
VERSION_MISMATCH = (
    "libfranka/firmware mismatch: install the franky-control build whose libfranka matches the robot's "
    "system version (Desk > Settings > System), or update the robot"
)
ROBOT_UNREACHABLE = (
    "robot not reachable: check the Ethernet cable to the control box (not the arm base), the PC's static IP "
    "in the robot's subnet, robot_ip in the config, and that FCI is activated in Desk (brakes open)"
)
USB2_LINK = (
    "camera on a USB 2 link: plug it into a USB 3 port with a USB 3 cable (USB 2 cannot carry the configured "
    "resolution/fps; frames drop)"
)
CAMERA_MISSING = (
    "camera not found: check its USB cable, compare the serial with `rs-enumerate-devices -s`, and that no other "
    "process (realsense-viewer) holds it"
)

_RULES: list[tuple[re.Pattern, str]] = [
    (
        re.compile(
            r"IncompatibleVersion|incompatible.*version|version.*(mismatch|incompatible)|libfranka.*version", re.I
        ),
        VERSION_MISMATCH,
    ),
    (re.compile(r"realtime|PREEMPT", re.I), REALTIME_KERNEL),
    (re.compile(r"USB ?2", re.I), USB2_LINK),
    (
        re.compile(r"libusb", re.I),
        "install the system libusb (Debian/Ubuntu: apt install libusb-1.0-0) for pyrealsense2",
    ),
    (re.compile(r"RealSense serials|camera .* is not connected|no RealSense device", re.I), CAMERA_MISSING),
    (
        re.compile(r"camera_stall|no new frame|no frame within|stalled", re.I),
        "the camera stopped delivering frames: check the USB link (USB 3, short cable, powered hub), lower fps/resolution",
    ),
    (
        re.compile(r"user.?stop|UserStopped", re.I),
        "release the user stop (external activation device) and run the smoke test again",
    ),
    (
        re.compile(r"reflex", re.I),
        "the arm is in a reflex: clear it (automatic error recovery, or Desk) and check for collisions",
    ),
    (
        re.compile(r"Unauthenticated|token", re.I),
        "the env server wants a token: set server.token_env's variable (RLHW_ENV_TOKEN)",
    ),
    (
        re.compile(r"env server .*(unreachable|UNAVAILABLE)|serve-env", re.I),
        "is `rlhw serve-env` running at that address (and on this network)?",
    ),
    (
        re.compile(
            r"1337|FCI|UDP receive|network:|NetworkException|cannot reach|No route|Connection refused|unreachable", re.I
        ),
        ROBOT_UNREACHABLE,
    ),
    (
        re.compile(r"did not (finish|answer)|hang|timed? ?out", re.I),
        "the device stopped answering within the timeout: power-cycle it or check its link, then rerun",
    ),
]


def hint_for(text: str) -> str:
    """The hint for a failure message, or "" when no rule knows it."""
    for pattern, hint in _RULES:
        if pattern.search(text or ""):
            return hint
    return ""
