"""dm_env_rpc's `Environment` service on the same server, so existing dm_env_rpc clients
(`DmEnvAdaptor`, other languages) can drive any rlhw env.

Mapping
- One world per server: the hosted env. CreateWorld and JoinWorld take no settings (the config
  decides everything); the world lives until DestroyWorld or the end of the stream that made it.
- JoinWorld takes control of the arm (same single-controller rule and watchdog as the native
  service); LeaveWorld stops the arm and gives control back.
- Actions: one action, uid 1, named after the spec's action. Observations: one uid per
  observation, plus ``reward`` and ``discount`` (what DmEnvAdaptor reads by default).
- dm_env_rpc sequencing: the first Step after JoinWorld, Reset or the end of an episode starts a
  new episode (it resets the env, or uses the observation a Reset just produced) and ignores its
  actions. A Step that sends no action repeats the previous action (the zero action clipped to the
  bounds before any). ResetWorld never moves the arm by itself: it makes the next Step start a new
  episode.
- Terminated -> TERMINATED, truncated (time limit or fault) -> INTERRUPTED.
- Only single-instance envs (num_envs == 1).
"""

from __future__ import annotations

import itertools
import logging
import threading

import grpc
import numpy as np
from dm_env_rpc.v1 import dm_env_rpc_pb2 as dm
from dm_env_rpc.v1 import dm_env_rpc_pb2_grpc, tensor_spec_utils, tensor_utils
from google.protobuf import any_pb2
from google.rpc import error_details_pb2, status_pb2

from rlhw.env import codec
from rlhw.env.declared import DeclaredTensor
from rlhw.env.host import EnvHost
from rlhw.env.limits import StreamRefused
from rlhw.env.service import CallFailed, EnvService, abort, run_guarded, session_id
from rlhw.env.validate import InvalidRequest
from rlhw.errors import ErrorReason

log = logging.getLogger("rlhw.env")

SERVICE_NAME = "dm_env_rpc.v1.Environment"
ACTION_UID = 1
_REWARD = "reward"
_DISCOUNT = "discount"
# (each attribute read of a protobuf enum wrapper goes through its __getattr__: read them once)
_RUNNING = dm.EnvironmentStateType.RUNNING
_TERMINATED = dm.EnvironmentStateType.TERMINATED
_INTERRUPTED = dm.EnvironmentStateType.INTERRUPTED


def _spec(name: str, dtype, shape, low=None, high=None) -> dm.TensorSpec:
    spec = dm.TensorSpec(name=name, shape=list(shape), dtype=tensor_utils.np_type_to_data_type(np.dtype(dtype)))
    if low is not None or high is not None:
        np_dtype = np.dtype(dtype)
        info = np.finfo(np_dtype) if np.issubdtype(np_dtype, np.floating) else np.iinfo(np_dtype)
        lo = np.asarray(info.min if low is None else low, dtype=np_dtype)
        hi = np.asarray(info.max if high is None else high, dtype=np_dtype)
        tensor_spec_utils.set_bounds(spec, lo if lo.ndim else lo.item(), hi if hi.ndim else hi.item())
    return spec


class _World:
    """The one world this server offers."""

    def __init__(self, name: str):
        self.name = name
        self.created_by: int | None = None  # stream number that created it
        self.joined_by: int | None = None


class DmEnvRpcService(dm_env_rpc_pb2_grpc.EnvironmentServicer):
    def __init__(self, host: EnvHost, native: EnvService, world_name: str = "rlhw"):
        self.host = host
        self.native = native
        self.world = _World(world_name)
        self._lock = threading.Lock()
        self._streams = itertools.count(1)
        spec = host.spec
        self.supported = spec.num_envs == 1
        self.obs_names = list(spec.observations)
        self.obs_uids = {name: uid for uid, name in enumerate(self.obs_names + [_REWARD, _DISCOUNT], start=1)}
        self.uid_names = {uid: name for name, uid in self.obs_uids.items()}
        specs = dm.ActionObservationSpecs()
        a = spec.action
        specs.actions[ACTION_UID].CopyFrom(_spec(a.name, a.dtype, a.shape, a.low, a.high))
        for name, s in spec.observations.items():
            specs.observations[self.obs_uids[name]].CopyFrom(_spec(name, s.dtype, s.shape, s.low, s.high))
        specs.observations[self.obs_uids[_REWARD]].CopyFrom(_spec(_REWARD, np.float32, ()))
        specs.observations[self.obs_uids[_DISCOUNT]].CopyFrom(_spec(_DISCOUNT, np.float32, (), 0.0, 1.0))
        self.specs = specs
        # Per observation uid: its dtype and dm_env_rpc's packer for it, found once (pack_tensor finds the packer
        # per call, then its tensor is copied into the response).
        dtypes = {uid: tensor_utils.data_type_to_np_type(s.dtype) for uid, s in specs.observations.items()}
        self.packers = {uid: (np.dtype(d), tensor_utils.get_packer(d)) for uid, d in dtypes.items()}
        # Each observation whose payload is its array's raw bytes (floats, doubles, uint8s, int8s) goes after the
        # rest of a Step's answer as a message of its own (rlhw.env.declared); the others through the packer.
        self.declared = {}
        for name, s in spec.observations.items() if self.supported else ():
            uid = self.obs_uids[name]
            declared = DeclaredTensor.declare(f"dm_env_rpc observation {name!r}", s.dtype, s.shape, *_one_tensor(uid))
            if declared is not None:
                self.declared[uid] = declared
        # A float action's payload field (dm_env_rpc's packer's name) and shape as a client usually sends them,
        # read as a list of values (`_Stream._action`); any other action goes through tensor_utils.
        action_dtype = np.dtype(a.dtype)
        self.action_payload = tensor_utils.get_packer(action_dtype).name if action_dtype.kind == "f" else None
        self.action_shape = list(host.checker.shape)
        self._requested: dict[tuple[int, ...], list[int]] = {}  # requested_observations -> its uids, checked
        low = -np.inf if a.low is None else a.low
        high = np.inf if a.high is None else a.high
        self.default_action = np.clip(np.zeros(a.shape, dtype=a.dtype), low, high).astype(a.dtype)

    # -- the stream -----------------------------------------------------------------------------
    def Process(self, request_iterator, context):
        try:
            session = session_id(context, prefix="dm_env_rpc:")
            peer = context.peer()
            self.native.gate.open(peer, session)  # a dm_env_rpc stream holds a handler thread too
        except (InvalidRequest, StreamRefused) as e:
            abort(context, e)
        stream = _Stream(self, next(self._streams), session)
        try:
            for request in request_iterator:
                kind = request.WhichOneof("payload")
                try:
                    handler = getattr(stream, kind, None)
                    if handler is None:
                        raise CallFailed(
                            grpc.StatusCode.UNIMPLEMENTED,
                            f"request type {kind!r} is not supported",
                            ErrorReason.UNSUPPORTED_REQUEST,
                        )
                    response = dm.EnvironmentResponse()
                    answer = getattr(response, kind)
                    answer.SetInParent()  # (an empty answer is still this kind's)
                    pieces = handler(getattr(request, kind), answer)  # (a Step's declared observations)
                    yield b"".join((response.SerializeToString(), *pieces)) if pieces else response
                except CallFailed as e:
                    yield dm.EnvironmentResponse(error=status(e))
                except Exception as e:  # a bug here must not end the client's stream silently
                    log.exception("dm_env_rpc request failed")
                    yield dm.EnvironmentResponse(
                        error=status(
                            CallFailed(grpc.StatusCode.INTERNAL, f"{type(e).__name__}: {e}", ErrorReason.ENV_FAILED)
                        )
                    )
        finally:
            try:
                stream.close()
            finally:
                self.native.gate.close(peer, session)

    def handler(self) -> grpc.GenericRpcHandler:
        return grpc.method_handlers_generic_handler(
            SERVICE_NAME,
            {
                "Process": grpc.stream_stream_rpc_method_handler(
                    self.Process,
                    request_deserializer=dm.EnvironmentRequest.FromString,
                    response_serializer=_serialized,
                )
            },
        )


def _serialized(response: dm.EnvironmentResponse | bytes) -> bytes:
    return response if isinstance(response, bytes) else response.SerializeToString()


def _one_tensor(uid: int):
    """(new, put) for `DeclaredTensor.declare`: an EnvironmentResponse{step} holding only observation ``uid``."""

    def put(message: dm.EnvironmentResponse, array: np.ndarray) -> None:
        tensor = message.step.observations[uid]
        tensor.shape.extend(array.shape)
        tensor_utils.get_packer(array.dtype).pack(tensor, array)

    return dm.EnvironmentResponse, put


#: ErrorInfo.domain of the reasons this bridge attaches to its in-band errors.
ERROR_DOMAIN = "rlhw.env.v1"


def status(e: CallFailed) -> status_pb2.Status:
    """``e`` as dm_env_rpc's in-band google.rpc.Status: the reason rides along the standard way, as
    a google.rpc.ErrorInfo detail (reason = the ErrorReason's proto name, domain = ERROR_DOMAIN)."""
    info = error_details_pb2.ErrorInfo(reason=codec.reason_to_metadata(e.reason)[1], domain=ERROR_DOMAIN)
    detail = any_pb2.Any()
    detail.Pack(info)
    return status_pb2.Status(code=e.code.value[0], message=e.message, details=[detail])


def _no_settings(settings, what: str) -> None:
    if settings:
        names = ", ".join(sorted(settings))
        raise CallFailed(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{what} takes no settings (got {names}); this server's env is fixed by its config file",
            ErrorReason.INVALID_REQUEST,
        )


class _Stream:
    """State of one Process stream: the dm_env_rpc state machine for one client."""

    def __init__(self, service: DmEnvRpcService, number: int, session: str):
        self.svc = service
        self.host = service.host
        self.native = service.native
        self.number = number
        self.session = session
        self.joined = False
        self.need_start = True
        self.pending = None  # the `Reset` a Reset request produced, returned by the next Step
        self.last_action = service.default_action

    # world lifecycle
    def _check_world(self, name: str) -> None:
        w = self.svc.world
        if w.created_by is None or name != w.name:
            raise CallFailed(
                grpc.StatusCode.NOT_FOUND,
                f"no world named {name!r}; this server has one world, {w.name!r}; CreateWorld it first"
                if w.created_by is None
                else f"no world named {name!r}; the world is {w.name!r}",
                ErrorReason.UNKNOWN_WORLD,
            )

    def create_world(self, req: dm.CreateWorldRequest, out: dm.CreateWorldResponse) -> None:
        _no_settings(req.settings, "CreateWorld")
        with self.svc._lock:
            w = self.svc.world
            if w.created_by is not None:
                raise CallFailed(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    f"world {w.name!r} exists already (one world per server, one arm); JoinWorld it",
                    ErrorReason.WORLD_STATE,
                )
            w.created_by = self.number
        out.world_name = w.name

    def join_world(self, req: dm.JoinWorldRequest, out: dm.JoinWorldResponse) -> None:
        _no_settings(req.settings, "JoinWorld")
        with self.svc._lock:
            self._check_world(req.world_name)
            if not self.svc.supported:
                raise CallFailed(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    "dm_env_rpc serves single envs only; this server hosts "
                    f"{self.host.num_envs} instances; use the rlhw.env.v1 service",
                    ErrorReason.UNSUPPORTED_REQUEST,
                )
            if self.joined:
                raise CallFailed(
                    grpc.StatusCode.FAILED_PRECONDITION, "already joined; LeaveWorld first", ErrorReason.WORLD_STATE
                )
            run_guarded(self.host.control.acquire, self.session)
            self.host.control.done(self.session)
            self.joined = True
            self.svc.world.joined_by = self.number
        self.need_start = True
        self.pending = None
        out.specs.CopyFrom(self.svc.specs)

    def leave_world(self, req: dm.LeaveWorldRequest, out: dm.LeaveWorldResponse) -> None:
        self._leave("LeaveWorld")

    def _leave(self, why: str) -> None:
        if not self.joined:
            return
        self.joined = False
        with self.svc._lock:
            if self.svc.world.joined_by == self.number:
                self.svc.world.joined_by = None
        self.host.release(self.session, why)

    def destroy_world(self, req: dm.DestroyWorldRequest, out: dm.DestroyWorldResponse) -> None:
        with self.svc._lock:
            self._check_world(req.world_name)
            if self.svc.world.joined_by is not None:
                raise CallFailed(
                    grpc.StatusCode.FAILED_PRECONDITION,
                    "a client is joined to the world; LeaveWorld first",
                    ErrorReason.WORLD_STATE,
                )
            self.svc.world.created_by = None

    def reset_world(self, req: dm.ResetWorldRequest, out: dm.ResetWorldResponse) -> None:
        _no_settings(req.settings, "ResetWorld")
        with self.svc._lock:
            self._check_world(req.world_name)
            joined_by = self.svc.world.joined_by
        if joined_by is not None and joined_by != self.number:
            raise CallFailed(
                grpc.StatusCode.FAILED_PRECONDITION,
                "another client is joined to the world and controls the arm",
                ErrorReason.CONTROLLED_BY_OTHER,
            )
        self.need_start = True
        self.pending = None

    # episode
    def _require_joined(self, what: str) -> None:
        if not self.joined:
            raise CallFailed(
                grpc.StatusCode.FAILED_PRECONDITION,
                f"{what} needs a joined world; JoinWorld first",
                ErrorReason.WORLD_STATE,
            )

    def reset(self, req: dm.ResetRequest, out: dm.ResetResponse) -> None:
        _no_settings(req.settings, "Reset")
        self._require_joined("Reset")
        self.pending = self.native.reset_as(self.session)
        self.need_start = True
        out.specs.CopyFrom(self.svc.specs)

    def step(self, req: dm.StepRequest, out: dm.StepResponse) -> list:
        """Fill ``out``; the declared observations are returned as pieces to append to the serialised answer."""
        self._require_joined("Step")
        requested = self._requested(req.requested_observations)
        if self.need_start:
            result = self.pending or self.native.reset_as(self.session)
            self.pending = None
            self.need_start = False
            state, reward, discount = _RUNNING, 0.0, 1.0
        else:
            action = self._action(req.actions)
            result = self.native.step_as(self.session, action)
            self.last_action = action
            reward = result.reward.item()
            if result.terminated[0]:
                state, discount = _TERMINATED, 0.0
            elif result.truncated[0]:
                state, discount = _INTERRUPTED, 1.0
            else:
                state, discount = _RUNNING, 1.0
            if state != _RUNNING:
                self.need_start = True
        out.state = state
        observations, packers, names, obs = out.observations, self.svc.packers, self.svc.uid_names, result.obs
        declared, pieces = self.svc.declared, []
        for uid in requested:
            name = names[uid]
            if name == _REWARD:
                value = np.float32(reward)
            elif name == _DISCOUNT:
                value = np.float32(discount)
            else:
                value = obs[name][0]  # the one instance's row
                piece = declared.get(uid)
                if piece is not None and piece.fits(value):
                    pieces += piece.pieces(value)
                    continue
            dtype, packer = packers[uid]
            if value.dtype != dtype:  # (not the spec's dtype: pack it as it is, as pack_tensor would)
                packer = tensor_utils.get_packer(value.dtype)
            tensor = observations[uid]
            tensor.shape.extend(value.shape)
            packer.pack(tensor, value)
        return pieces

    def _requested(self, uids) -> list[int]:
        """The requested observations' uids, each once, in order; a request's list is checked once."""
        key = tuple(uids)
        requested = self.svc._requested.get(key)
        if requested is not None:
            return requested
        requested = []
        for uid in key:
            if uid not in self.svc.uid_names:
                raise CallFailed(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"requested_observations: unknown observation uid {uid}; known: {sorted(self.svc.uid_names)}",
                    ErrorReason.INVALID_REQUEST,
                )
            if uid not in requested:
                requested.append(uid)
        if len(self.svc._requested) < 64:  # (a client may send any lists: keep a few)
            self.svc._requested[key] = requested
        return requested

    def _usual_values(self, tensor: dm.Tensor) -> list | None:
        """The values of a float action sent as clients usually send it (the spec's payload field, shape and number
        of values), read as a list; None for any other, which tensor_utils unpacks (one value may fill a shape)."""
        payload = tensor.WhichOneof("payload")
        if payload != self.svc.action_payload or tensor.shape[:] != self.svc.action_shape:
            return None
        values = getattr(tensor, payload).array[:]
        return values if len(values) == self.host.checker.size else None

    def _action(self, actions) -> np.ndarray:
        checker = self.host.checker
        for uid in actions:
            if uid != ACTION_UID:
                raise CallFailed(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"actions: unknown action uid {uid}; the only action is uid {ACTION_UID} "
                    f"({self.host.spec.action.name!r})",
                    ErrorReason.INVALID_REQUEST,
                )
        if ACTION_UID not in actions:
            return self.last_action
        tensor = actions[ACTION_UID]
        field = f"actions[{ACTION_UID}]"
        values = self._usual_values(tensor)
        if values is not None:
            try:
                return checker.from_values(values, field)
            except InvalidRequest as e:
                raise CallFailed(grpc.StatusCode.INVALID_ARGUMENT, str(e), e.reason, e.field) from None
        try:
            got = tensor_utils.get_tensor_type(tensor)
        except Exception as e:
            raise CallFailed(
                grpc.StatusCode.INVALID_ARGUMENT, f"{field}: unreadable tensor: {e}", ErrorReason.INVALID_REQUEST
            ) from None
        if np.dtype(got) != checker.dtype:
            raise CallFailed(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{field}.dtype: expected {checker.dtype.name}, got {np.dtype(got).name}",
                ErrorReason.INVALID_REQUEST,
            )
        shape = list(tensor.shape)
        want = list(checker.shape)
        if len(shape) != len(want) or any(s not in (w, -1) for s, w in zip(shape, want)) or shape.count(-1) > 1:
            raise CallFailed(
                grpc.StatusCode.INVALID_ARGUMENT,
                f"{field}.shape: expected {want} (one dimension may be -1), got {shape}",
                ErrorReason.INVALID_REQUEST,
            )
        try:
            arr = tensor_utils.unpack_tensor(tensor)
        except Exception as e:
            raise CallFailed(
                grpc.StatusCode.INVALID_ARGUMENT, f"{field}: cannot unpack: {e}", ErrorReason.INVALID_REQUEST
            ) from None
        arr = np.asarray(arr, dtype=checker.dtype)
        if arr.shape != checker.shape:
            try:
                arr = np.broadcast_to(arr, checker.shape)
            except ValueError:
                raise CallFailed(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"{field}.shape: {list(arr.shape)} does not fit {want}",
                    ErrorReason.INVALID_REQUEST,
                ) from None
        try:
            return checker.check_array(arr, field)
        except InvalidRequest as e:
            raise CallFailed(grpc.StatusCode.INVALID_ARGUMENT, str(e), e.reason, e.field) from None

    def close(self) -> None:
        """The stream ended: leave (stops the arm) and drop a world this stream created."""
        try:
            self._leave("dm_env_rpc stream ended")
        finally:
            with self.svc._lock:
                w = self.svc.world
                if w.created_by == self.number and w.joined_by is None:
                    w.created_by = None
