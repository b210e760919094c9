"""What a `RobotEnv` does with a `RobotFault`: stop, recover what can be recovered, and say what happened.

The safety layer stops the arm and runs the recovery (rlhw/robot/safety.py: strikes, then a lock). What is
recovered here is what the env owns: cameras that stalled are reopened; a dead teleop device needs nothing now
(the arm is stopped and fine; the device is reopened at the next reset). Every other kind has the safety
layer's recovery alone. A step cut by a fault reports its `FaultKind`, or, when the safety layer locked,
``FaultKind.LOCKED`` with the kind that led to it as its ``fault_cause`` (`StepNotes`, rlhw/robot/step.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from rlhw.config.env import EnvConfig
from rlhw.errors import FaultKind, RobotFault
from rlhw.robot.camera import Camera
from rlhw.robot.safety import SafetyLayer


class FaultHandler:
    """Hands faults to the safety layer with the env's recoveries; ``last`` is the latest, for ``status()``."""

    def __init__(self, safety: SafetyLayer, cameras: Mapping[str, Camera], config: EnvConfig):
        self.safety, self.cameras, self.config = safety, cameras, config
        self.last: dict[str, Any] | None = None

    def recovery_for(self, fault: RobotFault) -> Callable[[], bool] | None:
        if fault.kind is FaultKind.TELEOP:
            return lambda: True  # the arm is stopped and fine; the device is reopened at the next reset
        if fault.kind is not FaultKind.CAMERA_STALL:
            return None

        def reopen() -> bool:
            for cam in self.cameras.values():
                cam.close()
                cam.open(timeout_s=self.config.connect_timeout_s)
            return True

        return reopen

    def handle(self, fault: RobotFault) -> None:
        """Stop and recover (the safety layer), and keep the record."""
        record = self.safety.handle_fault(fault, self.recovery_for(fault))
        self.last = {
            "kind": fault.kind,
            "message": str(fault),
            "time": record.time,
            "recovered": record.recovered,
            "attempts": record.attempts,
        }

    def reported(self, fault: RobotFault) -> tuple[FaultKind, str, FaultKind | None]:
        """The fault a handled step reports: (kind, message, cause), ``LOCKED`` with the ``fault`` that led to it as
        the cause when the safety layer locked (else no cause)."""
        if self.safety.locked:
            return FaultKind.LOCKED, self.safety.lock_reason, fault.kind
        return fault.kind, str(fault), None
