"""A step on the wire, both ways: the client's `StepRequests`, the server's `StepWriter`, the client's `StepReader`.

Everything goes through protobuf's generated code (the upb C backend); nothing here writes or reads wire bytes by
hand. Each side has a plain path that handles every step (`fill_step`, `StepReader.plain`) and a path for the
usual step that skips building what the previous step already built:

- the usual step is one call's answer with no fault, no final observation, and the client's own action executed
  (no operator took over): almost every step of a run;
- the writer refills the message it kept from the last usual step of the same layout (the same observation names,
  dtypes and shapes): it sets the tensors' bytes and the scalars, not the maps, shapes and dtypes;
- the reader reads the observations the spec names by key, their dtype, shape and size checked against the spec's,
  instead of walking the maps and learning each tensor's layout;
- the request writer refills one kept request with the action's bytes.

Anything else, or anything that does not match, takes the plain path, which gives the same messages and the same
`Step` (tests/env/test_step_messages.py). Why the two paths: on a 2-core machine each microsecond of Python in a
step's round trip costs about three of latency, and building and walking protobuf's maps was most of each side's
cost; the figures are in docs/benchmarks.md ("The usual step, kept").
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from rlhw.env import codec
from rlhw.env.v1 import env_pb2 as pb
from rlhw.robot.spec import EnvSpec
from rlhw.robot.step import FLAG, Step

_F4, _F8 = np.dtype("<f4"), np.dtype("<f8")
_FLOAT64 = pb.FLOAT64

#: Bytes a kept message takes in before it is dropped for a new one. protobuf (upb) copies each bytes field set
#: into the message's arena and frees the arena only with the message: a message refilled for ever grows for ever
#: (1.2 GB over 90,000 steps of a 64x64 camera, tests/env/test_memory.py).
ARENA_BYTES = 1 << 20


def _reported(step: Step, action: np.ndarray) -> bool:
    """Whether the step's executed actions and intervention flags go on the wire: only where they say
    something the client does not know (an operator acted, or a fault came before anything was sent);
    otherwise the client takes its own action as executed."""
    return True in step.intervened.tolist() or step.executed.tobytes() != action.tobytes()  # (a few floats)


def is_usual(step: Step, action: np.ndarray) -> bool:
    """No fault, no final observation, and ``action`` executed as sent: the step the kept message serves."""
    return step.final_obs is None and not any(step.fault) and not _reported(step, action)


def wire_observations(obs: Mapping, stamps: Mapping, n: int) -> tuple[Mapping, Mapping]:
    """A call's observations and capture times as the wire holds them: one instance's rows (name -> float
    capture times), a batch as it is."""
    if n != 1:
        return obs, stamps
    return {k: v[0] for k, v in obs.items()}, {k: float(v[0]) for k, v in stamps.items()}


def fill_step(message: pb.StepResponse, step: Step, timing: dict[str, float], action: np.ndarray) -> None:
    """Set ``message`` (in place) to ``step``, the step of ``action``, with the server's ``timing`` (the
    env's phases and the server's own, `EnvHost.step`): one instance's observations unbatched
    (the wire's shape for ``num_envs == 1``); faults, executed actions and intervention flags only where they
    say something (a fault; `_reported`): empty fields are the wire's "none", and every field set costs."""
    message.reward.extend(step.reward.tolist())
    message.terminated.extend(step.terminated.tolist())
    message.truncated.extend(step.truncated.tolist())
    message.success.extend(step.success.tolist())
    if any(step.fault):
        message.fault.extend([codec.fault_to_wire(k) for k in step.fault])
        message.fault_message.extend(step.fault_message)
    message.timing.update(timing)
    obs, stamps = wire_observations(step.obs, step.stamps, step.num_envs)
    codec.fill_observation(message.observation, obs, stamps)
    if step.final_obs is not None:
        codec.fill_observation(message.final_observation, step.final_obs)
        message.final_mask.extend(step.final_mask.tolist())
    if _reported(step, action):
        codec.fill_tensor(message.executed_action, step.executed.reshape(action.shape))
        message.intervened.extend(step.intervened.tolist())


# ---------------------------------------------------------------------------------------------
# the server: StepWriter


class _KeptStep:
    """A usual step's serialised answer kept as a message, with its parts at hand to refill (`refill`)."""

    def __init__(self, response: pb.StepResponse | pb.SessionResponse, message: pb.StepResponse, step: Step):
        tensors, times = message.observation.tensors, message.observation.capture_time
        self.response = response
        self.num_envs = step.num_envs
        self.tensors = [(name, v.dtype, v.shape, tensors[name]) for name, v in step.obs.items()]
        self.stamps = [(name, times[name]) for name in step.stamps]
        self.scalars = (message.reward, message.terminated, message.truncated, message.success)
        self.timing = message.timing
        self.timing_keys = set(message.timing)
        self.refill_bytes = sum(v.nbytes for v in step.obs.values()) + 8 * len(self.stamps) * self.num_envs
        self.taken = 0  # bytes the refills have copied into the message's arena

    @staticmethod
    def keeps(step: Step) -> bool:
        """Whether a step's message is worth keeping: numpy arrays in the wire's byte order (a refill writes their
        bytes as they are), and small enough for several refills within `ARENA_BYTES` (with large images the
        copies cost far more than the maps a refill saves)."""
        arrays = list(step.obs.values())
        return (
            all(isinstance(v, np.ndarray) and v.dtype.byteorder != ">" for v in arrays)
            and 4 * sum(v.nbytes for v in arrays) <= ARENA_BYTES
        )

    def refill(self, step: Step, timing: dict[str, float]) -> bool:
        """Write ``step`` (a usual step) into the kept message; False where its layout differs (the message is
        then half written and must be dropped), or once it has taken in `ARENA_BYTES`. One instance's rows are
        written as the whole (1, ...) array: the same bytes as the row the plain path writes."""
        obs, stamps, n = step.obs, step.stamps, self.num_envs
        if len(obs) != len(self.tensors) or len(stamps) != len(self.stamps) or step.num_envs != n:
            return False
        self.taken += self.refill_bytes
        if self.taken > ARENA_BYTES:
            return False
        for (name, dtype, shape, message), (key, value) in zip(self.tensors, obs.items()):
            if key != name or not isinstance(value, np.ndarray) or value.dtype != dtype or value.shape != shape:
                return False
            message.data = value.tobytes()
        for (name, message), (key, value) in zip(self.stamps, stamps.items()):
            if key != name or not isinstance(value, np.ndarray) or value.dtype != _F8 or value.shape != (n,):
                return False
            message.data = value.tobytes()  # one float64, or n: the wire's scalar or [n] capture time
        for field, values in zip(self.scalars, (step.reward, step.terminated, step.truncated, step.success)):
            if n == 1:
                field[0] = values.tolist()[0]
            else:
                field[:] = values.tolist()
        if timing.keys() != self.timing_keys:
            self.timing.clear()
            self.timing_keys = set(timing)
        kept = self.timing
        for k, v in timing.items():
            kept[k] = v
        return True


class StepWriter:
    """Serialises the server's answers to steps: `fill_step` into a new message, or, for the usual step, a
    refill of the message kept from the previous usual step (one per handler thread and kind of call, since a
    controller's calls may overlap)."""

    def __init__(self):
        self._kept = threading.local()

    def serialize(self, step: Step, timing: dict[str, float], action: np.ndarray, in_session: bool) -> bytes:
        """A StepResponse (``in_session``: a SessionResponse{step}) of ``step``, the step of ``action``."""
        usual = is_usual(step, action)
        kept: dict[bool, _KeptStep] = self._kept.__dict__
        if usual:
            previous = kept.get(in_session)
            if previous is not None and previous.refill(step, timing):
                return previous.response.SerializeToString()
        response = pb.SessionResponse() if in_session else pb.StepResponse()
        message = response.step if in_session else response
        fill_step(message, step, timing, action)
        if usual and _KeptStep.keeps(step):
            kept[in_session] = _KeptStep(response, message, step)
        elif usual:
            kept.pop(in_session, None)  # a layout not worth keeping: the last one's message goes too
        return response.SerializeToString()


# ---------------------------------------------------------------------------------------------
# the client: StepRequests and StepReader


@dataclass(eq=False)
class _KeptRequest:
    dtype: np.dtype
    shape: tuple[int, ...]
    tensor: pb.Tensor  # the request's action, refilled in place
    request: pb.StepRequest | pb.SessionRequest
    taken: int = 0  # bytes the refills have copied into its arena


class StepRequests:
    """Serialised StepRequests (``in_session``: SessionRequest{step}) for actions of one shape and dtype, each
    a refill of a kept request; an action of another layout, or the first after `ARENA_BYTES`, gets a new one."""

    def __init__(self):
        self._kept: dict[bool, _KeptRequest] = {}

    def serialize(self, action: np.ndarray, in_session: bool) -> bytes:
        kept = self._kept.get(in_session)
        if kept is not None and action.dtype == kept.dtype and action.shape == kept.shape and kept.taken < ARENA_BYTES:
            kept.tensor.data = action.tobytes()
            kept.taken += action.nbytes
            return kept.request.SerializeToString()
        request = pb.SessionRequest() if in_session else pb.StepRequest()
        tensor = (request.step if in_session else request).action
        codec.fill_tensor(tensor, action)
        if action.dtype.byteorder != ">":  # a refill writes the action's bytes as they are
            self._kept[in_session] = _KeptRequest(action.dtype, action.shape, tensor, request)
        return request.SerializeToString()


class StepReader:
    """Reads a StepResponse of one server (its spec, ``num_envs`` instances) into a `Step`."""

    def __init__(self, spec: EnvSpec):
        n = self.num_envs = spec.num_envs
        self.action_shape = (n, *spec.action.shape)
        self.layout = []  # the observations as a usual step carries them: name, code, wire shape, dtype, shape, bytes
        for name, s in spec.observations.items():
            dtype = np.dtype(s.dtype)
            code = codec.CODE_BY_DTYPE.get(dtype)
            if code is None:  # a spec the wire cannot carry: the plain path reads whatever comes
                self.layout = None
                break
            wire = list(s.shape) if n == 1 else [n, *s.shape]
            shape = (n, *s.shape)
            self.layout.append((name, code, wire, codec.numpy_dtype(code), shape, int(np.prod(shape)) * dtype.itemsize))
        self._stamp_shape = [] if n == 1 else [n]  # a capture time on the wire: one float64, or one per instance
        self._instance_axis = (n,)
        self._no_flags = FLAG[False] if n == 1 else _read_only(np.zeros(n, bool))
        self._no_faults, self._no_messages = (None,) * n, ("",) * n

    def read(self, message: pb.StepResponse, action: np.ndarray) -> Step:
        """The Step of a parsed StepResponse to ``action`` (the client's array, the spec's dtype)."""
        step = self.usual(message, action)
        return step if step is not None else self.plain(message, action)

    def usual(self, message: pb.StepResponse, action: np.ndarray) -> Step | None:
        """The Step of a usual step's message, its observations as the spec has them; None for anything else."""
        n, layout = self.num_envs, self.layout
        if layout is None or message.fault or message.final_mask or message.intervened:
            return None
        if message.HasField("executed_action"):
            return None
        reward, terminated = message.reward[:], message.terminated[:]
        truncated, success = message.truncated[:], message.success[:]
        if not len(reward) == len(terminated) == len(truncated) == len(success) == n:
            return None
        observation = message.observation
        tensors, times = observation.tensors, observation.capture_time
        if len(tensors) != len(layout):
            return None
        obs = {}
        for name, code, wire, dtype, shape, nbytes in layout:
            tensor = tensors.get(name)  # (a read: indexing a message map inserts what it does not hold)
            if tensor is None:
                return None
            data = tensor.data  # each access of a bytes field makes a new bytes object: read it once
            if tensor.dtype != code or len(data) != nbytes or tensor.shape[:] != wire:
                return None
            obs[name] = np.ndarray(shape, dtype, data)  # a read-only view, as np.frombuffer's, 30 % cheaper
        stamps, stamp_shape, stamp_bytes = {}, self._stamp_shape, 8 * n
        for name in times:
            stamp = times[name]
            data = stamp.data
            if stamp.dtype != _FLOAT64 or len(data) != stamp_bytes or stamp.shape[:] != stamp_shape:
                return None
            stamps[name] = np.ndarray(self._instance_axis, _F8, data)
        timing = message.timing
        return Step(
            obs,
            np.array(reward, np.float64),
            FLAG[terminated[0]] if n == 1 else np.array(terminated, bool),
            FLAG[truncated[0]] if n == 1 else np.array(truncated, bool),
            FLAG[success[0]] if n == 1 else np.array(success, bool),
            self.requested(action),
            self._no_flags,
            self._no_faults,
            self._no_messages,
            stamps,
            {k: timing[k] for k in timing},  # by key: dict(map) walks protobuf's generic Mapping, 2-3x slower
        )

    def plain(self, message: pb.StepResponse, action: np.ndarray) -> Step:
        """The Step of any StepResponse to ``action``: the server sends the executed actions and intervention flags
        only where they differ from what the client knows (``action``, no operator)."""
        n = self.num_envs
        observations = codec.observations_of(message)
        executed = self.requested(action)
        obs, stamps = observations.get("observation", ({}, {}))
        final_obs = final_mask = None
        if message.final_mask:
            final_obs = observations.get("final_observation", ({}, {}))[0] or None
            final_mask = None if final_obs is None else codec.array_of(message.final_mask, bool)
        if message.HasField("executed_action"):
            executed = codec.from_tensor(message.executed_action).astype(np.float32).reshape(executed.shape)
        return Step(
            self.instances(obs),
            codec.array_of(message.reward, np.float64),
            codec.array_of(message.terminated, bool),
            codec.array_of(message.truncated, bool),
            flags(message.success, n),
            executed,
            flags(message.intervened, n),
            tuple(codec.fault_from_wire(v) for v in message.fault) or self._no_faults,
            tuple(message.fault_message) or self._no_messages,
            capture_times(stamps),
            dict(message.timing),
            final_obs,
            final_mask,
        )

    def requested(self, action: np.ndarray) -> np.ndarray:
        """The client's action as the executed one, float32 with the leading instance axis."""
        return np.asarray(action, _F4).reshape(self.action_shape)

    def instances(self, obs: dict) -> dict:
        """The wire's observations with a leading instance axis (one instance's are unbatched on the wire)."""
        return {k: v[None] for k, v in obs.items()} if self.num_envs == 1 else obs


def capture_times(stamps: Mapping) -> dict[str, np.ndarray]:
    """Capture times, name -> float64 (n,): one instance's are floats on the wire (the common case)."""
    return {
        k: np.array([v]) if isinstance(v, float) else np.asarray(v, np.float64).reshape(-1) for k, v in stamps.items()
    }


def flags(values, n: int) -> np.ndarray:
    """A repeated bool field as (n,) flags; an empty one (the wire's default) is all False."""
    return codec.array_of(values, bool) if len(values) else np.zeros(n, bool)


def _read_only(arr: np.ndarray) -> np.ndarray:
    arr.flags.writeable = False
    return arr
