"""The `franka` arm driver: a real Franka FR3/Panda through franky-control (libfranka).

`FrankaArm` implements `rlhw.robot.arm.Arm`; franky itself runs in a driver process
(`drivers.franka.child`) so that a hung libfranka call can be killed. `probe` checks one robot
for the smoke test. Test it on one machine against franky-sim (`drivers.franky_sim.FrankySim`).
"""

from drivers.franka.arm import FrankaArm
from drivers.franka.probe import ProbeReport, probe

__all__ = ["FrankaArm", "ProbeReport", "probe"]
