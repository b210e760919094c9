"""Settings of one smoke test run (from the CLI flags), validated once here."""

from __future__ import annotations

import os
from dataclasses import dataclass

from rlhw.errors import ConfigError

#: Groups of checks, as --checks names them.
CHECK_GROUPS = ("nodes", "robots", "cameras", "env-server")


@dataclass(frozen=True)
class SmokeOptions:
    """``motion``: "allowed" (operator confirmed, or --yes), "off" (not asked), or a refusal reason.

    ``timeout_s`` bounds every single check (a dead robot or camera FAILs within it);
    ``window_s`` is how long streaming checks watch (camera fps/drops, robot state stream);
    ``server_start_s`` bounds starting an env server child process (imports, simulator build).
    """

    node_group: str | None = None
    robot: int | None = None
    motion: str = "off"
    timeout_s: float = 10.0
    window_s: float = 3.0
    server_start_s: float = 60.0
    env_server: str | None = None
    checks: tuple[str, ...] = CHECK_GROUPS
    config_path: str | None = None
    overrides: tuple[str, ...] = ()
    motion_m: float = 0.015
    ray_address: str | None = None
    #: (serial, recording) pairs: check that camera's pipeline on a recording (.db3) instead of the device
    camera_playback: tuple[tuple[str, str], ...] = ()
    #: run node N's checks in this process, without Ray (an operator on the robot PC of a big cluster)
    local_node: int | None = None

    def __post_init__(self):
        if not self.timeout_s > 0:
            raise ConfigError("--timeout", f"must be > 0 seconds, got {self.timeout_s}")
        if not 0 < self.window_s <= 60:
            raise ConfigError("--window", f"must be in (0, 60] seconds, got {self.window_s}")
        if not self.server_start_s > 0:
            raise ConfigError("--server-start-timeout", f"must be > 0 seconds, got {self.server_start_s}")
        if self.robot is not None and self.robot < 0:
            raise ConfigError("--robot", f"must be >= 0 (a Franka rank within its node group), got {self.robot}")
        if not 0.002 <= self.motion_m <= 0.03:
            raise ConfigError("--motion-cm", f"the test motion must be 0.2-3 cm, got {self.motion_m * 100:g} cm")
        if self.local_node is not None and self.local_node < 0:
            raise ConfigError("--local-node", f"must be a node rank >= 0, got {self.local_node}")
        for serial, path in self.camera_playback:
            if not os.path.isfile(path):
                raise ConfigError(
                    "--camera-playback",
                    f"{serial}={path}: no such file (record one with pyrealsense2's recorder, .db3)",
                )
        unknown = [c for c in self.checks if c not in CHECK_GROUPS]
        if unknown or not self.checks:
            raise ConfigError("--checks", f"unknown check group(s) {unknown}; choose from {', '.join(CHECK_GROUPS)}")

    @property
    def motion_allowed(self) -> bool:
        return self.motion == "allowed"

    def motion_refusal(self) -> str:
        """Why motion checks are skipped (for the SKIP row)."""
        if self.motion == "off":
            return "pass --allow-motion to run it"
        return self.motion

    def wants(self, group: str) -> bool:
        return group in self.checks
