"""Clients of the env service: `RemoteEnv` (a gymnasium.Env) and `RemoteVectorEnv` (many servers).

Every call has a deadline. Calls that are safe to repeat (GetSpec, GetStatus, Reset, Stop) retry
with backoff while the server is UNAVAILABLE (a restart), for up to ``reconnect_s``; a Step is never
repeated behind the caller's back, because the arm may already have moved: it raises
`EnvServerUnavailable` and the caller decides (usually: reset). Steps go over the `Session` stream
by default (one round trip, no per-call setup); ``use_session=False`` uses unary calls.

Observations are read-only numpy views of the received bytes (no copy); copy them to modify.
"""

from __future__ import annotations

import queue
import threading
import time
from pathlib import Path
from typing import Any, Sequence

import grpc
import gymnasium as gym
import numpy as np

from rlhw.env import codec, step_layout, wire
from rlhw.env.auth import SESSION_METADATA_KEY, bearer, check_session_secret, new_session_secret, session_fingerprint
from rlhw.env.v1 import env_pb2 as pb
from rlhw.env.errors import (  # the client's exceptions (re-exported: `from rlhw.env.client import ...`)
    ControlConflictError,
    EnvServerUnavailable,
    EnvServiceError,
    EnvTimeout,
    EpisodeEnded,
    InvalidAction,
    RemoteRobotFault,
    SafetyLocked,
    Unauthenticated,
    _from_rpc_error,
    error_from_message,
)
from rlhw.env.v1 import env_pb2_grpc
from rlhw.robot.gym import set_measurements_apart
from rlhw.robot.spec import EnvSpec


# ---------------------------------------------------------------------------------------------
# Session stream with per-message deadlines


class _Stream:
    """One Session stream. Requests go through a queue; a shared deadline watcher cancels a call
    whose answer is late (grpc's blocking stream iterator has no per-message timeout)."""

    def __init__(self, session_method, metadata, watcher: "_DeadlineWatcher"):
        self._requests: queue.SimpleQueue = queue.SimpleQueue()
        self._call = session_method(iter(self._requests.get, None), metadata=metadata)
        self._watcher = watcher
        self.timed_out = False

    def send(self, message: bytes) -> None:
        self._requests.put(message)

    def receive(self, timeout_s: float) -> bytes:
        deadlines = self._watcher.deadlines()  # arm and disarm inline: this runs every step
        deadlines[self] = time.monotonic() + timeout_s
        try:
            return next(self._call)
        finally:
            deadlines.pop(self, None)

    def expire(self) -> None:
        self.timed_out = True
        self._call.cancel()

    def close(self) -> None:
        self._requests.put(None)
        self._call.cancel()


class _DeadlineWatcher:
    """A single thread that cancels overdue stream reads (cheaper than a timer per step)."""

    def __init__(self):
        self._deadlines: dict[_Stream, float] = {}
        self._lock = threading.Lock()
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None

    def deadlines(self) -> dict[_Stream, float]:
        """The stream -> deadline map to arm (set) and disarm (pop); starts the thread on first use."""
        if self._thread is None:
            with self._lock:
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name="rlhw-env-deadlines", daemon=True)
                    self._thread.start()
        return self._deadlines

    def _run(self) -> None:
        while not self._closed.wait(0.02):
            now = time.monotonic()
            for stream, deadline in list(self._deadlines.items()):
                if now > deadline:
                    self._deadlines.pop(stream, None)
                    stream.expire()

    def close(self) -> None:
        self._closed.set()


# ---------------------------------------------------------------------------------------------
# Spaces


def _box(spec, batch: tuple[int, ...]) -> gym.spaces.Box:
    dtype = np.dtype(spec.dtype)
    shape = batch + tuple(spec.shape)
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        low = info.min if spec.low is None else spec.low
        high = info.max if spec.high is None else spec.high
    elif dtype == np.bool_:
        return gym.spaces.MultiBinary(shape)
    else:
        low = -np.inf if spec.low is None else spec.low
        high = np.inf if spec.high is None else spec.high
    low = np.broadcast_to(np.asarray(low, dtype=np.float64), shape).astype(dtype)
    high = np.broadcast_to(np.asarray(high, dtype=np.float64), shape).astype(dtype)
    return gym.spaces.Box(low=low, high=high, shape=shape, dtype=dtype)


def spaces_from_spec(spec: EnvSpec, batched: bool | None = None):
    """(observation_space, action_space); with a batched spec the spaces include the batch dimension."""
    batch = (spec.num_envs,) if (spec.num_envs > 1 if batched is None else batched) else ()
    obs = gym.spaces.Dict({name: _box(s, batch) for name, s in spec.observations.items()})
    return obs, _box(spec.action, batch)


# ---------------------------------------------------------------------------------------------
# RemoteEnv


class RemoteEnv(gym.Env):
    """A gymnasium.Env backed by an env server at ``address`` (``host:port`` or ``unix:/path``).

    ``token``: the server's bearer token (needed off loopback). ``tls_root_cert``: PEM (path or
    bytes) of the CA/self-signed cert to trust; enables TLS. ``session_secret``: proves this client's
    session for the single-controller rule (random by default; at least 32 characters, never shown
    by the server, which names the session by ``session_fingerprint``). ``session_id``: a name for
    this client in your own logs only; it proves nothing and the server never sees it. ``timeout_s``/``reset_timeout_s``: deadlines.
    ``reconnect_s``: how long repeatable calls retry while the server is unavailable.
    ``measurements_in_info=False``: ``timestamps`` and ``timing`` go to ``last_measurements``
    instead of ``info`` (as rlhw.robot.gym.GymRobotEnv; for tools that compare infos).
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
        measurements_in_info: bool = True,
    ):
        self.address = address
        self.measurements_in_info = measurements_in_info
        self.last_measurements: dict[str, Any] = {}  # with measurements_in_info=False
        secret = check_session_secret(session_secret) if session_secret is not None else new_session_secret()
        self.session_fingerprint = session_fingerprint(secret)
        self.session_id = session_id or self.session_fingerprint
        self.timeout_s = timeout_s
        self.reset_timeout_s = reset_timeout_s
        self.reconnect_s = reconnect_s
        self.use_session = use_session
        self._metadata = [(SESSION_METADATA_KEY, secret)]
        if token:
            self._metadata.append(bearer(token))
        self._metadata = tuple(self._metadata)
        options = [
            ("grpc.max_receive_message_length", max_message_mb * 1024 * 1024),
            ("grpc.max_send_message_length", max_message_mb * 1024 * 1024),
            ("grpc.initial_reconnect_backoff_ms", 100),
            ("grpc.min_reconnect_backoff_ms", 100),
            ("grpc.max_reconnect_backoff_ms", 1000),
        ]
        if tls_root_cert is not None:
            pem = tls_root_cert if isinstance(tls_root_cert, bytes) else Path(tls_root_cert).read_bytes()
            if tls_server_name:
                options.append(("grpc.ssl_target_name_override", tls_server_name))
            self._channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(root_certificates=pem), options)
        else:
            self._channel = grpc.insecure_channel(address, options)
        self._stub = env_pb2_grpc.EnvStub(self._channel)
        # Steps, resets and the Session stream move raw bytes: requests are written by hand and
        # responses read with rlhw.env.wire / step_layout, so images arrive as numpy views of the message.
        self._raw_step = self._channel.unary_unary("/rlhw.env.v1.Env/Step")
        self._raw_reset = self._channel.unary_unary("/rlhw.env.v1.Env/Reset")
        self._raw_session = self._channel.stream_stream("/rlhw.env.v1.Env/Session")
        self._watcher = _DeadlineWatcher()
        self._stream: _Stream | None = None
        self._closed = False
        self.env_spec: EnvSpec = codec.env_spec_from_message(self._retrying(self._stub.GetSpec, pb.GetSpecRequest(), timeout_s).spec)
        self.num_envs = self.env_spec.num_envs
        self.observation_space, self.action_space = spaces_from_spec(self.env_spec)
        self._action_code = codec.dtype_code(self.env_spec.action.dtype)
        self._action_dtype = np.dtype(self.env_spec.action.dtype)
        # Per step only the action's bytes change: the request's other bytes are written once.
        self._action_shape = self.action_space.shape
        self._request_prefix = {session: wire.step_request_prefix(self._action_shape, self._action_dtype, session)
                                for session in (False, True)}
        self._reader = step_layout.StepReader() if self.num_envs == 1 else None

    # -- plumbing -------------------------------------------------------------------------------
    def _retrying(self, method, request, timeout_s: float):
        """Call a repeatable method, retrying with backoff while the server is UNAVAILABLE."""
        give_up = time.monotonic() + self.reconnect_s
        delay = 0.05
        attempts = 0
        while True:
            attempts += 1
            try:
                return method(request, timeout=timeout_s, metadata=self._metadata)
            except grpc.RpcError as e:
                if e.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() + delay > give_up:
                    err = _from_rpc_error(self.address, e)
                    if isinstance(err, EnvServerUnavailable):
                        err = EnvServerUnavailable(
                            self.address, f"unreachable after {attempts} attempts over {self.reconnect_s:g} s "
                            f"({e.details()}); is `rlhw serve-env` running there?", "UNAVAILABLE")
                    raise err from None
                time.sleep(delay)
                delay = min(delay * 2, 1.0)

    def _session_call(self, request: bytes, timeout_s: float):
        self._send(request)
        return self._receive(timeout_s)

    def _send(self, request: bytes) -> None:
        """Queue a serialised SessionRequest on the stream (opened on first use)."""
        if self._stream is None:
            self._stream = _Stream(self._raw_session, self._metadata, self._watcher)
        self._stream.send(request)

    def _receive(self, timeout_s: float):
        """The next SessionResponse as (kind, head message, observations); errors raised."""
        return self._parse_session(self._receive_bytes(timeout_s))

    def _parse_session(self, response: bytes):
        kind, head, observations = wire.read_session_response(response)
        if kind == "error":
            err = error_from_message(self.address, head)
            if isinstance(err, ControlConflictError):
                self._drop_stream()  # the server ends a refused would-be controller's stream
            raise err
        return kind, head, observations

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
                raise EnvServerUnavailable(self.address, "the server closed the session stream", "UNAVAILABLE") from None
            raise _from_rpc_error(self.address, e) from None
        return response

    def _drop_stream(self) -> None:
        if self._stream is not None:
            self._stream.close()
            self._stream = None

    # -- gymnasium API --------------------------------------------------------------------------
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        request = pb.ResetRequest(seed=seed) if seed is not None else pb.ResetRequest()
        if self.use_session:
            give_up = time.monotonic() + self.reconnect_s
            delay = 0.05
            message = pb.SessionRequest(reset=request).SerializeToString()
            while True:
                try:
                    _, response, observations = self._session_call(message, self.reset_timeout_s)
                    break
                except EnvServerUnavailable:
                    if time.monotonic() + delay > give_up:
                        raise
                    time.sleep(delay)
                    delay = min(delay * 2, 1.0)
        else:
            data = self._retrying(self._raw_reset, request.SerializeToString(), self.reset_timeout_s)
            response, observations = wire.read_response(data, pb.ResetResponse)
        obs, stamps = observations.get("observation", ({}, {}))
        info = {"timestamps": _stamps(stamps), "timing": dict(response.timing), "success": _flags(response.success, self.num_envs)}
        if not self.measurements_in_info:
            self.last_measurements = set_measurements_apart(info)
        return obs, info

    def step(self, action):
        arr = np.asarray(action)
        if arr.dtype != self._action_dtype:
            arr = arr.astype(self._action_dtype)  # the server checks bounds and finiteness
        session = self.use_session
        if arr.shape == self._action_shape:
            request = self._request_prefix[session] + arr.tobytes()
        else:  # the server names the shape it expects
            request = wire.encode_step_request(arr, session)
        if session:
            stream = self._stream
            if stream is None:
                stream = self._stream = _Stream(self._raw_session, self._metadata, self._watcher)
            stream._requests.put(request)
            data = self._receive_bytes(self.timeout_s)
        else:
            try:
                data = self._raw_step(request, timeout=self.timeout_s, metadata=self._metadata)
            except grpc.RpcError as e:
                raise _from_rpc_error(self.address, e) from None
        reader = self._reader
        if reader is not None:
            fast = reader.read(data)  # the common case: laid out like the previous step
            if fast is not None:
                if not self.measurements_in_info:
                    self.last_measurements = set_measurements_apart(fast[4])
                return fast
        if session:
            _, response, observations = self._parse_session(data)
        else:
            response, observations = wire.read_response(data, pb.StepResponse)
        if reader is not None:
            reader.learn(data, response, session)
        out = self._unpack_step(response, observations)
        if not self.measurements_in_info:
            self.last_measurements = set_measurements_apart(out[4])
        return out

    def _unpack_step(self, response: pb.StepResponse, observations: dict):
        obs, stamps = observations.get("observation", ({}, {}))
        n = self.num_envs
        info: dict[str, Any] = {
            "timestamps": _stamps(stamps),
            "timing": dict(response.timing),
            "success": _flags(response.success, n),
            "fault": codec.faults_from_wire(response.fault, n),
            "fault_message": (response.fault_message[0] if n == 1 and response.fault_message else list(response.fault_message)),
        }
        if n == 1:
            info["intervened"] = bool(response.intervened[0]) if response.intervened else False
        else:
            info["intervened"] = (np.asarray(response.intervened, dtype=bool) if response.intervened
                                  else np.zeros(n, dtype=bool))
        if response.HasField("executed_action"):
            info["executed_action"] = codec.from_tensor(response.executed_action)
        if response.final_mask:
            info["final_observation"] = observations.get("final_observation", ({}, {}))[0]
            info["_final_observation"] = np.asarray(response.final_mask, dtype=bool)
        if n == 1:
            return obs, float(response.reward[0]), bool(response.terminated[0]), bool(response.truncated[0]), info
        return (obs, np.asarray(response.reward, dtype=np.float32), np.asarray(response.terminated, dtype=bool),
                np.asarray(response.truncated, dtype=bool), info)

    # -- the rest of the service ----------------------------------------------------------------
    def stop(self, release: bool = False) -> pb.StopResponse:
        """Stop the arm now (any client may); ``release=True`` also gives up control if we hold it."""
        return self._retrying(self._stub.Stop, pb.StopRequest(release=release), self.timeout_s)

    def status(self) -> pb.GetStatusResponse:
        return self._retrying(self._stub.GetStatus, pb.GetStatusRequest(), self.timeout_s)

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


def _stamps(stamps: dict[str, Any]) -> dict[str, Any]:
    return {k: (float(v) if not isinstance(v, float) and np.ndim(v) == 0 else v) for k, v in stamps.items()}


def _flags(values, n: int):
    if n == 1:
        return bool(values[0]) if len(values) else False
    return np.asarray(values, dtype=bool)


# ---------------------------------------------------------------------------------------------
# RemoteVectorEnv


class RemoteVectorEnv(gym.vector.VectorEnv):
    """One vector env over many servers (each may host several instances); calls go out in parallel.

    Autoreset is same-step, as in rlhw.robot.batch.BatchedEnv: when an instance ends, the returned
    observation row is the first of its next episode and the last one is in
    ``info["final_observation"]`` (rows where ``info["_final_observation"]`` is True).
    """

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self, addresses: Sequence[str], token: str | None = None, **kwargs):
        if not addresses:
            raise ValueError("addresses: give at least one env server address")
        kwargs.setdefault("use_session", True)
        self.envs = [RemoteEnv(a, token, **kwargs) for a in addresses]
        first = self.envs[0].env_spec
        for env in self.envs[1:]:
            s = env.env_spec
            if _shape_sig(s) != _shape_sig(first):
                raise ValueError(
                    f"addresses: server {env.address} serves {_shape_sig(s)} but {self.envs[0].address} serves "
                    f"{_shape_sig(first)}; a vector env needs identical specs"
                )
        self.counts = [e.num_envs for e in self.envs]
        self.num_envs = sum(self.counts)
        self.single_observation_space, self.single_action_space = spaces_from_spec(first, batched=False)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self._offsets = np.cumsum([0] + self.counts)

    def _parallel(self, calls: list[tuple[RemoteEnv, bytes]], timeout_s: float) -> list:
        """Send every request first, then collect: the servers work at the same time."""
        for env, req in calls:
            env._send(req)
        return [env._receive(timeout_s) for env, _ in calls]

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        seeds = [None] * len(self.envs) if seed is None else [seed + int(o) for o in self._offsets[:-1]]
        results = [None] * len(self.envs)
        threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, _safe(self.envs[i].reset, seed=seeds[i])))
                   for i in range(len(self.envs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for r in results:
            if isinstance(r, BaseException):
                raise r
        obs = self._stack([r[0] for r in results])
        info = {"timestamps": [r[1]["timestamps"] for r in results]}
        return obs, info

    def step(self, actions):
        actions = np.asarray(actions, dtype=self.single_action_space.dtype)
        if actions.shape[0] != self.num_envs:
            raise ValueError(f"actions: expected a leading dimension of {self.num_envs}, got shape {actions.shape}")
        requests = []
        for i, env in enumerate(self.envs):
            a = actions[self._offsets[i]: self._offsets[i + 1]]
            a = a[0] if env.num_envs == 1 else a
            requests.append((env, wire.encode_step_request(a, True)))
        responses = self._parallel(requests, max(e.timeout_s for e in self.envs))
        steps = [env._unpack_step(head, observations) for env, (_, head, observations) in zip(self.envs, responses)]
        obs_parts, rewards, terms, truncs, final_obs, final_mask = [], [], [], [], [], []
        done_single = []
        for i, (env, (obs, rew, term, trunc, info)) in enumerate(zip(self.envs, steps)):
            rewards.append(np.atleast_1d(rew)); terms.append(np.atleast_1d(term)); truncs.append(np.atleast_1d(trunc))
            if env.num_envs == 1:
                final_obs.append(obs)
                done = bool(term or trunc)
                final_mask.append(np.array([done]))
                if done:
                    done_single.append(i)
            else:
                final_obs.append(info.get("final_observation") or {k: np.zeros_like(v) for k, v in obs.items()})
                final_mask.append(info.get("_final_observation", np.zeros(env.num_envs, bool)))
            obs_parts.append(obs)
        if done_single:  # same-step autoreset for single-instance servers, in parallel
            reset = pb.SessionRequest(reset=pb.ResetRequest()).SerializeToString()
            resets = self._parallel([(self.envs[i], reset) for i in done_single],
                                    max(self.envs[i].reset_timeout_s for i in done_single))
            for i, (_, _, observations) in zip(done_single, resets):
                obs_parts[i] = observations.get("observation", ({}, {}))[0]
        mask = np.concatenate(final_mask)
        info = {"timing": [s[4]["timing"] for s in steps]}
        if mask.any():
            info["final_observation"] = self._stack(final_obs)
            info["_final_observation"] = mask
        return (self._stack(obs_parts), np.concatenate(rewards).astype(np.float32), np.concatenate(terms),
                np.concatenate(truncs), info)

    def _stack(self, parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        out = {}
        for name in self.single_observation_space.spaces:
            rows = [p[name] if env.num_envs > 1 else p[name][None] for p, env in zip(parts, self.envs)]
            out[name] = np.concatenate(rows, axis=0)
        return out

    def close_extras(self, **kwargs) -> None:
        for env in self.envs:
            env.close()


def _safe(fn, **kwargs):
    try:
        return fn(**kwargs)
    except BaseException as e:  # re-raised in the caller's thread
        return e


def _shape_sig(spec: EnvSpec):
    return (
        tuple((n, s.dtype, tuple(s.shape)) for n, s in spec.observations.items()),
        (spec.action.dtype, tuple(spec.action.shape)),
    )


# ---------------------------------------------------------------------------------------------
# Read-only probe (for the smoke test and operators)


def probe_env_server(
    address: str,
    token: str | None = None,
    *,
    tls_root_cert: str | Path | bytes | None = None,
    timeout_s: float = 3.0,
) -> dict[str, Any]:
    """Check an env server without moving anything: health, spec and status, with round-trip times.

    Returns ``{"address", "healthy", "health_status", "spec" (EnvSpec), "controller", "steps",
    "faults", "env_status" (dict), "rtt_ms"}``; raises an `EnvServiceError` subclass when the server
    cannot be reached or refuses (wrong token, ...). Takes no control and sends no Reset/Step.
    """
    import json

    from grpc_health.v1 import health_pb2, health_pb2_grpc

    metadata = (bearer(token),) if token else ()
    if tls_root_cert is not None:
        pem = tls_root_cert if isinstance(tls_root_cert, bytes) else Path(tls_root_cert).read_bytes()
        channel = grpc.secure_channel(address, grpc.ssl_channel_credentials(root_certificates=pem))
    else:
        channel = grpc.insecure_channel(address)
    try:
        t0 = time.perf_counter()
        health = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="rlhw.env.v1.Env"), timeout=timeout_s, metadata=metadata
        )
        rtt_ms = (time.perf_counter() - t0) * 1e3
        stub = env_pb2_grpc.EnvStub(channel)
        spec = codec.env_spec_from_message(stub.GetSpec(pb.GetSpecRequest(), timeout=timeout_s, metadata=metadata).spec)
        status = stub.GetStatus(pb.GetStatusRequest(), timeout=timeout_s, metadata=metadata)
    except grpc.RpcError as e:
        raise _from_rpc_error(address, e) from None
    finally:
        channel.close()
    return {
        "address": address,
        "healthy": health.status == health_pb2.HealthCheckResponse.SERVING,
        "health_status": health_pb2.HealthCheckResponse.ServingStatus.Name(health.status),
        "spec": spec,
        "controller": status.controller,
        "steps": status.steps,
        "faults": list(status.faults),
        "env_status": json.loads(status.env_status_json or "{}"),
        "rtt_ms": rtt_ms,
    }
