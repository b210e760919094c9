"""The Franka Hand inside the driver process: one thread executes the most recent width target.

franky-sim hangs when a gripper command is issued while one is running, and an RL loop sends the
same target at every step: so commands only update a latest-target slot, and the thread issues a
new command when the previous one has finished and the target moved by more than the deadband.
"""

from __future__ import annotations

import threading
import time

#: Closing commands at or below this width grasp (hold whatever is between the fingers) instead
#: of moving to a width, which would fail as soon as an object blocks the fingers.
GRASP_BELOW_M = 0.005
#: Width changes smaller than this are not sent: a policy's gripper output jitters every step.
GRIPPER_DEADBAND_M = 0.001


class GripperWorker:
    """Owns franky.Gripper; executes the most recent target on a thread, never two at once."""

    def __init__(self, gripper, speed: float, force: float):
        self.gripper = gripper
        self.max_width = float(gripper.max_width)
        self.speed = speed
        self.force = force
        self._cv = threading.Condition()
        self._target: float | None = None
        self._issued: float | None = None
        self.busy_since: float | None = None
        self.last_error: str | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="gripper", daemon=True)
        self._thread.start()

    def command(self, width: float) -> None:
        with self._cv:
            if self.last_error is not None:
                err, self.last_error = self.last_error, None
                raise RuntimeError(err)
            self._target = width
            self._cv.notify()

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._closed and (
                    self._target is None
                    or (self._issued is not None and abs(self._target - self._issued) < GRIPPER_DEADBAND_M)
                ):
                    self._cv.wait(0.5)
                if self._closed:
                    return
                width = self._target
                self._issued = width
                self.busy_since = time.monotonic()
            try:
                if width <= GRASP_BELOW_M:
                    # Grasp succeeds at any width between 0 and max: it holds an object or closes.
                    self.gripper.grasp(0.0, self.speed, self.force, epsilon_inner=0.005, epsilon_outer=self.max_width)
                else:
                    self.gripper.move(width, self.speed)
            except Exception as e:  # reported with the next command
                with self._cv:
                    self.last_error = f"gripper {type(e).__name__}: {e}"
            finally:
                self.busy_since = None

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()
