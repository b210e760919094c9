"""Franka Emika / FR3 arms driven through FCI (libfranka, via ``franky``).

One entry per arm: its FCI address, the node whose realtime kernel talks to it, the cameras
mounted on or around it, whether it has the Franka Hand, and controller options that the driver
passes to franky. Defaults are the cautious ones: slow motions and libfranka's default collision
thresholds.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from typing import ClassVar, Literal

from pydantic import Field, field_validator

from rlhw.hardware.registry import HardwareEntry, HardwareType, register_hardware
from rlhw.network import FCI_PORT, tcp_connect_problem
from rlhw.schema import StrictModel

_HOSTNAME = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*$"
)


class FrankaController(StrictModel):
    """How the driver talks to the arm: the ONE schema of the franka driver's options.

    Validated here, at the config edge (``hardware.configs[*].controller``); `drivers.franka.FrankaArm`
    receives this object as it is and checks nothing again.
    """

    realtime: Literal["enforce", "ignore"] = Field(
        "enforce",
        description="'enforce' on a real robot (needs a realtime kernel); 'ignore' for franky-sim or a non-RT test box",
    )
    relative_dynamics_factor: float = Field(
        0.1, gt=0.0, le=1.0, description="fraction of the arm's max velocity/acceleration/jerk used by motions"
    )
    collision_torque_thresholds_nm: tuple[float, float, float, float, float, float, float] = Field(
        (20.0, 20.0, 18.0, 18.0, 16.0, 14.0, 12.0), description="per-joint torque (Nm) above which the arm stops"
    )
    collision_force_thresholds_n: tuple[float, float, float, float, float, float] = Field(
        (20.0, 20.0, 20.0, 25.0, 25.0, 25.0), description="Cartesian force/torque (N, Nm) above which the arm stops"
    )
    joint_impedance: tuple[float, float, float, float, float, float, float] | None = Field(
        None, description="joint stiffness (Nm/rad) for the internal controller; None keeps franky's default"
    )
    cartesian_impedance: tuple[float, float, float, float, float, float] | None = Field(
        None, description="Cartesian stiffness (N/m, Nm/rad); None keeps franky's default"
    )
    control: Literal["motion", "impedance"] = Field(
        "motion",
        description="how Cartesian targets are tracked: 'motion' sends each as an asynchronous franky CartesianMotion "
        "(Ruckig, preempted by the next; bounded by relative_dynamics_factor); 'impedance' streams them into one "
        "compliant CartesianImpedanceTracker (stiffness below)",
    )
    translational_stiffness: float = Field(500.0, gt=0, allow_inf_nan=False, description="impedance control: N/m")
    rotational_stiffness: float = Field(50.0, gt=0, allow_inf_nan=False, description="impedance control: Nm/rad")
    gripper_speed: float = Field(0.1, gt=0, allow_inf_nan=False, description="Franka Hand finger speed (m/s)")
    gripper_force: float = Field(20.0, gt=0, allow_inf_nan=False, description="Franka Hand grasp force (N)")
    gripper_timeout_s: float = Field(
        5.0, gt=0, allow_inf_nan=False, description="a gripper command still running after this is a 'timeout' fault"
    )
    watchdog_s: float = Field(
        1.0,
        ge=0,
        allow_inf_nan=False,
        description="stop the arm when no Cartesian target arrived for this long while tracking (s); 0 disables",
    )

    @field_validator(
        "collision_torque_thresholds_nm", "collision_force_thresholds_n", "joint_impedance", "cartesian_impedance"
    )
    @classmethod
    def _positive(cls, value):
        if value is not None and any(v <= 0 for v in value):
            raise ValueError("every value must be positive")
        return value


class FrankaConfig(HardwareEntry):
    identity_field: ClassVar[str] = "robot_ip"
    robot_ip: str = Field(description="FCI address of the arm's control box (IPv4 or host name)")
    camera_serials: tuple[str, ...] = Field((), description="serials of the RealSense cameras that observe this arm")
    gripper: bool = Field(True, description="whether the Franka Hand is attached")
    controller: FrankaController = FrankaController()

    @field_validator("robot_ip", mode="before")
    @classmethod
    def _address(cls, value):
        if not isinstance(value, str):
            raise ValueError(f'robot_ip must be a quoted address such as "172.16.0.2", got {value!r}')
        value = value.strip()
        try:
            ipaddress.ip_address(value)
        except ValueError:
            if not _HOSTNAME.match(value) or value.replace(".", "").isdigit():
                raise ValueError(
                    f'{value!r} is neither an IP address nor a host name; write e.g. "172.16.0.2"'
                ) from None
        return value

    @field_validator("camera_serials", mode="before")
    @classmethod
    def _serials(cls, value):
        if isinstance(value, (list, tuple)):
            value = [str(v) if isinstance(v, int) and not isinstance(v, bool) else v for v in value]
            if len(set(value)) != len(value):
                raise ValueError("a camera serial is listed twice")
        return value


@register_hardware
class Franka(HardwareType):
    name: ClassVar[str] = "Franka"
    entry_model: ClassVar[type[HardwareEntry]] = FrankaConfig

    @classmethod
    def probe(cls, entries: Sequence[HardwareEntry], timeout_s: float) -> dict[str, str | None]:
        """TCP-connect to each arm's FCI port; this checks cabling and address, not FCI activation."""
        return {
            e.identity(): _with_hint(tcp_connect_problem(e.robot_ip, FCI_PORT, timeout_s))  # type: ignore[attr-defined]
            for e in entries
        }


def _with_hint(problem: str | None) -> str | None:
    return None if problem is None else f"{problem} (cable, address, control box off, or FCI not enabled in Desk?)"
