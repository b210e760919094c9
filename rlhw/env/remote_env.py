"""`RemoteEnv`: a gymnasium.Env backed by one env server.

Every call has a deadline. Calls that are safe to repeat (GetSpec, GetStatus, Reset, Stop) are
retried by gRPC itself on UNAVAILABLE (rlhw.env.grpc_channel), and when the server is down they
wait up to ``reconnect_s`` for it to come back; a Step is never repeated behind the caller's back,
because the arm may already have moved: it raises `EnvServerUnavailable` and the caller decides
(usually: reset). Steps go over the `Session` stream by default (one round trip, no per-call
setup); ``use_session=False`` uses unary calls.

Observations are read-only numpy views: of the received bytes for the observations the spec declares
(rlhw.env.step_messages), of the parsed tensors' bytes for any other; copy them to modify.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import grpc
import gymnasium as gym
import numpy as np

from rlhw.env import codec
from rlhw.env.auth import SESSION_METADATA_KEY, bearer, check_session_secret, new_session_secret, session_fingerprint
from rlhw.env.errors import (
    ControlConflictError,
    EnvServerUnavailable,
    EnvServiceError,
    EnvTimeout,
    error_from_message,
    error_from_rpc,
)
from rlhw.env.grpc_channel import open_channel, wait_until_connected
from rlhw.env.session_stream import DeadlineWatcher, SessionStream
from rlhw.env.step_messages import StepReader, capture_times, flags
from rlhw.env.v1 import env_pb2 as pb
from rlhw.env.v1 import env_pb2_grpc
from rlhw.retry import retry
from rlhw.robot.gym import spaces_from_spec, take_measurements
from rlhw.robot.spec import EnvSpec
from rlhw.robot.step import Reset, Step


class RemoteEnv(gym.Env):
    """A gymnasium.Env backed by an env server at ``address`` (``host:port`` or ``unix:/path``).

    ``token``: the server's bearer token (needed off loopback). ``tls_root_cert``: PEM (path or
    bytes) of the CA/self-signed cert to trust; enables TLS. ``session_secret``: proves this client's
    session for the single-controller rule (random by default; at least 32 characters, never shown
    by the server, which names the session by ``session_fingerprint``). ``session_id``: a name for
    this client in your own logs only; it proves nothing and the server never sees it. ``timeout_s``/``reset_timeout_s``: deadlines.
    ``reconnect_s``: how long repeatable calls wait for a server that is unavailable.
    ``timestamps`` and ``timing`` of each call are in ``last_measurements``, and in ``info`` too only
    with ``measurements_in_info=True`` (as rlhw.robot.gym.GymRobotEnv: by default ``info`` holds the
    transition's facts only, so gymnasium's ``check_env`` passes).
    """

    metadata = {"render_modes": []}

    def __init__(
        self,
        address: str,
        token: str | None = None,
        *,
        tls_root_cert: str | Path | bytes | None = None,
        tls_server_name: str | None = None,
        session_secret: str | None = None,
        session_id: str | None = None,
        timeout_s: float = 5.0,
        reset_timeout_s: float = 60.0,
        reconnect_s: float = 10.0,
        use_session: bool = True,
        max_message_mb: int = 64,
        measurements_in_info: bool = False,
    ):
        self.address = address
        self.measurements_in_info = measurements_in_info
        self.last_measurements: dict[str, Any] = {}  # timestamps and timing of the last call
        secret = check_session_secret(session_secret) if session_secret is not None else new_session_secret()
        self.session_fingerprint = session_fingerprint(secret)
        self.session_id = session_id or self.session_fingerprint
        self.timeout_s = timeout_s
        self.reset_timeout_s = reset_timeout_s
        self.reconnect_s = reconnect_s
        self.use_session = use_session
        self._metadata = ((SESSION_METADATA_KEY, secret), bearer(token)) if token else ((SESSION_METADATA_KEY, secret),)
        self._channel = open_channel(
            address, tls_root_cert=tls_root_cert, tls_server_name=tls_server_name, max_message_mb=max_message_mb
        )
        self._stub = env_pb2_grpc.EnvStub(self._channel)
        # Steps, resets and the Session stream move bytes, serialised and parsed here, so that a
        # Session stream's response is parsed as the SessionResponse it is (also an in-band error).
        self._raw_step = self._channel.unary_unary("/rlhw.env.v1.Env/Step")
        self._raw_reset = self._channel.unary_unary("/rlhw.env.v1.Env/Reset")
        self._raw_session = self._channel.stream_stream("/rlhw.env.v1.Env/Session")
        self._watcher = DeadlineWatcher()
        self._stream: SessionStream | None = None
        self._closed = False
        self.env_spec: EnvSpec = codec.env_spec_from_message(
            self._repeatable(self._stub.GetSpec, pb.GetSpecRequest(), timeout_s).spec
        )
        self.num_envs = self.env_spec.num_envs
        self.observation_space, self.action_space = spaces_from_spec(self.env_spec)
        self._action_dtype = np.dtype(self.env_spec.action.dtype)
        self._reader = StepReader(self.env_spec)

    # -- plumbing -------------------------------------------------------------------------------
    def _repeatable(self, method, request, timeout_s: float):
        """Call a method that is safe to repeat. gRPC retries it on UNAVAILABLE (the channel's
        service config); if the server is still unavailable, wait up to ``reconnect_s`` for the
        channel to connect and call once more."""
        try:
            return method(request, timeout=timeout_s, metadata=self._metadata)
        except grpc.RpcError as e:
            if e.code() != grpc.StatusCode.UNAVAILABLE:
                raise error_from_rpc(self.address, e) from None
        connected = wait_until_connected(self._channel, self.reconnect_s)
        try:
            return method(request, timeout=timeout_s, metadata=self._metadata)
        except grpc.RpcError as e:
            err = error_from_rpc(self.address, e)
            if isinstance(err, EnvServerUnavailable) and not connected:
                err = EnvServerUnavailable(
                    self.address,
                    f"unreachable for {self.reconnect_s:g} s ({e.details()}); is `rlhw serve-env` running there?",
                    "UNAVAILABLE",
                )
            raise err from None

    def _session_call(self, request: bytes, timeout_s: float):
        self._send(request)
        return self._receive(timeout_s)

    def _send(self, request: bytes) -> None:
        """Queue a serialised SessionRequest on the stream (opened on first use)."""
        if self._stream is None:
            self._stream = SessionStream(self._raw_session, self._metadata, self._watcher)
        self._stream.send(request)

    def _receive(self, timeout_s: float):
        """The next SessionResponse as (kind, head message); errors raised."""
        return self._parse_session(self._receive_bytes(timeout_s))

    def _parse_session(self, response: bytes):
        return self._kind_of(pb.SessionResponse.FromString(response))

    def _kind_of(self, message: pb.SessionResponse):
        """(kind, head message) of a parsed SessionResponse; errors raised."""
        kind = message.WhichOneof("kind")
        if kind == "error":
            err = error_from_message(self.address, message.error)
            if isinstance(err, ControlConflictError):
                self._drop_stream()  # the server ends a refused would-be controller's stream
            raise err
        if kind is None:
            raise EnvServiceError(
                self.address,
                "the server sent an empty SessionResponse (neither reset, step "
                "nor error); is the server another version of rlhw?",
            )
        return kind, getattr(message, kind)

    def _receive_bytes(self, timeout_s: float) -> bytes:
        """The next SessionResponse, serialised; stream failures raised."""
        stream = self._stream
        try:
            response = stream.receive(timeout_s)
        except (grpc.RpcError, StopIteration) as e:
            self._stream = None
            stream.close()
            if stream.timed_out:
                raise EnvTimeout(self.address, f"no answer within {timeout_s:g} s", "DEADLINE_EXCEEDED") from None
            if isinstance(e, StopIteration):
                raise EnvServerUnavailable(
                    self.address, "the server closed the session stream", "UNAVAILABLE"
                ) from None
            raise error_from_rpc(self.address, e) from None
        return response

    def _drop_stream(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    # -- gymnasium API (the public Gymnasium edge: tuples built from the typed results) -------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        obs, info = self.reset_typed(seed).gym()
        self.last_measurements = take_measurements(info, self.measurements_in_info)
        return obs, info

    def step(self, action):
        out = self.step_typed(action).gym()
        self.last_measurements = take_measurements(out[4], self.measurements_in_info)
        return out

    # -- typed calls: `Reset` and `Step` (rlhw.robot.step), for the RL loop and RemoteVectorEnv ----------
    @property
    def typed(self) -> TypedRemoteEnv:
        """This client under the env contract (`rlhw.robot.step.EnvContract`), as the episode loop steps an env."""
        return TypedRemoteEnv(self)

    def reset_typed(self, seed: int | None = None) -> Reset:
        """Reset every instance of the server's env (observations with a leading instance axis)."""
        request = pb.ResetRequest(seed=seed) if seed is not None else pb.ResetRequest()
        if self.use_session:
            # A stream is not covered by gRPC's retry policy: reopen it until the server answers.
            message = pb.SessionRequest(reset=request).SerializeToString()
            _, response = retry(
                lambda: self._session_call(message, self.reset_timeout_s),
                retry_on=EnvServerUnavailable,
                within_s=self.reconnect_s,
            )
        else:
            response = pb.ResetResponse.FromString(
                self._repeatable(self._raw_reset, request.SerializeToString(), self.reset_timeout_s)
            )
        return self._reset_of(response)

    def step_typed(self, action) -> Step:
        """One step of every instance: ``action`` has the spec's shape, with a leading instance axis for a batch."""
        arr = self._action_array(action)
        if self.use_session:
            self._send(codec.step_request(arr, True))
            return self._decode_step(self._receive_bytes(self.timeout_s), arr, True)
        try:
            data = self._raw_step(codec.step_request(arr, False), timeout=self.timeout_s, metadata=self._metadata)
        except grpc.RpcError as e:
            raise error_from_rpc(self.address, e) from None
        return self._decode_step(data, arr, False)

    def send_step(self, action) -> None:
        """Queue a step on the Session stream without waiting for its answer (`receive_step` reads it), so
        that several servers can work at once (`RemoteVectorEnv`)."""
        self._send(codec.step_request(self._action_array(action), True))  # a wrong shape: the server names it

    def receive_step(self, action, timeout_s: float) -> Step:
        """The answer to the step of ``action`` that `send_step` queued; errors raised."""
        return self._decode_step(self._receive_bytes(timeout_s), self._action_array(action), True)

    def send_reset(self, seed: int | None = None) -> None:
        """Queue an unseeded (or seeded) reset on the Session stream; `receive_reset` reads its answer."""
        request = pb.ResetRequest(seed=seed) if seed is not None else pb.ResetRequest()
        self._send(pb.SessionRequest(reset=request).SerializeToString())

    def receive_reset(self, timeout_s: float) -> Reset:
        """The answer to the reset that `send_reset` queued; errors raised."""
        _, response = self._receive(timeout_s)
        return self._reset_of(response)

    # -- decoding --------------------------------------------------------------------------------
    def _action_array(self, action) -> np.ndarray:
        arr = np.asarray(action)
        return arr if arr.dtype == self._action_dtype else arr.astype(self._action_dtype)  # the server checks bounds

    def _decode_step(self, data: bytes, action: np.ndarray, session: bool) -> Step:
        """The Step of a StepResponse (or, with ``session``, a SessionResponse{step}) of ``action`` (errors
        raised)."""
        message, views = self._reader.parse(data, session)
        return self._reader.read(self._kind_of(message)[1] if session else message, action, views)

    def _reset_of(self, response: pb.ResetResponse) -> Reset:
        obs, stamps = codec.observations_of(response).get("observation", ({}, {}))
        return Reset(
            self._reader.instances(obs),
            capture_times(stamps),
            flags(response.success, self.num_envs),
            codec.map_of(response.timing),
        )

    # -- the rest of the service ----------------------------------------------------------------
    def stop(self, release: bool = False) -> pb.StopResponse:
        """Stop the arm now (any client may); ``release=True`` also gives up control if we hold it."""
        return self._repeatable(self._stub.Stop, pb.StopRequest(release=release), self.timeout_s)

    def status(self) -> pb.GetStatusResponse:
        return self._repeatable(self._stub.GetStatus, pb.GetStatusRequest(), self.timeout_s)

    def close(self) -> None:
        """End the session (the server stops the arm and frees control) and close the channel."""
        if self._closed:
            return
        self._closed = True
        had_stream = self._stream is not None
        self._drop_stream()
        if not had_stream or not self.use_session:
            try:
                self._stub.Stop(pb.StopRequest(release=True), timeout=min(self.timeout_s, 2.0), metadata=self._metadata)
            except grpc.RpcError:
                pass
        self._watcher.close()
        self._channel.close()
        super().close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


class TypedRemoteEnv:
    """A `RemoteEnv`'s typed side under the env contract's names (`rlhw.robot.step.EnvContract`). Why a view and
    not the client's own methods: a RemoteEnv is a gymnasium.Env, whose ``spec`` (a registration's) and ``reset``
    (``(obs, info)``) are Gymnasium's; here they are the client's `RemoteEnv.env_spec` and `RemoteEnv.reset_typed`."""

    def __init__(self, remote: RemoteEnv):
        self.remote, self.spec = remote, remote.env_spec

    def reset(self, seed: int | None = None) -> Reset:
        return self.remote.reset_typed(seed)

    def step(self, action) -> Step:
        return self.remote.step_typed(action)

    def stop(self) -> None:
        self.remote.stop()

    def status(self) -> dict[str, Any]:
        """The served env's own ``status()`` (GetStatus's ``env_status_json``), as the contract's other envs say it."""
        return json.loads(self.remote.status().env_status_json or "{}")

    def close(self) -> None:
        self.remote.close()
