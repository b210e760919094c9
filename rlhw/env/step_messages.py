"""A step on the wire, both ways: the server's `StepWriter`, the client's `StepReader`.

Every message is protobuf's: the writer fills a StepResponse with protobuf's generated code (`fill_step`) and the
reader parses it with protobuf's parser. One thing is declared once, from the spec, at both ends (the server when
it starts, the client when it has the spec): each observation the spec names goes on the wire as a `DeclaredTensor`
(rlhw.env.declared), a StepResponse of its own holding only that observation, cut from protobuf's own bytes of it;
the answer is protobuf's serialisation of everything else, then one such piece per observation, which protobuf
parses as one message, and which the reader reads as views of the received bytes. Nothing is learned from the
traffic: an observation that is not as the spec declares it (another dtype or shape, not C-contiguous,
big-endian) goes through `fill_step` with the rest. Requests, resets and everything else go through protobuf's
generated code alone.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from google.protobuf.message import DecodeError

from rlhw.env import codec
from rlhw.env.declared import DeclaredTensor
from rlhw.env.v1 import env_pb2 as pb
from rlhw.robot.spec import EnvSpec, TensorSpec
from rlhw.robot.step import NotesSource, Step, StepNotes

_F4 = np.dtype("<f4")
_VERDICT_TO_WIRE = {None: pb.OPERATOR_VERDICT_UNSPECIFIED, True: pb.OPERATOR_VERDICT_YES, False: pb.OPERATOR_VERDICT_NO}
_VERDICT_FROM_WIRE = {v: k for k, v in _VERDICT_TO_WIRE.items()}


def _reported(step: Step, action: np.ndarray) -> bool:
    """Whether the step's executed actions and intervention flags go on the wire: only where they say
    something the client does not know (an operator acted, or a fault came before anything was sent);
    otherwise the client takes its own action as executed."""
    return True in step.intervened.tolist() or step.executed.tobytes() != action.tobytes()  # (a few floats)


def verdicts_to_wire(step: Step) -> list[int]:
    """The operator's verdicts of the step's instances as the wire's `OperatorVerdict` values, or none at all
    where nobody was asked (the usual step: nothing goes on the wire)."""
    verdicts = [n.operator_verdict for n in step.notes]
    return [] if verdicts.count(None) == len(verdicts) else [_VERDICT_TO_WIRE[v] for v in verdicts]


def notes_from_wire(values, n: int) -> tuple[StepNotes, ...]:
    """One `StepNotes` per instance holding its operator's verdict where the server sent verdicts, else none
    (``()``): the wire carries no other note. A value this client does not know (a newer server), or a count
    that is not the server's instances, raises, naming the field."""
    if not len(values):
        return ()
    if len(values) != n or any(v not in _VERDICT_FROM_WIRE for v in values):
        raise ValueError(
            f"StepResponse.operator_verdict holds {list(values)}: expected {n} OperatorVerdict values this client "
            "knows; update rlhw (proto/rlhw/env/v1/env.proto) to the server's version"
        )
    return tuple(StepNotes(operator_verdict=_VERDICT_FROM_WIRE[v], source=NotesSource.WIRE) for v in values)


def wire_observations(obs: Mapping, stamps: Mapping, n: int) -> tuple[Mapping, Mapping]:
    """A call's observations and capture times as the wire holds them: one instance's rows (name -> float
    capture times), a batch as it is."""
    if n != 1:
        return obs, stamps
    return {k: v[0] for k, v in obs.items()}, {k: float(v[0]) for k, v in stamps.items()}


def fill_step(
    message: pb.StepResponse, step: Step, timing: dict[str, float], action: np.ndarray, obs: Mapping, stamps: Mapping
) -> None:
    """Set ``message`` (in place) to ``step``, the step of ``action``, with the server's ``timing`` (the env's
    phases and the server's own, `EnvHost.step`) and the wire's ``obs`` and ``stamps`` (`wire_observations`; the
    writer leaves out the observations it appends as declared tensors). Faults, executed actions and intervention
    flags only where they say something (a fault; `_reported`), the operator's verdicts only where one was asked
    (`verdicts_to_wire`): empty fields are the wire's "none", and every field set costs."""
    message.reward.extend(step.reward.tolist())
    message.terminated.extend(step.terminated.tolist())
    message.truncated.extend(step.truncated.tolist())
    message.success.extend(step.success.tolist())
    if any(step.fault):
        message.fault.extend([codec.fault_to_wire(k) for k in step.fault])
        message.fault_message.extend(step.fault_message)
    codec.fill_map(message.timing, timing)
    codec.fill_observation(message.observation, obs, stamps)
    if step.final_obs is not None:
        codec.fill_observation(message.final_observation, step.final_obs)
        message.final_mask.extend(step.final_mask.tolist())
    if _reported(step, action):
        codec.fill_tensor(message.executed_action, step.executed.reshape(action.shape))
        message.intervened.extend(step.intervened.tolist())
    if verdicts := verdicts_to_wire(step):
        message.operator_verdict.extend(verdicts)


# ---------------------------------------------------------------------------------------------
# the server: DeclaredTensor and StepWriter


def declare_observation(name: str, spec: TensorSpec, num_envs: int, in_session: bool) -> DeclaredTensor | None:
    """Observation ``name`` as a StepResponse (``in_session``: SessionResponse{step}) holding only it, on the wire's
    terms: little-endian, one instance's unbatched."""
    dtype = codec.numpy_dtype(codec.dtype_code(spec.dtype))
    shape = ((num_envs,) if num_envs > 1 else ()) + tuple(int(d) for d in spec.shape)

    def put(message, array: np.ndarray) -> None:
        codec.fill_tensor((message.step if in_session else message).observation.tensors[name], array)

    new = pb.SessionResponse if in_session else pb.StepResponse
    return DeclaredTensor.declare(f"observation {name!r}", dtype, shape, new, put)


class StepWriter:
    """Serialises the server's answers to steps (`serialize`): protobuf's serialisation of the step, then each
    observation the spec declares as its `DeclaredTensor` with the array's bytes."""

    def __init__(self, spec: EnvSpec):
        n = int(spec.num_envs)
        self.written = self.filled = (
            0  # declared observations written as declared / through protobuf's fill (GetStatus)
        )
        self.declared: dict[bool, dict[str, DeclaredTensor]] = {}  # in_session -> observation -> its piece
        for in_session in (False, True):
            pieces = {name: declare_observation(name, s, n, in_session) for name, s in spec.observations.items()}
            self.declared[in_session] = {name: piece for name, piece in pieces.items() if piece is not None}

    def serialize(self, step: Step, timing: dict[str, float], action: np.ndarray, in_session: bool) -> bytes:
        """A StepResponse (``in_session``: a SessionResponse{step}) of ``step``, the step of ``action``."""
        obs, stamps = wire_observations(step.obs, step.stamps, step.num_envs)
        pieces, rest, declared = [], dict(obs), self.declared[in_session]
        for name, piece in declared.items():  # (in the spec's order: the reader's, backwards)
            value = obs.get(name)
            if piece.fits(value):
                pieces += piece.pieces(value)
                del rest[name]
        filled = len(declared) - (len(obs) - len(rest))
        self.written += len(declared) - filled
        self.filled += filled
        response = pb.SessionResponse() if in_session else pb.StepResponse()
        fill_step(response.step if in_session else response, step, timing, action, rest, stamps)
        data = response.SerializeToString()
        return b"".join((data, *pieces)) if pieces else data


# ---------------------------------------------------------------------------------------------
# the client: StepReader


class StepReader:
    """Reads a StepResponse of one server (``num_envs`` instances) into a `Step`: the observations the spec declares
    where the message ends with them (`split`), everything else from protobuf's parse."""

    def __init__(self, spec: EnvSpec):
        n = self.num_envs = spec.num_envs
        self.action_shape = (n, *spec.action.shape)
        self._no_faults, self._no_messages = (None,) * n, ("",) * n
        self.declared: dict[bool, tuple[tuple[str, DeclaredTensor], ...]] = {}  # backwards: the last piece first
        for in_session in (False, True):
            pieces = ((name, declare_observation(name, s, n, in_session)) for name, s in spec.observations.items())
            self.declared[in_session] = tuple((name, piece) for name, piece in pieces if piece is not None)[::-1]

    def split(self, data: bytes, in_session: bool) -> tuple[bytes | memoryview, dict[str, np.ndarray]]:
        """``data`` (a StepResponse; ``in_session``: a SessionResponse) as (the bytes for protobuf's parse, the
        declared observations it ends with as views of ``data``). Protobuf's reading of the whole is the parse of
        the first merged with the second, where the parse ends exactly where the second begins."""
        end, views = len(data), {}
        for name, piece in self.declared[in_session]:
            view = piece.view_before(data, end)
            if view is not None:
                views[name] = view
                end -= piece.size
        return (memoryview(data)[:end] if views else data), views

    def parse(self, data: bytes, in_session: bool) -> tuple[pb.StepResponse | pb.SessionResponse, dict]:
        """(the parsed message, the declared observations it ends with as views) of ``data``; where the bytes before
        them are not a whole message of the same kind, all of ``data`` parsed (protobuf's errors raised)."""
        kind = pb.SessionResponse if in_session else pb.StepResponse
        head, views = self.split(data, in_session)
        if views:
            try:
                message = kind.FromString(head)
            except DecodeError:  # (the bytes before them ended inside a field: they were no declared pieces)
                message = None
            if message is not None and (not in_session or message.WhichOneof("kind") == "step"):
                return message, views
        return kind.FromString(data), {}

    def read(self, message: pb.StepResponse, action: np.ndarray, views: Mapping | None = None) -> Step:
        """The Step of any StepResponse to ``action`` with the declared observations ``views`` read after it
        (`split`): the server sends the executed actions and intervention flags only where they differ from what the
        client knows (``action``, no operator), and the operator's verdicts (the step's only notes) only where one
        was asked."""
        n = self.num_envs
        executed = self.requested(action)
        obs, stamps = codec.observation_from_message(message.observation)  # (an unset one reads as empty)
        if views:
            obs = {**obs, **views}  # (protobuf's merge: a map entry read later replaces an earlier one)
        final_obs = final_mask = None
        if message.final_mask:
            final_obs = codec.observation_from_message(message.final_observation)[0] or None
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
            codec.map_of(message.timing),
            final_obs,
            final_mask,
            notes=notes_from_wire(message.operator_verdict, n),
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
