"""The exceptions a user meets. Each message names the thing that is wrong and how to fix it."""

from __future__ import annotations

from enum import Enum


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


class FaultKind(str, Enum):
    """Why a driver ended an episode early: a closed set shared by drivers, the safety layer, the wire
    and the client (the proto's ``FaultKind``, ``FAULT_KIND_<NAME>``: one-to-one by name).

    A ``str`` enum, so ``info["fault"] == "camera_stall"`` still reads and compares as before; code
    compares with the members, never with message text.
    """

    REFLEX = "reflex"  # the arm's own reflex (collision, joint limit) stopped a motion
    TIMEOUT = "timeout"  # a driver call did not finish within its deadline
    NETWORK = "network"  # the link to the arm or its control box was lost
    HANG = "hang"  # the driver stopped answering and was abandoned (its process killed)
    LIMIT = "limit"  # a commanded or measured value left its bounds
    CAMERA_STALL = "camera_stall"  # a camera stopped delivering frames
    NOT_CONNECTED = "not_connected"  # the arm or camera is not connected, or refused the connection
    CONTACT = "contact"  # the measured external wrench is over the bound
    STOPPED = "stopped"  # a blocking call was interrupted by stop()
    TELEOP = "teleop"  # the operator's device went away during a takeover
    LOCKED = "locked"  # the env locked itself after repeated faults (info["fault_cause"] keeps the cause)
    RECOVER_FAIL = "recover_fail"  # the driver could not recover the arm after a fault

    def __str__(self) -> str:  # f"{kind}" reads "reflex", not "FaultKind.REFLEX"
        return self.value


class ErrorReason(str, Enum):
    """What went wrong with a request to the env service, for programs: the proto's ``ErrorReason``
    (``ERROR_REASON_<NAME>``, one-to-one by name). The server sends it with every error (in-band
    ``Error.reason`` on the Session stream, trailing metadata ``rlhw-error-reason`` on unary calls);
    clients choose their exception class from it and the status code, never from the message."""

    INVALID_REQUEST = "invalid_request"  # INVALID_ARGUMENT: a malformed or out-of-spec request
    CONTROLLED_BY_OTHER = "controlled_by_other"  # FAILED_PRECONDITION: another session controls the arm
    SAFETY_LOCKED = "safety_locked"  # FAILED_PRECONDITION: the env locked itself after a fault
    EPISODE_ENDED = "episode_ended"  # FAILED_PRECONDITION: no active episode (or a closed env); reset
    TOO_MANY_STREAMS = "too_many_streams"  # RESOURCE_EXHAUSTED: stream caps reached
    UNAUTHENTICATED = "unauthenticated"  # UNAUTHENTICATED: missing or wrong token
    ENV_FAILED = "env_failed"  # INTERNAL: the env (or stopping the arm) raised; the message says what
    BAD_SESSION_KEY = "bad_session_key"  # INVALID_ARGUMENT: the rlhw-session secret is unacceptable
    ROBOT_FAULT = "robot_fault"  # ABORTED: a robot fault the env could not end an episode with
    SAFETY_REFUSED = "safety_refused"  # FAILED_PRECONDITION: the safety layer refused a command (NaN, limits)
    SHUTTING_DOWN = "shutting_down"  # UNAVAILABLE: the server is shutting down; the arm is stopped
    UNSUPPORTED_REQUEST = "unsupported_request"  # UNIMPLEMENTED: a dm_env_rpc request this server lacks
    UNKNOWN_WORLD = "unknown_world"  # NOT_FOUND: a dm_env_rpc world name this server does not host
    WORLD_STATE = "world_state"  # FAILED_PRECONDITION: dm_env_rpc create/join/leave out of order

    def __str__(self) -> str:
        return self.value


class RobotFault(RlhwError):
    """A recoverable fault reported by an arm or camera driver; ``kind`` is a `FaultKind`.

    Environments turn it into a truncated episode with ``info["fault"] = kind``.
    """

    def __init__(self, kind: FaultKind, message: str):
        if not isinstance(kind, FaultKind):
            raise TypeError(f"RobotFault kind must be a FaultKind, got {kind!r}")
        self.kind = kind
        self.message = message
        super().__init__(f"{kind.value}: {message}")

    def __reduce__(self):  # pickles (Ray, pipes) as kind and message, the constructor's arguments
        return type(self), (self.kind, self.message)


class SafetyViolation(RlhwError):
    """A command was refused by the safety layer (NaN/inf, or the env has locked itself).

    ``reason`` says which (SAFETY_REFUSED, SAFETY_LOCKED or EPISODE_ENDED), for the env service."""

    def __init__(self, message: str, reason: ErrorReason = ErrorReason.SAFETY_REFUSED):
        self.reason = reason
        super().__init__(message)

    def __reduce__(self):
        return type(self), (str(self), self.reason)
