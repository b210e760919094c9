"""The exceptions a user meets. Each message names the thing that is wrong and how to fix it."""

from __future__ import annotations


class RlhwError(Exception):
    """Base of every error rlhw raises on purpose (as opposed to a bug)."""


class ConfigError(RlhwError, ValueError):
    """A config, placement string or CLI value is invalid.

    ``path`` is the dotted location of the offending field, e.g.
    ``cluster.node_groups[2].env_configs[0].node_ranks``; the CLI prints ``path: message`` and exits 2.
    """

    def __init__(self, path: str, message: str):
        self.path = path
        self.message = message
        super().__init__(f"{path}: {message}" if path else message)


class PlacementError(ConfigError):
    """A placement string or placement rule is violated."""


class HardwareError(RlhwError):
    """Detected hardware does not match the config (missing robot, camera or GPU)."""


class WorkerError(RlhwError):
    """A remote worker raised, died or did not answer in time. The message names its address."""

    def __init__(self, address: str, message: str, remote_traceback: str | None = None):
        self.address = address
        self.remote_traceback = remote_traceback
        text = f"worker {address}: {message}"
        if remote_traceback:
            text += f"\n--- remote traceback ({address}) ---\n{remote_traceback}"
        super().__init__(text)


class RobotFault(RlhwError):
    """A recoverable fault reported by an arm or camera driver.

    ``kind`` is one of ``reflex``, ``timeout``, ``network``, ``hang``, ``limit``, ``camera_stall``,
    ``not_connected``, ``contact`` (the measured external wrench is over the bound), ``stopped`` (a blocking call interrupted by stop()), ``teleop`` (the operator's
    device went away); environments turn it into a truncated episode with ``info["fault"]``.
    """

    def __init__(self, kind: str, message: str):
        self.kind = kind
        super().__init__(f"{kind}: {message}")


class SafetyViolation(RlhwError):
    """A command was refused by the safety layer (NaN/inf, or the env has locked itself)."""
