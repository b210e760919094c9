"""The native `rlhw.env.v1.Env` service: GetSpec, Reset, Step, Session, Stop, GetStatus.

Responses that carry observations are written as wire bytes straight from the env's arrays
(rlhw.env.wire, and rlhw.env.step_layout for single-instance steps), so the handlers return
`bytes`; the method handlers below pass bytes through and serialise anything else with protobuf.
"""

from __future__ import annotations

import logging
import threading
import time
from time import perf_counter

import grpc
from google.protobuf.message import DecodeError

from rlhw.env import codec, step_layout, wire
from rlhw.env.control import ControlConflict
from rlhw.env.host import EnvHost, StepResult
from rlhw.env.v1 import env_pb2 as pb
from rlhw.env.validate import InvalidRequest
from rlhw.errors import RobotFault, SafetyViolation

log = logging.getLogger("rlhw.env")

SERVICE_NAME = "rlhw.env.v1.Env"
SESSION_METADATA_KEY = "rlhw-session"


def session_id(context: grpc.ServicerContext, prefix: str = "") -> str:
    """The caller's session: its ``rlhw-session`` metadata, else its connection's peer address."""
    for key, value in context.invocation_metadata() or ():
        if key == SESSION_METADATA_KEY and value:
            return str(value)
    return prefix + context.peer()


class CallFailed(Exception):
    """A call failed with a gRPC status; raised inside handlers, turned into abort or in-band error."""

    def __init__(self, code: grpc.StatusCode, message: str, field: str = ""):
        self.code = code
        self.message = message
        self.field = field
        super().__init__(message)


def _failure(e: Exception) -> CallFailed:
    """The status code for an exception raised by an env operation."""
    if isinstance(e, CallFailed):
        return e
    if isinstance(e, InvalidRequest):
        return CallFailed(grpc.StatusCode.INVALID_ARGUMENT, str(e), e.field)
    if isinstance(e, ControlConflict):
        return CallFailed(grpc.StatusCode.FAILED_PRECONDITION, str(e))
    if isinstance(e, SafetyViolation):
        return CallFailed(grpc.StatusCode.FAILED_PRECONDITION, f"safety: {e}")
    if isinstance(e, RobotFault):
        return CallFailed(grpc.StatusCode.ABORTED, f"robot fault: {e}")
    # a bug in the env must not take the server down
    log.error("env call failed", exc_info=e)
    return CallFailed(grpc.StatusCode.INTERNAL, f"env raised {type(e).__name__}: {e}")


def run_guarded(fn, *args):
    """Run an env operation, mapping every failure to a CallFailed with a status code."""
    try:
        return fn(*args)
    except Exception as e:
        raise _failure(e) from None


def _encode_step(head_msg, result: StepResult, wrap_field: int | None) -> bytes:
    observations = [(1, result.obs, result.stamps)]
    if result.final_obs is not None:
        observations.append((9, result.final_obs, None))
    return wire.encode_with_observations(head_msg.SerializeToString(), observations, wrap_field)


def _parse(message_type, data: bytes):
    try:
        return message_type.FromString(data)
    except DecodeError as e:
        raise InvalidRequest("request", f"is not a valid {message_type.DESCRIPTOR.full_name} ({e}); "
                                        f"build it from proto/rlhw/env/v1/env.proto") from None


class EnvService:
    """Handlers of the native service, bound to one EnvHost."""

    def __init__(self, host: EnvHost, watchdog_s: float, step_limit_s: float | None = None,
                 reset_limit_s: float | None = None):
        self.host = host
        self.watchdog_s = watchdog_s
        self.step_limit_s = step_limit_s
        self.reset_limit_s = reset_limit_s
        self.spec_message = codec.env_spec_to_message(host.spec)
        self.writer = step_layout.StepWriter()
        self.shutting_down = False
        self._open_streams: dict[str, int] = {}  # session -> Session streams open (a client may reopen one)
        self._streams_lock = threading.Lock()

    # -- operations shared by unary calls and the Session stream ----------------------------------
    def _controlled(self, session: str, fn, *args, limit_s: float | None = None):
        if self.shutting_down:
            raise CallFailed(grpc.StatusCode.UNAVAILABLE, "server is shutting down; the arm is stopped")
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

    def _reset(self, request: pb.ResetRequest, wrap_field: int | None) -> bytes:
        t0 = time.perf_counter()
        seed = request.seed if request.HasField("seed") else None
        if seed is not None and not 0 <= seed < 2**63:
            raise InvalidRequest("seed", f"must be between 0 and 2**63-1, got {seed}; leave it unset for an unseeded reset")
        result = self.host.reset(seed)
        result.timing["server"] = time.perf_counter() - t0
        head = pb.ResetResponse(timing=result.timing, success=result.success)
        return _encode_step(head, result, wrap_field)

    def _step(self, request: pb.StepRequest | bytes, wrap_field: int | None) -> bytes:
        """One step: ``request`` is a StepRequest or its wire bytes (or, with ``wrap_field`` set,
        SessionRequest{step} bytes in the layout of `ActionChecker.canonical_request`)."""
        t0 = perf_counter()
        action = None
        if type(request) is bytes:
            action = self.host.checker.from_request(request, wrap_field is not None)
            if action is None:
                request = _parse(pb.StepRequest, request)  # only unary Steps pass unusual bytes
        if action is None:
            if not request.HasField("action"):
                raise InvalidRequest("action", "missing; send a Tensor matching GetSpec().spec.action")
            action = self.host.checker.check(request.action)
        t1 = perf_counter()
        result = self.host.step_fast(action)
        if type(result) is tuple:  # one instance, no fault: the writer's cached layout
            obs, stamps, reward, terminated, truncated, success, timing = result
            timing["validate"] = t1 - t0
            t2 = perf_counter()
            timing["server"] = t2 - t0
            data = self.writer.write(reward, terminated, truncated, success, timing, obs, stamps, wrap_field)
        else:
            timing = result.timing
            timing["validate"] = t1 - t0
            t2 = perf_counter()
            timing["server"] = t2 - t0
            head = wire.encode_step_head(result.reward, result.terminated, result.truncated, result.success,
                                          result.fault, result.fault_message, timing, result.final_mask or ())
            observations = [(1, result.obs, result.stamps)]
            if result.final_obs is not None:
                observations.append((9, result.final_obs, None))
            data = wire.encode_with_observations(head, observations, wrap_field)
        timing["encode"] = perf_counter() - t2
        self.host.record(timing)
        return data

    # -- unary handlers -------------------------------------------------------------------------
    def GetSpec(self, request, context):
        return pb.GetSpecResponse(spec=self.spec_message)

    def Reset(self, request, context):
        try:
            return self._controlled(session_id(context), self._reset, request, None, limit_s=self.reset_limit_s)
        except CallFailed as e:
            context.abort(e.code, e.message)

    def Step(self, request, context):
        try:
            return self._controlled(session_id(context), self._step, request, None, limit_s=self.step_limit_s)
        except CallFailed as e:
            context.abort(e.code, e.message)

    def Stop(self, request, context):
        session = session_id(context)
        message = "arm stopped"
        try:
            self.host.stop_arm(f"Stop called by {session}")
        except Exception as e:
            context.abort(grpc.StatusCode.INTERNAL, f"stopping the arm failed: {e!r}")
        released = False
        if request.release:
            released = self.host.control.release(session)
            if not released:
                holder = self.host.control.controller
                message += (f"; control not released: it is held by {holder}, not {session}" if holder
                            else "; nobody held control")
            else:
                message += f"; control released by {session}"
        return pb.StopResponse(stopped=True, released=released, message=message)

    def GetStatus(self, request, context):
        host = self.host
        c = host.control.snapshot()
        timing = {k: pb.PhaseTiming(**v) for k, v in host.timing_summary().items()}
        return pb.GetStatusResponse(
            controller=c.session, controller_since=c.since, controller_last_seen=c.last_seen,
            steps=host.steps, resets=host.resets, faults=list(host.faults), timing=timing,
            env_status_json=host.env_status_json(), watchdog_s=self.watchdog_s, stopped=host.stopped,
            uptime_s=time.time() - host.started,
        )

    # -- Session stream -------------------------------------------------------------------------
    def Session(self, request_iterator, context):
        session = session_id(context)
        held = False
        with self._streams_lock:
            self._open_streams[session] = self._open_streams.get(session, 0) + 1
        try:
            prefix, size = self.host.checker.canonical_request(True)
            for data in request_iterator:  # serialised SessionRequests
                try:
                    if len(data) == size and data.startswith(prefix):  # a step laid out as usual: _step reads the bytes
                        out = self._controlled(session, self._step, data, 2, limit_s=self.step_limit_s)
                    else:
                        request = _parse(pb.SessionRequest, data)
                        kind = request.WhichOneof("kind")
                        if kind == "step":
                            out = self._controlled(session, self._step, request.step, 2, limit_s=self.step_limit_s)
                        elif kind == "reset":
                            out = self._controlled(session, self._reset, request.reset, 1, limit_s=self.reset_limit_s)
                        else:
                            raise CallFailed(grpc.StatusCode.INVALID_ARGUMENT,
                                             "empty SessionRequest; set reset or step", "kind")
                    held = True
                    yield out
                except (CallFailed, InvalidRequest) as e:  # InvalidRequest: a request that does not parse
                    e = _failure(e)
                    yield pb.SessionResponse(error=pb.Error(code=e.code.value[0], message=e.message,
                                                            field=e.field)).SerializeToString()
        finally:
            with self._streams_lock:
                left = self._open_streams[session] = self._open_streams[session] - 1
                if not left:
                    del self._open_streams[session]
            # A client that timed out reopens its stream under the same session while the old one
            # drains: only the last stream of a session to end gives control back.
            if held and not left:
                self.host.release(session, "Session stream ended")

    # -- registration ---------------------------------------------------------------------------
    def handler(self) -> grpc.GenericRpcHandler:
        def ser(msg) -> bytes:
            return msg if isinstance(msg, bytes) else msg.SerializeToString()

        def uu(fn, req):
            return grpc.unary_unary_rpc_method_handler(fn, request_deserializer=req.FromString, response_serializer=ser)

        # Step and Session take and return bytes (no (de)serialiser call per message): `_step`
        # reads a canonical action straight from the request and parses anything else with
        # protobuf (a request that does not parse is INVALID_ARGUMENT, in-band on the stream).
        return grpc.method_handlers_generic_handler(
            SERVICE_NAME,
            {
                "GetSpec": uu(self.GetSpec, pb.GetSpecRequest),
                "Reset": uu(self.Reset, pb.ResetRequest),
                "Step": grpc.unary_unary_rpc_method_handler(self.Step),  # bytes in, bytes out
                "Stop": uu(self.Stop, pb.StopRequest),
                "GetStatus": uu(self.GetStatus, pb.GetStatusRequest),
                "Session": grpc.stream_stream_rpc_method_handler(self.Session),  # bytes in, bytes out
            },
        )


__all__ = ["EnvService", "SERVICE_NAME", "SESSION_METADATA_KEY", "session_id", "CallFailed", "run_guarded"]
