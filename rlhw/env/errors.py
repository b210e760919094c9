"""The exceptions a client of the env service raises, and the one function that chooses them.

The class is chosen from the gRPC status code and the server's typed `ErrorReason` (in-band
``Error.reason`` on the Session stream; trailing metadata ``rlhw-error-reason`` on unary calls, with
``rlhw-error-field`` naming the request field at fault), never from the message text, which is for
people and may change. A server too old to send a reason gets the class its status code implies.
"""

from __future__ import annotations

import grpc

from rlhw.env import codec
from rlhw.env.control import ControlConflict
from rlhw.env.v1 import env_pb2 as pb
from rlhw.errors import ErrorReason, RlhwError


class EnvServiceError(RlhwError):
    """A call to an env server failed. ``code`` is the gRPC status code name, ``address`` the server,
    ``reason`` the server's `ErrorReason` (None when it sent none)."""

    def __init__(self, address: str, message: str, code: str = "", reason: ErrorReason | None = None):
        self.address = address
        self.code = code
        self.reason = reason
        super().__init__(f"env server {address}: {message}")


class EnvServerUnavailable(EnvServiceError):
    """The server cannot be reached (not started, restarting, network down)."""


class EnvTimeout(EnvServiceError):
    """A call passed its deadline. The arm keeps its last target until the server's watchdog stops it."""


class InvalidAction(EnvServiceError):
    """The server rejected the request; ``field`` names the offending field (e.g. ``action[3]``)."""

    def __init__(self, address: str, message: str, field: str = "", reason: ErrorReason | None = None):
        self.field = field
        super().__init__(address, message, "INVALID_ARGUMENT", reason)


class ControlConflictError(EnvServiceError, ControlConflict):
    """Another session controls the arm (FAILED_PRECONDITION, reason CONTROLLED_BY_OTHER)."""


class SafetyLocked(EnvServiceError):
    """The env's safety layer refused (e.g. it locked itself after a fault); see the message for the fix."""


class EpisodeEnded(SafetyLocked):
    """A step without an active episode (it ended, or the env is closed): call reset()."""


class Unauthenticated(EnvServiceError):
    """Missing or wrong token."""


class RemoteRobotFault(EnvServiceError):
    """The env raised a robot fault the server could not turn into a truncated episode (ABORTED)."""


_BY_CODE: dict[grpc.StatusCode, type[EnvServiceError]] = {
    grpc.StatusCode.UNAVAILABLE: EnvServerUnavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: EnvTimeout,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
    grpc.StatusCode.ABORTED: RemoteRobotFault,
}
#: FAILED_PRECONDITION is several situations; the reason tells them apart.
_PRECONDITION_BY_REASON: dict[ErrorReason, type[EnvServiceError]] = {
    ErrorReason.CONTROLLED_BY_OTHER: ControlConflictError,
    ErrorReason.SAFETY_LOCKED: SafetyLocked,
    ErrorReason.SAFETY_REFUSED: SafetyLocked,
    ErrorReason.EPISODE_ENDED: EpisodeEnded,
}
_CODES = {c.value[0]: c for c in grpc.StatusCode}


def _error(
    address: str, code: grpc.StatusCode | None, message: str, field: str = "", reason: ErrorReason | None = None
) -> EnvServiceError:
    """The client exception for a failed call: by status code, and for FAILED_PRECONDITION by reason."""
    name = code.name if code is not None else "UNKNOWN"
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return InvalidAction(address, message, field, reason)
    if code == grpc.StatusCode.FAILED_PRECONDITION:
        cls = _PRECONDITION_BY_REASON.get(reason, EnvServiceError)
    else:
        cls = _BY_CODE.get(code, EnvServiceError)
    return cls(address, message, name, reason)


def error_from_message(address: str, error: pb.Error) -> EnvServiceError:
    """The client exception for an in-band ``Error`` of the Session stream."""
    return _error(address, _CODES.get(error.code), error.message, error.field, codec.reason_from_wire(error.reason))


def error_from_rpc(address: str, e: grpc.RpcError) -> EnvServiceError:
    """The client exception for a failed call (its reason and field from the trailing metadata)."""
    code = e.code() if hasattr(e, "code") else None
    details = e.details() if hasattr(e, "details") else str(e)
    trailing = dict(e.trailing_metadata() or ()) if hasattr(e, "trailing_metadata") else {}
    reason = codec.reason_from_wire(trailing.get(codec.REASON_METADATA_KEY))
    return _error(address, code, details or str(code), trailing.get(codec.FIELD_METADATA_KEY, ""), reason)


__all__ = [
    "EnvServiceError",
    "EnvServerUnavailable",
    "EnvTimeout",
    "InvalidAction",
    "ControlConflictError",
    "SafetyLocked",
    "EpisodeEnded",
    "Unauthenticated",
    "RemoteRobotFault",
    "error_from_message",
    "error_from_rpc",
]
