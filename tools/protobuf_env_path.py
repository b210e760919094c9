"""The env service's step and reset with protobuf's own generated code, for `bench_env_service.py --compare-wire`.

The shipped service and client write and read Step/Reset messages by hand (rlhw.env.wire,
rlhw.env.step_layout, the raw-bytes action in rlhw.env.validate). These subclasses do the same calls
through the generated messages instead: the server parses every request with ``FromString`` and
builds every response as a message (`codec.fill_observation`, ``SerializeToString``); the client
builds its requests as messages and parses every response with ``FromString`` and
`codec.observation_from_message`. Everything else (control, validation, timing, errors, the gym
step) is the shipped code, so a benchmark of the two measures the wire path alone.
"""

from __future__ import annotations

from time import perf_counter

import grpc
import numpy as np

from rlhw.env import codec
from rlhw.env.errors import ControlConflictError, error_from_message, error_from_rpc
from rlhw.env.host import StepResult
from rlhw.env.remote_env import RemoteEnv
from rlhw.env.service import EnvService, _parse
from rlhw.env.v1 import env_pb2 as pb
from rlhw.env.validate import InvalidRequest
from rlhw.robot.gym import take_measurements


def fill_step_response(message: pb.StepResponse, result: StepResult) -> None:
    """Set ``message`` (in place) to ``result``: what `wire.encode_step_head` + `encode_with_observations` write."""
    message.reward.extend(result.reward)
    message.terminated.extend(result.terminated)
    message.truncated.extend(result.truncated)
    message.success.extend(result.success)
    message.fault.extend([codec.fault_to_wire(k) for k in result.fault])
    message.fault_message.extend(result.fault_message)
    message.timing.update(result.timing)
    codec.fill_observation(message.observation, result.obs, result.stamps)
    if result.final_obs is not None:
        codec.fill_observation(message.final_observation, result.final_obs)
        message.final_mask.extend(result.final_mask or ())
    if result.executed_action is not None:
        codec.fill_tensor(message.executed_action, result.executed_action)
    if result.intervened is not None:
        message.intervened.extend(result.intervened)


class ProtobufEnvService(EnvService):
    """`EnvService` with protobuf's parser and serializer for Step and Reset (unary and Session)."""

    def _reset(self, request: pb.ResetRequest, wrap_field: int | None) -> bytes:
        t0 = perf_counter()
        seed = request.seed if request.HasField("seed") else None
        if seed is not None and not 0 <= seed < 2**63:
            raise InvalidRequest("seed", f"must be between 0 and 2**63-1, got {seed}; leave it unset for an unseeded reset")
        result = self.host.reset(seed)
        result.timing["server"] = perf_counter() - t0
        outer = pb.SessionResponse() if wrap_field is not None else None
        message = outer.reset if outer is not None else pb.ResetResponse()
        message.timing.update(result.timing)
        message.success.extend(result.success)
        codec.fill_observation(message.observation, result.obs, result.stamps)
        return (outer or message).SerializeToString()

    def _step(self, request, wrap_field: int | None) -> bytes:
        t0 = perf_counter()
        if isinstance(request, bytes):  # unary Step bytes, or SessionRequest{step} bytes
            request = _parse(pb.SessionRequest, request).step if wrap_field is not None else _parse(pb.StepRequest, request)
        if not request.HasField("action"):
            raise InvalidRequest("action", "missing; send a Tensor matching GetSpec().spec.action")
        action = self.host.checker.check(request.action)
        t1 = perf_counter()
        result = self.host.step(action)
        timing = result.timing
        timing["validate"] = t1 - t0
        t2 = perf_counter()
        timing["server"] = t2 - t0
        outer = pb.SessionResponse() if wrap_field is not None else None
        message = outer.step if outer is not None else pb.StepResponse()
        fill_step_response(message, result)
        data = (outer or message).SerializeToString()
        timing["encode"] = perf_counter() - t2
        self.host.record(timing)
        return data


def observations_of(message) -> dict:
    """{"observation"|"final_observation": (tensors, stamps)} of a parsed Reset/StepResponse."""
    out = {"observation": codec.observation_from_message(message.observation)}
    if message.DESCRIPTOR.name == "StepResponse" and message.HasField("final_observation"):
        out["final_observation"] = codec.observation_from_message(message.final_observation)
    return out


class ProtobufRemoteEnv(RemoteEnv):
    """`RemoteEnv` with protobuf's serializer for step requests and its parser for every response
    (Session resets and steps, unary steps)."""

    def _parse_session(self, response: bytes):
        message = pb.SessionResponse.FromString(response)
        kind = message.WhichOneof("kind")
        if kind == "error":
            err = error_from_message(self.address, message.error)
            if isinstance(err, ControlConflictError):
                self._drop_stream()
            raise err
        inner = getattr(message, kind)
        return kind, inner, observations_of(inner)

    def step(self, action):
        arr = np.asarray(action, dtype=self._action_dtype)
        if self.use_session:
            request = pb.SessionRequest()
            codec.fill_tensor(request.step.action, arr)
            self._send(request.SerializeToString())
            _, response, observations = self._parse_session(self._receive_bytes(self.timeout_s))
        else:
            request = pb.StepRequest()
            codec.fill_tensor(request.action, arr)
            try:
                data = self._raw_step(request.SerializeToString(), timeout=self.timeout_s, metadata=self._metadata)
            except grpc.RpcError as e:
                raise error_from_rpc(self.address, e) from None
            response = pb.StepResponse.FromString(data)
            observations = observations_of(response)
        out = self._unpack_step(response, observations)
        self.last_measurements = take_measurements(out[4], self.measurements_in_info)
        return out
