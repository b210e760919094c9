"""Clients of the env service. This module is the stable import path for them; each job has its module:

- `RemoteEnv` (rlhw.env.remote_env): a gymnasium.Env backed by one env server;
- `RemoteVectorEnv` (rlhw.env.remote_vector_env): one vector env over many servers;
- `probe_env_server` (rlhw.env.probe): a read-only check, for the smoke test and operators;
- the Session stream and its deadline watcher (rlhw.env.session_stream), the channel and its retry
  policy (rlhw.env.grpc_channel), spaces from a spec (rlhw.robot.gym.spaces_from_spec);
- the errors a call raises, below.

Those names are imported on first use (PEP 562), so that the modules above can import the errors
from here without an import cycle.
"""

from __future__ import annotations

import grpc

from rlhw._lazy import lazy_getattr
from rlhw.env.control import ControlConflict
from rlhw.errors import RlhwError


# ---------------------------------------------------------------------------------------------
# Errors


class EnvServiceError(RlhwError):
    """A call to an env server failed. ``code`` is the gRPC status code name, ``address`` the server."""

    def __init__(self, address: str, message: str, code: str = ""):
        self.address = address
        self.code = code
        super().__init__(f"env server {address}: {message}")


class EnvServerUnavailable(EnvServiceError):
    """The server cannot be reached (not started, restarting, network down)."""


class EnvTimeout(EnvServiceError):
    """A call passed its deadline. The arm keeps its last target until the server's watchdog stops it."""


class InvalidAction(EnvServiceError):
    """The server rejected the request; ``field`` names the offending field (e.g. ``action[3]``)."""

    def __init__(self, address: str, message: str, field: str = ""):
        self.field = field
        super().__init__(address, message, "INVALID_ARGUMENT")


class ControlConflictError(EnvServiceError, ControlConflict):
    """Another session controls the arm (FAILED_PRECONDITION from the server)."""


class SafetyLocked(EnvServiceError):
    """The env's safety layer refused (e.g. it locked itself after a fault); see the message for the fix."""


class Unauthenticated(EnvServiceError):
    """Missing or wrong token."""


class RemoteRobotFault(EnvServiceError):
    """The env raised a robot fault the server could not turn into a truncated episode (ABORTED)."""


def _field_of(message: str) -> str:
    head = message.split(":", 1)[0]
    return head if head and " " not in head else ""


def _error(address: str, code: grpc.StatusCode | None, message: str, field: str = "") -> EnvServiceError:
    name = code.name if code is not None else "UNKNOWN"
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidAction(address, message, field or _field_of(message))
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        if message.startswith("arm is controlled by session"):
            return ControlConflictError(address, message, name)
        if message.startswith("safety:"):
            return SafetyLocked(address, message, name)
        return EnvServiceError(address, message, name)
    if code == grpc.StatusCode.UNAVAILABLE:
        return EnvServerUnavailable(address, message, name)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return EnvTimeout(address, message, name)
    if code == grpc.StatusCode.UNAUTHENTICATED:
        return Unauthenticated(address, message, name)
    if code == grpc.StatusCode.ABORTED:
        return RemoteRobotFault(address, message, name)
    return EnvServiceError(address, message, name)


def _from_rpc_error(address: str, e: grpc.RpcError) -> EnvServiceError:
    code = e.code() if hasattr(e, "code") else None
    details = e.details() if hasattr(e, "details") else str(e)
    return _error(address, code, details or str(code))


_CODES = {c.value[0]: c for c in grpc.StatusCode}


# ---------------------------------------------------------------------------------------------
# The clients, each in its own module

_CLIENTS = {
    "RemoteEnv": "rlhw.env.remote_env",
    "RemoteVectorEnv": "rlhw.env.remote_vector_env",
    "probe_env_server": "rlhw.env.probe",
    "spaces_from_spec": "rlhw.robot.gym",
}

__getattr__ = lazy_getattr(__name__, _CLIENTS)
