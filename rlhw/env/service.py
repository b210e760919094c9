"""The native `rlhw.env.v1.Env` service: GetSpec, Reset, Step, Session, Stop, GetStatus.

Requests arrive as bytes and each handler parses them with protobuf's generated code, so that bytes
which are no request get INVALID_ARGUMENT naming ``request``. Reset and Step serialise their
responses themselves (the ``encode`` phase of GetStatus's timing) and return bytes; the method
handlers below pass bytes through and serialise anything else.

Every error carries an `ErrorReason`: in-band as ``Error.reason`` on the Session stream, as the
trailing metadata ``rlhw-error-reason`` on unary calls (`abort`). Clients go by code and reason;
the message is for people.
"""

from __future__ import annotations

import logging
import time
from concurrent import futures
from time import perf_counter

import grpc
import numpy as np
from google.protobuf.message import DecodeError

from rlhw.env import codec
from rlhw.env.auth import SESSION_METADATA_KEY, SessionSecretRefused, session_of
from rlhw.env.control import ControlConflict
from rlhw.env.host import EnvHost
from rlhw.env.limits import MAX_FIELD_CHARS, StreamGate, StreamRefused, bounded
from rlhw.env.step_messages import StepWriter, wire_observations
from rlhw.env.v1 import env_pb2 as pb
from rlhw.env.validate import InvalidRequest
from rlhw.errors import ErrorReason, RobotFault, SafetyViolation
from rlhw.robot.step import Reset, Step

log = logging.getLogger("rlhw.env")

SERVICE_NAME = "rlhw.env.v1.Env"


def session_id(context: grpc.ServicerContext, prefix: str = "") -> str:
    """The caller's session (rlhw.env.auth.session_of): the fingerprint of its ``rlhw-session``
    secret, else its connection's peer address; InvalidRequest for an unacceptable secret."""
    try:
        return session_of(context.invocation_metadata(), context.peer(), prefix)
    except SessionSecretRefused as e:
        raise InvalidRequest(
            SessionSecretRefused.field, str(e).split(": ", 1)[1], ErrorReason.BAD_SESSION_KEY
        ) from None


class CallFailed(Exception):
    """A call failed with a gRPC status and an `ErrorReason`; raised inside handlers, turned into an
    abort (`abort`) or an in-band error (`error_message`).

    The message is bounded (rlhw.env.limits): it travels in metadata, which has a size limit."""

    def __init__(self, code: grpc.StatusCode, message: str, reason: ErrorReason, field: str = ""):
        self.code = code
        self.message = bounded(message)
        self.reason = reason
        self.field = bounded(field, MAX_FIELD_CHARS)
        super().__init__(self.message)


def _failure(e: Exception) -> CallFailed:
    """The status code and reason for an exception raised by an env operation."""
    if isinstance(e, CallFailed):
        return e
    if isinstance(e, InvalidRequest):
        return CallFailed(grpc.StatusCode.INVALID_ARGUMENT, str(e), e.reason, e.field)
    if isinstance(e, StreamRefused):
        return CallFailed(e.code, e.message, ErrorReason.TOO_MANY_STREAMS)
    if isinstance(e, ControlConflict):
        return CallFailed(grpc.StatusCode.FAILED_PRECONDITION, str(e), ErrorReason.CONTROLLED_BY_OTHER)
    if isinstance(e, SafetyViolation):
        return CallFailed(grpc.StatusCode.FAILED_PRECONDITION, f"safety: {e}", e.reason)
    if isinstance(e, RobotFault):
        return CallFailed(grpc.StatusCode.ABORTED, f"robot fault: {e}", ErrorReason.ROBOT_FAULT)
    # a bug in the env must not take the server down
    log.error("env call failed", exc_info=e)
    return CallFailed(grpc.StatusCode.INTERNAL, f"env raised {type(e).__name__}: {e}", ErrorReason.ENV_FAILED)


def abort(context: grpc.ServicerContext, e: Exception):
    """End a call with ``e``'s status (`_failure`); its reason (and field) go in the trailing metadata."""
    e = _failure(e)
    metadata = [codec.reason_to_metadata(e.reason)]
    if e.field:
        metadata.append((codec.FIELD_METADATA_KEY, e.field))
    context.set_trailing_metadata(metadata)
    context.abort(e.code, e.message)


def error_message(e: Exception) -> pb.Error:
    """``e`` as the Session stream's in-band Error."""
    e = _failure(e)
    return pb.Error(code=e.code.value[0], message=e.message, field=e.field, reason=codec.REASON_TO_WIRE[e.reason])


def run_guarded(fn, *args):
    """Run an env operation, mapping every failure to a CallFailed with a status code."""
    try:
        return fn(*args)
    except Exception as e:
        raise _failure(e) from None


def _parse(message_type, data: bytes):
    try:
        return message_type.FromString(data)
    except DecodeError as e:
        raise InvalidRequest(
            "request",
            f"is not a valid {message_type.DESCRIPTOR.full_name} ({e}); build it from proto/rlhw/env/v1/env.proto",
        ) from None


class EnvService:
    """Handlers of the native service, bound to one EnvHost."""

    def __init__(
        self,
        host: EnvHost,
        watchdog_s: float,
        step_limit_s: float | None = None,
        reset_limit_s: float | None = None,
        gate: StreamGate | None = None,
    ):
        self.host = host
        self.watchdog_s = watchdog_s
        self.step_limit_s = step_limit_s
        self.reset_limit_s = reset_limit_s
        self.spec_message = codec.env_spec_to_message(host.spec)
        self.writer = StepWriter(host.spec)
        self.shutting_down = False
        self.gate = gate or StreamGate(max_streams=6, max_streams_per_peer=4)
        # Stop and GetStatus run on pools of their own (grpc runs a handler on the pool named by
        # its ``experimental_thread_pool``): streams that hold every thread of the shared pool,
        # or a flood of calls queued on it, never delay an emergency stop.
        self.stop_pool = futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="rlhw-env-stop")
        self.status_pool = futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="rlhw-env-status")

    # -- operations shared by unary calls and the Session stream ----------------------------------
    def _controlled(self, session: str, fn, *args, limit_s: float | None = None):
        if self.shutting_down:
            raise CallFailed(
                grpc.StatusCode.UNAVAILABLE, "server is shutting down; the arm is stopped", ErrorReason.SHUTTING_DOWN
            )
        control = self.host.control
        try:
            control.acquire(session, limit_s)
        except Exception as e:
            raise _failure(e) from None
        try:
            return fn(*args)
        except Exception as e:
            raise _failure(e) from None
        finally:
            control.done(session)

    # -- what the dm_env_rpc bridge asks of the env, under the same control rule --------------------------
    def reset_as(self, session: str) -> Reset:
        """An unseeded reset on behalf of ``session`` (which takes or must hold control)."""
        return self._controlled(session, lambda: self.host.reset(None)[0], limit_s=self.reset_limit_s)

    def step_as(self, session: str, action: np.ndarray) -> Step:
        """A step of a checked ``action`` on behalf of ``session`` (which takes or must hold control)."""
        return self._controlled(session, lambda: self.host.step(action)[0], limit_s=self.step_limit_s)

    def _reset(self, request: pb.ResetRequest, in_session: bool) -> bytes:
        t0 = time.perf_counter()
        seed = request.seed if request.HasField("seed") else None
        if seed is not None and not 0 <= seed < 2**63:
            raise InvalidRequest(
                "seed", f"must be between 0 and 2**63-1, got {seed}; leave it unset for an unseeded reset"
            )
        first, timing = self.host.reset(seed)
        timing["server"] = time.perf_counter() - t0
        response = pb.SessionResponse() if in_session else pb.ResetResponse()  # the Session stream's oneof
        message = response.reset if in_session else response
        codec.fill_map(message.timing, timing)
        message.success.extend(first.success.tolist())
        obs, stamps = wire_observations(first.obs, first.stamps, self.host.num_envs)
        codec.fill_observation(message.observation, obs, stamps)
        return response.SerializeToString()

    def _step(self, request: pb.StepRequest, in_session: bool) -> bytes:
        """One step: the answer goes inside SessionResponse.step ``in_session``."""
        t0 = perf_counter()
        if not request.HasField("action"):
            raise InvalidRequest("action", "missing; send a Tensor matching GetSpec().spec.action")
        action = self.host.checker.check(request.action)
        t1 = perf_counter()
        step, timing = self.host.step(action)
        timing["validate"] = t1 - t0
        t2 = perf_counter()
        timing["server"] = t2 - t0
        data = self.writer.serialize(step, timing, action, in_session)
        timing["encode"] = perf_counter() - t2
        self.host.record(timing)
        return data

    # -- unary handlers -------------------------------------------------------------------------
    # Each takes the request's bytes and parses them itself, so bytes that are not the request
    # message get INVALID_ARGUMENT naming `request` (grpc's own deserialiser would answer INTERNAL).
    def GetSpec(self, data: bytes, context):
        _parse_or_abort(pb.GetSpecRequest, data, context)
        return pb.GetSpecResponse(spec=self.spec_message)

    def Reset(self, data: bytes, context):
        try:
            request = _parse(pb.ResetRequest, data)
            return self._controlled(session_id(context), self._reset, request, False, limit_s=self.reset_limit_s)
        except (CallFailed, InvalidRequest) as e:
            abort(context, e)

    def Step(self, data: bytes, context):
        try:
            request = _parse(pb.StepRequest, data)
            return self._controlled(session_id(context), self._step, request, False, limit_s=self.step_limit_s)
        except (CallFailed, InvalidRequest) as e:
            abort(context, e)

    def Stop(self, data: bytes, context):
        """Stop the arm first, whatever else is wrong with the call (a stop always gets through)."""
        try:
            session = session_id(context)
        except InvalidRequest as e:
            session, refused = None, e
        try:
            self.host.stop_arm(f"Stop called by {session or context.peer()}")
        except Exception as e:
            abort(
                context, CallFailed(grpc.StatusCode.INTERNAL, f"stopping the arm failed: {e!r}", ErrorReason.ENV_FAILED)
            )
        try:
            request = _parse(pb.StopRequest, data)
        except InvalidRequest as e:
            abort(
                context,
                InvalidRequest(e.field, f"{e.message}; the arm was stopped anyway, control not released", e.reason),
            )
        if session is None:
            if request.release:
                abort(
                    context,
                    InvalidRequest(
                        refused.field,
                        f"{refused.message}; the arm was stopped anyway, control not released",
                        refused.reason,
                    ),
                )
            session = "peer:" + context.peer()
        message = "arm stopped"
        released = False
        if request.release:
            released = self.host.release(session, "Stop(release=true)")
            if not released:
                holder = self.host.control.controller
                message += (
                    f"; control not released: it is held by {holder}, not {session}"
                    if holder
                    else "; nobody held control"
                )
            else:
                message += f"; control released by {session}"
        return pb.StopResponse(stopped=True, released=released, message=message)

    def GetStatus(self, data: bytes, context):
        _parse_or_abort(pb.GetStatusRequest, data, context)
        host = self.host
        c = host.control.snapshot()
        timing = {k: pb.PhaseTiming(**v) for k, v in host.timing_summary().items()}
        return pb.GetStatusResponse(
            controller=c.session,
            controller_since=c.since,
            controller_last_seen=c.last_seen,
            steps=host.steps,
            resets=host.resets,
            faults=list(host.faults),
            timing=timing,
            env_status_json=host.env_status_json(),
            watchdog_s=self.watchdog_s,
            stopped=host.stopped,
            uptime_s=time.time() - host.started,
            declared_observations=list(self.writer.declared[True]),
            declared_written=self.writer.written,
            declared_filled=self.writer.filled,
        )

    # -- Session stream -------------------------------------------------------------------------
    def _admit(self, context) -> tuple[str, str]:
        """(session, peer) of a new stream, or abort: bad secret, too many streams, or another
        session controls the arm (refused at once, so that a refused stream holds no thread)."""
        try:
            session = session_id(context)
            peer = context.peer()
            self.gate.open(peer, session, controller=self.host.control.controller == session)
        except (InvalidRequest, StreamRefused) as e:
            abort(context, e)
        try:
            self.host.control.check(session)
        except ControlConflict as e:
            self.gate.close(peer, session)
            abort(context, e)
        return session, peer

    def Session(self, request_iterator, context):
        session, peer = self._admit(context)
        try:
            for data in request_iterator:  # serialised SessionRequests
                try:
                    request = _parse(pb.SessionRequest, data)
                    kind = request.WhichOneof("kind")
                    if kind == "step":
                        out = self._controlled(session, self._step, request.step, True, limit_s=self.step_limit_s)
                    elif kind == "reset":
                        out = self._controlled(session, self._reset, request.reset, True, limit_s=self.reset_limit_s)
                    else:
                        raise CallFailed(
                            grpc.StatusCode.INVALID_ARGUMENT,
                            "empty SessionRequest; set reset or step",
                            ErrorReason.INVALID_REQUEST,
                            "kind",
                        )
                    yield out
                except (CallFailed, InvalidRequest) as e:  # InvalidRequest: a request that does not parse
                    error = error_message(e)
                    yield pb.SessionResponse(error=error).SerializeToString()
                    if (
                        error.code == grpc.StatusCode.FAILED_PRECONDITION.value[0]
                        and self.host.control.controller != session
                    ):
                        return  # a refused would-be controller: end its stream now, freeing the thread
        finally:
            left = self.gate.close(peer, session)
            # A client that timed out reopens its stream under the same session while the old one
            # drains: only the last stream of a session to end gives control back. Any stream of
            # the controller counts, also one whose every request failed (it took control first).
            if not left:
                self.host.release(session, "Session stream ended")

    # -- registration ---------------------------------------------------------------------------
    def handler(self) -> grpc.GenericRpcHandler:
        def ser(msg) -> bytes:
            return msg if isinstance(msg, bytes) else msg.SerializeToString()

        def on(pool, fn):
            def behavior(request, context):
                return fn(request, context)

            behavior.experimental_thread_pool = pool  # grpc runs this handler on that pool
            return behavior

        def uu(fn):  # bytes in; the handler parses (and answers INVALID_ARGUMENT for bad bytes)
            return grpc.unary_unary_rpc_method_handler(fn, response_serializer=ser)

        # Step and Session take and return bytes: the handlers parse each request themselves (a
        # request that does not parse is INVALID_ARGUMENT, in-band on the stream).
        return grpc.method_handlers_generic_handler(
            SERVICE_NAME,
            {
                "GetSpec": uu(self.GetSpec),
                "Reset": uu(self.Reset),
                "Step": uu(self.Step),
                "Stop": uu(on(self.stop_pool, self.Stop)),
                "GetStatus": uu(on(self.status_pool, self.GetStatus)),
                "Session": grpc.stream_stream_rpc_method_handler(self.Session),  # bytes in, bytes out
            },
        )

    def close(self) -> None:
        self.stop_pool.shutdown(wait=False)
        self.status_pool.shutdown(wait=False)


def _parse_or_abort(message_type, data: bytes, context):
    try:
        return _parse(message_type, data)
    except InvalidRequest as e:
        abort(context, e)


__all__ = [
    "EnvService",
    "SERVICE_NAME",
    "SESSION_METADATA_KEY",
    "session_id",
    "CallFailed",
    "run_guarded",
    "abort",
    "error_message",
]
