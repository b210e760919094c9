"""The tags of the driver process's replies on its pipes (drivers.franka.child -> drivers.franka.arm).

A module of its own so that the parent can read replies without importing the child's module:
``python -m drivers.franka.child`` must not find itself already imported through the package.
"""

from __future__ import annotations


class Reply:
    """First element of each reply tuple."""

    OK = "ok"  # ("ok", value)
    FAULT = "fault"  # ("fault", FaultKind, message): a RobotFault in the parent
    BUG = "bug"  # ("bug", message with traceback): not a fault of the arm; a WorkerError in the parent
