"""A step on the wire, both ways: the client's `StepRequests`, the server's `StepWriter`, the client's `StepReader`.

Each side has a plain path that handles every step through protobuf's generated code (`fill_step`,
`StepReader.plain`) and a path for the usual step: one call's answer with no fault, no final observation, and the
client's own action executed (no operator took over), almost every step of a run. The usual step's message is the
same as the last one's but for its values, so both ends learn its layout from protobuf's own bytes once
(rlhw.env.step_layout) and then write (server) or read (client) only the values, where `StepPlaces` says each part
of the `Step` lies. A request is the prefix protobuf writes before an action of its shape and dtype, then the
action's bytes (`codec.request_prefix`; the server reads such a request unparsed, `ActionChecker.from_request`).

Anything else, or anything that does not match the learned layout byte for byte, takes the plain path, which gives
the same messages and the same `Step` (tests/env/test_step_messages.py). Why the two paths: on a 2-core machine each
microsecond of Python in a step's round trip costs about three of latency, and building and walking protobuf's maps
was most of each side's cost; the figures are in docs/benchmarks.md ("The usual step by its layout").
"""

from __future__ import annotations

import struct
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from rlhw.env import codec
from rlhw.env.step_layout import Layout, Part
from rlhw.env.v1 import env_pb2 as pb
from rlhw.robot.spec import EnvSpec
from rlhw.robot.step import FLAG, Step

_F4, _F8 = np.dtype("<f4"), np.dtype("<f8")
_DOUBLE = struct.Struct("<d").pack


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
# a usual step's values, in the places its layout gives them: StepPlaces


@dataclass(frozen=True, eq=False)
class StepPlaces:
    """Which value of a learned `Layout` holds which part of a `Step`: the usual step's message, both ways. Each
    value's place is its index among the layout's parts; tensors also have their offset in the message."""

    layout: Layout
    observations: tuple[tuple[str, int, int, np.dtype, tuple[int, ...]], ...]  # key, place, offset, dtype, shape
    capture_times: tuple[tuple[str, int, int], ...]  # key, place, offset
    timing: tuple[tuple[str, int], ...]
    scalars: tuple[int, int, int, int]  # reward, terminated, truncated, success
    keys: tuple[frozenset, frozenset, frozenset]  # the observations', capture times' and timing's keys

    @classmethod
    def learn(cls, data: bytes, in_session: bool, step: Step, timing: Mapping[str, float]) -> StepPlaces | None:
        """Where ``data``, the serialised usual ``step`` with ``timing``, holds each of its values; None where the
        message is not laid out as exactly that step: every observation a little-endian array with bytes, one
        capture time per instance, one value per instance of each scalar."""
        layout = Layout.learn(data, in_session)
        arrays = step.obs.values()
        if layout is None or not all(isinstance(v, np.ndarray) and v.dtype.byteorder != ">" for v in arrays):
            return None
        n = step.num_envs
        expected = {(Part.OBSERVATION, k): v.nbytes for k, v in step.obs.items()}
        expected |= {(Part.CAPTURE_TIME, k): 8 * n for k in step.stamps}
        expected |= {(Part.TIMING, k): 8 for k in timing}
        expected |= {(Part.REWARD, ""): 4 * n} | {(p, ""): n for p in (Part.TERMINATED, Part.TRUNCATED, Part.SUCCESS)}
        if dict(zip(layout.slots, layout.sizes)) != expected:
            return None
        at = {slot: (layout.at(i), start) for i, (slot, start) in enumerate(zip(layout.slots, layout.starts))}
        return cls(
            layout,
            tuple((k, *at[Part.OBSERVATION, k], v.dtype, v.shape) for k, v in step.obs.items()),
            tuple((k, *at[Part.CAPTURE_TIME, k]) for k in step.stamps),
            tuple((k, at[Part.TIMING, k][0]) for k in timing),
            tuple(at[p, ""][0] for p in (Part.REWARD, Part.TERMINATED, Part.TRUNCATED, Part.SUCCESS)),
            (frozenset(step.obs), frozenset(step.stamps), frozenset(timing)),
        )

    def write(self, step: Step, timing: Mapping[str, float]) -> bytes | None:
        """The message of usual ``step`` with ``timing``; None where it is not laid out as the learned one. The
        arrays go into the message as they are (no copy of a camera's frame on the way)."""
        obs, stamps = step.obs, step.stamps
        obs_keys, stamp_keys, timing_keys = self.keys
        if obs.keys() != obs_keys or stamps.keys() != stamp_keys or timing.keys() != timing_keys:
            return None
        parts = self.layout.blank()
        for key, at, _, dtype, shape in self.observations:
            value = obs[key]  # the same bytes in another shape or dtype would say something else on the wire
            if not isinstance(value, np.ndarray) or value.dtype != dtype or value.shape != shape:
                return None
            parts[at] = value if value.flags.c_contiguous else value.tobytes()  # (C order, as the plain path)
        for key, at, _ in self.capture_times:
            value = stamps[key]
            if not isinstance(value, np.ndarray) or value.dtype != _F8:
                return None
            parts[at] = value
        for key, at in self.timing:
            parts[at] = _DOUBLE(timing[key])
        reward, terminated, truncated, success = self.scalars
        parts[reward] = step.reward.astype(_F4)
        parts[terminated] = step.terminated  # bools: the bytes 0 and 1, as on the wire
        parts[truncated] = step.truncated
        parts[success] = step.success
        return self.layout.pack(parts)  # (None where a value is not its slot's size)


# ---------------------------------------------------------------------------------------------
# the server: StepWriter


class StepWriter:
    """Serialises the server's answers to steps: `fill_step` into a new message, or, for the usual step, the
    values written into the layout learned from an earlier usual step's message (one per kind of call)."""

    def __init__(self):
        self._places = _LearnedPlaces()

    def serialize(self, step: Step, timing: dict[str, float], action: np.ndarray, in_session: bool) -> bytes:
        """A StepResponse (``in_session``: a SessionResponse{step}) of ``step``, the step of ``action``."""
        usual = is_usual(step, action)
        if usual:
            places = self._places.get(in_session)
            data = places.write(step, timing) if places is not None else None
            if data is not None:
                return data
        response = pb.SessionResponse() if in_session else pb.StepResponse()
        fill_step(response.step if in_session else response, step, timing, action)
        data = response.SerializeToString()
        if usual:
            self._places.learn(data, in_session, step, timing)
        return data


class _LearnedPlaces:
    """The `StepPlaces` learned for each kind of call (in a Session stream or not), shared by the writer and the
    reader. A usual step that cannot be laid out (an empty tensor, big-endian arrays) leaves the last places in
    place; learning is tried again at the next chance after one such failure, then after waiting 2, 4, ... up to 256
    chances, so that a run of such steps is not walked every step, and at once again after a success."""

    def __init__(self, most: int = 256):
        self._places: dict[bool, StepPlaces] = {}
        self.most, self.failures, self.wait = most, 0, 0

    def get(self, in_session: bool) -> StepPlaces | None:
        return self._places.get(in_session)

    def learn(self, data: bytes, in_session: bool, step: Step, timing: Mapping[str, float]) -> None:
        """Learn the places of ``data``, the serialised usual ``step`` with ``timing``, unless waiting."""
        self.wait -= 1
        if self.wait >= 0:
            return
        places = StepPlaces.learn(data, in_session, step, timing)
        if places is None:
            self.failures += 1
            self.wait = 0 if self.failures <= 1 else min(2 ** (self.failures - 1), self.most)
        else:
            self.failures = self.wait = 0
            self._places[in_session] = places


# ---------------------------------------------------------------------------------------------
# the client: StepRequests and StepReader


class StepRequests:
    """Serialised StepRequests (``in_session``: SessionRequest{step}): the prefix protobuf writes before an action of
    the last shape and dtype (`codec.request_prefix`), then the action's bytes."""

    def __init__(self):
        self._last: dict[bool, tuple] = {}  # in_session -> (shape, dtype, prefix or None)

    def serialize(self, action: np.ndarray, in_session: bool) -> bytes:
        last = self._last.get(in_session)
        if last is None or last[0] != action.shape or last[1] != action.dtype:
            prefix = codec.request_prefix(action.shape, action.dtype, in_session)
            last = self._last[in_session] = (action.shape, action.dtype, prefix)
        prefix = last[2]
        return prefix + action.tobytes() if prefix is not None else codec.step_request(action, in_session)


class StepReader:
    """Reads a StepResponse of one server (``num_envs`` instances) into a `Step`: a usual step by the layout learned
    from an earlier one (`laid_out`), any other by protobuf's parse (`read`)."""

    def __init__(self, spec: EnvSpec):
        n = self.num_envs = spec.num_envs
        self.action_shape = (n, *spec.action.shape)
        self._places = _LearnedPlaces()
        self._instance_axis = (n,)
        self._rewards = struct.Struct(f"<{n}f")  # the wire's float32 rewards, one per instance
        self._no_flags = FLAG[False] if n == 1 else _read_only(np.zeros(n, bool))
        self._no_faults, self._no_messages = (None,) * n, ("",) * n

    def laid_out(self, data: bytes, action: np.ndarray, in_session: bool) -> Step | None:
        """The Step of ``data``, a serialised answer to ``action``, where it is laid out as the learned usual step
        (``in_session``: a SessionResponse{step}); None for anything else (parse it and `read` it)."""
        places = self._places.get(in_session)
        values = places.layout.read(data) if places is not None else None
        if values is None:
            return None
        reward, terminated, truncated, success = (values[i] for i in places.scalars)
        outcome = (_packed_flags(terminated), _packed_flags(truncated), _packed_flags(success))
        if any(f is None for f in outcome):  # a byte other than 0 or 1: protobuf reads it otherwise
            return None
        axis = self._instance_axis
        return Step(
            {k: np.ndarray(shape, dtype, data, start) for k, _, start, dtype, shape in places.observations},  # views
            np.array(self._rewards.unpack(reward), np.float64),
            *outcome,  # terminated, truncated, success
            self.requested(action),
            self._no_flags,
            self._no_faults,
            self._no_messages,
            {k: np.ndarray(axis, _F8, data, start) for k, _, start in places.capture_times},
            {k: values[i] for k, i in places.timing},
        )

    def read(
        self, message: pb.StepResponse, action: np.ndarray, data: bytes | None = None, in_session: bool = False
    ) -> Step:
        """The Step of a parsed StepResponse to ``action``; with ``data``, its serialised form (``in_session``: of
        the SessionResponse around it), a usual step's layout is learned from it for `laid_out`."""
        step = self.plain(message, action)
        if data is not None and is_usual(step, action):
            self._places.learn(data, in_session, step, step.timing)
        return step

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


def _packed_flags(data: bytes) -> np.ndarray | None:
    """Packed bools as (n,) flags (one instance's: the shared `FLAG`); None where a byte is not 0 or 1."""
    if len(data) == 1:
        return _FLAG_BYTES.get(data)
    values = np.frombuffer(data, np.uint8)
    return values.view(bool) if values.max() <= 1 else None


_FLAG_BYTES = {b"\x00": FLAG[False], b"\x01": FLAG[True]}


def _read_only(arr: np.ndarray) -> np.ndarray:
    arr.flags.writeable = False
    return arr
