"""The messages of the training pipeline, one frozen dataclass each: the contract between its processes.

    env worker --EnvStep (the direct step lane, rlhw.rl.pipeline.lane)--> rollout worker
    rollout worker --Actions (the same lane, back)--> env worker
    rollout worker --transition batch (replay channel, key = learner rank)--> learner worker
    learner worker rank 0 --PolicyWeights (weights channel, key = rollout rank)--> rollout worker
    env worker --EnvProgress, rollout worker --RolloutProgress (``poll()``, Ray calls)--> controller
        (a simulated arm's EnvProgress also carries its judge's JudgeReport: to the controller, nowhere else)

Why dataclasses: these cross process boundaries (the lane's codec, Ray channels and calls), so a field renamed
on one side would otherwise surface as a ``KeyError`` deep in the other process. A receiver checks the type of
what it got with `expect`, which names the channel and both types.

`EnvStep` and `Actions` cross the robot network on the direct step lane, so they have a wire codec of
their own (`pack` / `unpack`): a typed header (kind, then each array's group, name, dtype and shape) and the
arrays' raw bytes. Decoding builds numpy arrays of a fixed list of dtypes and nothing else, so no byte string
can make the receiver run code (a pickle can), and every size is checked against the header before use.

Shapes: ``k`` is the number of env instances of one env worker that want an action at this step (0 to
``env.num_envs``); ``n`` the number of transitions a message carries; ``...`` an observation's or the
action's per-instance shape from the env's `rlhw.robot.spec.EnvSpec`.
"""

from __future__ import annotations

import functools
import math
import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rlhw.rl.policy import Actions as Actions  # the acting policy's answer (rlhw.rl.acting), shared with eval
from rlhw.rl.policy import PolicyWeights as PolicyWeights  # what the weights channel carries
from rlhw.rl.replay import TransitionBatch  # the transitions an EnvStep carries, in the replay buffer's fields
from rlhw.rl.verdicts import VerdictTally

REPLAY_CHANNEL = "rlhw.train.replay"
WEIGHTS_CHANNEL = "rlhw.train.weights"

EpisodeResult = tuple[float, bool, int, int]
"""A finished episode: (return, success, length in steps, steps an operator executed)."""


class MessageTypeError(TypeError):
    """A pipeline process received something other than the message its channel carries."""


def expect(message: Any, cls: type, channel: str) -> Any:
    """``message`` if it is a ``cls``; else a clear error naming the channel and both types."""
    if not isinstance(message, cls):
        raise MessageTypeError(
            f"{channel} carries {cls.__name__} messages, but received a "
            f"{type(message).__module__}.{type(message).__qualname__}; are both ends of the "
            "pipeline running the same rlhw version?"
        )
    return message


@dataclass(frozen=True, slots=True)
class EnvStep:
    """One env step of one env worker, batched whatever ``env.num_envs`` is.

    ``env``: the env worker's rank; the rollout worker answers with `Actions` on the actions channel, key = env.
    ``obs``: ``{name: (k, ...) array}``, the observations of the k instances that want an action; None when k = 0.
    ``rows``: (k,) those instances' indices in the env worker's batch, in the order of ``obs``.
    ``evaluating``: bool (k,), which of them are in an eval episode (they get the deterministic action).
    ``transitions``: the train transitions this step produced (a `TransitionBatch`), or None.
    """

    env: int
    obs: dict[str, np.ndarray] | None
    rows: tuple[int, ...]
    evaluating: np.ndarray
    transitions: TransitionBatch | None = None

    @property
    def wanted(self) -> int:
        """How many actions the env worker waits for (k)."""
        return len(self.evaluating)


@dataclass(frozen=True, slots=True)
class JudgeReport:
    """A simulator's evaluation judge (`Task.judge`, rlhw/robot/rehearsal.py) on what one env worker ran since
    its last poll: the field of a simulated arm only (`EnvProgress.judge` is None where no judge saw a step, as on
    a real arm). It goes to the controller alone: `EnvStep` and its wire codec have no place for it, so no
    observation, reward, done flag, replay row or learner batch carries it.

    ``steps``: env steps the judge gave its verdict on (train and eval); ``eval_episodes``: eval episodes of the
    same poll whose success is the judge's verdict (`Step.outcome`), so a rehearsal's ``eval/success_rate`` is
    the judge's and never the classifier's; ``verdicts``: the success classifier against the judge on the train
    steps it judged (HIL-SERL's sign that the policy fools its classifier)."""

    steps: int
    eval_episodes: int
    verdicts: VerdictTally


@dataclass(frozen=True, slots=True)
class EnvProgress:
    """An env worker's answer to ``poll()``: counters, and what finished since the previous poll.

    ``train_steps``: train steps collected since the worker started (every instance's); ``episodes`` and
    ``eval_results``: finished train and eval episodes since the last poll (each handed over once);
    ``idle``: no work asked for and no episode running; ``error``: why the robot loop failed (None: it runs);
    ``status``: idle, waiting (for the learner, between episodes), episode or failed; ``restarts``: env server
    children restarted; ``faults``: robot faults and refused steps since the last poll, as text for the log;
    ``eval_pending``: eval episodes still wanted; ``utd_wait_s``: seconds the loop has waited for the learner
    (async mode's UTD gate, rlhw.rl.utd_gate) since the worker started; ``judge``: a simulator judge's
    report (`JudgeReport`), None without one; ``notices``: what the worker did that the run's log should say
    (not faults: a retrained classifier taken into use).
    """

    rank: int
    train_steps: int
    idle: bool
    status: str
    restarts: int
    eval_pending: int
    episodes: list[EpisodeResult] = field(default_factory=list)
    eval_results: list[EpisodeResult] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    error: str | None = None
    utd_wait_s: float = 0.0
    judge: JudgeReport | None = None
    notices: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class RolloutProgress:
    """A rollout worker's answer to ``poll()``: actions served, policy calls (batches), the weights version it
    acts with (-1: none yet), why its loop failed (None: it runs), and the robot-loop isolation its loop thread
    runs with (read back from the OS, as an env worker's ``loop_isolation``; None until the loop starts)."""

    rank: int
    served: int
    batches: int
    weights_version: int
    error: str | None = None
    loop_isolation: dict | None = None


# ---- the wire codec of EnvStep and Actions: a typed header and raw array bytes, nothing that can run code

WIRE_DTYPES = tuple(
    np.dtype(name).newbyteorder("<")
    for name in (
        "bool",
        "uint8",
        "int8",
        "uint16",
        "int16",
        "uint32",
        "int32",
        "uint64",
        "int64",
        "float16",
        "float32",
        "float64",
    )
)
"""The dtypes an array may have on the wire (its code there: index + 1), little-endian whatever the host."""
MAX_ARRAYS = 256  # arrays in one message (a reach EnvStep with transitions has about 20)
MAX_NDIM = 8
MAX_PAYLOAD_BYTES = (
    1 << 31
)  # the largest array the codec describes (numpy's); a lane frame is bounded by its spec (lane_frames.py)
_DTYPE_CODE = {dt: i + 1 for i, dt in enumerate(WIRE_DTYPES)}
_KINDS = (EnvStep, Actions)  # a message's kind on the wire: index + 1
_ALIGN = 16  # the header and every array start at a multiple of this in the payload (aligned numpy views)
_HEAD = struct.Struct("<BBHq")  # kind, flags (1: obs present, 2: transitions present), arrays, env rank (EnvStep)
_ARRAY = struct.Struct("<BBBB")  # group, dtype code, ndim, name length; then the UTF-8 name and ndim uint32 dims
_FIELDS, _OBS, _TRANSITIONS = 0, 1, 2  # an array's group: a message field, an observation, a transition field
#: The message fields every kind must carry: name -> (dtype, ndim; None: any ndim >= 1).
_FIELD_SPECS = {
    EnvStep: {"rows": (np.dtype("<i8"), 1), "evaluating": (np.dtype("bool"), 1)},
    Actions: {"actions": (np.dtype("<f4"), None), "versions": (np.dtype("<i8"), 1)},
}


class FrameError(ValueError):
    """Bytes that are not a well-formed `EnvStep` or `Actions` of the wire codec (the lane drops their sender)."""


def _wire_arrays(msg) -> tuple[int, int, int, list[tuple[int, str, np.ndarray]]]:
    """A message's kind, flags, env rank and (group, name, array) list, each array contiguous in its wire dtype."""
    if isinstance(msg, EnvStep):
        kind, env, groups = 1, msg.env, ((_OBS, msg.obs), (_TRANSITIONS, msg.transitions))
        fields = {"rows": msg.rows, "evaluating": msg.evaluating}
    elif isinstance(msg, Actions):
        kind, env, groups = 2, 0, ()
        fields = {"actions": msg.actions, "versions": msg.versions}
    else:
        raise MessageTypeError(
            f"the step lane carries EnvStep and Actions messages, but was given a "
            f"{type(msg).__module__}.{type(msg).__qualname__}"
        )
    specs = _FIELD_SPECS[type(msg)]
    out = [(_FIELDS, name, np.asarray(value, specs[name][0], order="C")) for name, value in fields.items()]
    flags = 0
    for bit, (group, arrays) in enumerate(groups):
        if arrays is not None:
            flags |= 1 << bit
            out += [(group, name, _wire_array(type(msg).__name__, name, value)) for name, value in arrays.items()]
    return kind, flags, env, out


def _wire_array(message: str, name, value) -> np.ndarray:
    """``value`` as a contiguous little-endian array of a wire dtype; a clear error naming the field if it has none."""
    a = np.asarray(value)
    if (
        a.dtype in _DTYPE_CODE
        and a.flags.c_contiguous
        and a.ndim <= MAX_NDIM
        and isinstance(name, str)
        and 0 < len(name) < 64
    ):  # at most 4 UTF-8 bytes a character: the name fits its length byte
        return a  # the common case, checked in one go
    where = f"{message} array {name!r}"
    if not isinstance(name, str) or not 0 < len(name.encode()) < 256:
        raise MessageTypeError(f"{where}: the step lane names arrays with strings of 1-255 UTF-8 bytes")
    code = _DTYPE_CODE.get(a.dtype.newbyteorder("<"))
    if code is None or a.ndim > MAX_NDIM:
        raise MessageTypeError(
            f"{where} has dtype {a.dtype} and {a.ndim} dimensions; the step lane carries arrays "
            f"of {', '.join(map(str, WIRE_DTYPES))} with at most {MAX_NDIM} dimensions: convert it "
            "where the env builds its observation (e.g. np.asarray(x, np.float32))"
        )
    return np.asarray(a, WIRE_DTYPES[code - 1], order="C")


def _padded(n: int) -> int:
    return n + (-n % _ALIGN)


def pack(msg, front: int = 0, back: int = 0) -> tuple[bytearray, int, int]:
    """``msg`` (an `EnvStep` or `Actions`) encoded into one new buffer, after ``front`` bytes and before ``back``
    bytes left for the carrier's own prefix and suffix (the lane's lengths and MAC): the buffer, the header's
    length and the payload's length. `MessageTypeError` names a field the codec cannot carry."""
    kind, flags, env, arrays = _wire_arrays(msg)
    if len(arrays) > MAX_ARRAYS:
        raise MessageTypeError(f"{type(msg).__name__} has {len(arrays)} arrays; the step lane carries {MAX_ARRAYS}")
    described, offsets, payload_len = _describe(tuple((g, n, _DTYPE_CODE[a.dtype], a.shape) for g, n, a in arrays))
    header_len = _padded(_HEAD.size + len(described))
    buf = bytearray(front + header_len + payload_len + back)
    _HEAD.pack_into(buf, front, kind, flags, len(arrays), env)
    buf[front + _HEAD.size : front + _HEAD.size + len(described)] = described
    base = front + header_len
    for (_, _, a), at in zip(arrays, offsets):
        if a.nbytes:
            buf[base + at : base + at + a.nbytes] = memoryview(a).cast("B")
    return buf, header_len, payload_len


@functools.lru_cache(maxsize=64)
def _describe(arrays: tuple[tuple[int, str, int, tuple[int, ...]], ...]) -> tuple[bytes, tuple[int, ...], int]:
    """The header's description of (group, name, dtype code, shape) arrays, their offsets in the payload and its
    length. Cached: an env worker's messages have the same layout step after step."""
    parts, offsets, at = [], [], 0
    for group, name, code, shape in arrays:
        raw = name.encode()
        parts += [_ARRAY.pack(group, code, len(shape), len(raw)), raw, struct.pack(f"<{len(shape)}I", *shape)]
        offsets.append(at)
        at += _padded(math.prod(shape) * WIRE_DTYPES[code - 1].itemsize)
    return b"".join(parts), tuple(offsets), at


def unpack(buf: bytearray, start: int, header_len: int, payload_len: int, expected: type):
    """The ``expected`` message (`EnvStep` or `Actions`) in ``buf``: its header at ``start``, its payload right
    after. The arrays are views of ``buf`` (no copy). `FrameError` says what is malformed."""
    header = memoryview(buf)[start : start + header_len]
    try:
        kind, flags, count, env = _HEAD.unpack_from(header)
    except struct.error:
        raise FrameError(f"a header of {header_len} bytes is shorter than its fixed part") from None
    if not 0 < kind <= len(_KINDS) or _KINDS[kind - 1] is not expected:
        got = _KINDS[kind - 1].__name__ if 0 < kind <= len(_KINDS) else f"an unknown kind ({kind})"
        raise FrameError(f"{got} where {expected.__name__} was expected (are both ends running the same rlhw version?)")
    groups: tuple[dict[str, np.ndarray], ...] = ({}, {}, {})
    base = start + header_len
    for group, name, dtype, n, at, shape in _layout(expected, flags, count, payload_len, bytes(header[_HEAD.size :])):
        groups[group][name] = np.frombuffer(buf, dtype, n, base + at).reshape(shape) if n else np.zeros(shape, dtype)
    fields = groups[_FIELDS]
    if expected is Actions:
        return Actions(fields["actions"], fields["versions"])
    return EnvStep(
        env=env,
        obs=groups[_OBS] if flags & 1 else None,
        rows=tuple(fields["rows"].tolist()),
        evaluating=fields["evaluating"],
        transitions=groups[_TRANSITIONS] if flags & 2 else None,
    )


Layout = tuple[tuple[int, str, np.dtype, int, int, tuple[int, ...]], ...]
"""Where each array of a message is: (group, name, dtype, elements, offset in the payload, shape)."""


@functools.lru_cache(maxsize=64)
def _layout(expected: type, flags: int, count: int, payload_len: int, described: bytes) -> Layout:
    """The arrays a header describes, every rule of the codec checked (`FrameError` otherwise). Cached: a lane
    carries the same layout step after step, and a header that fails is not cached."""
    if flags > 3 or (expected is Actions and flags) or count > MAX_ARRAYS:
        raise FrameError(f"flags {flags} and {count} arrays: not a valid {expected.__name__} header")
    layout, names, pos, at = [], ({}, {}, {}), 0, 0
    for i in range(count):
        try:
            group, code, ndim, name_len = _ARRAY.unpack_from(described, pos)
            name = described[pos + _ARRAY.size : pos + _ARRAY.size + name_len].decode()
            pos += _ARRAY.size + name_len
            if len(name.encode()) != name_len or ndim > MAX_NDIM:
                raise FrameError(f"array {i} runs past the header or has {ndim} dimensions")
            shape = struct.unpack_from(f"<{ndim}I", described, pos)
        except (struct.error, UnicodeDecodeError) as e:
            raise FrameError(f"array {i}'s description is malformed ({e})") from None
        pos += 4 * ndim
        if (
            group > _TRANSITIONS
            or (group and not flags & group)
            or not 0 < code <= len(WIRE_DTYPES)
            or name in names[group]
        ):
            raise FrameError(
                f"array {name!r}: group {group}, dtype code {code} (flags {flags}): not a valid, "
                "unique array of the lane's dtypes"
            )
        dtype, n = WIRE_DTYPES[code - 1], math.prod(shape)
        if math.prod(max(d, 1) for d in shape) * dtype.itemsize > MAX_PAYLOAD_BYTES:  # numpy's bound, empty or not
            raise FrameError(f"array {name!r} {shape} {dtype}: a shape no array of the lane can have")
        if at + n * dtype.itemsize > payload_len:
            raise FrameError(f"array {name!r} {shape} {dtype} ends past the payload's {payload_len} bytes")
        names[group][name] = (dtype, shape)
        layout.append((group, name, dtype, n, at, shape))
        at += _padded(n * dtype.itemsize)
    if at != payload_len or _padded(_HEAD.size + pos) != _HEAD.size + len(described) or any(described[pos:]):
        raise FrameError(
            f"the header's arrays take {at} of the payload's {payload_len} bytes and leave "
            f"{len(described) - pos} header bytes: not a frame of this codec"
        )
    _check_fields(expected, names[_FIELDS])
    return tuple(layout)


def _check_fields(expected: type, fields: dict[str, tuple[np.dtype, tuple[int, ...]]]) -> None:
    """The message's own fields: exactly its names, each of its dtype and rank, of matching lengths."""
    specs = _FIELD_SPECS[expected]
    if set(fields) != set(specs) or any(
        fields[n][0] != dt or (len(fields[n][1]) != nd if nd else not fields[n][1]) for n, (dt, nd) in specs.items()
    ):
        raise FrameError(
            f"{expected.__name__} fields {sorted(fields)} with dtypes and shapes {list(fields.values())}: "
            f"it needs {sorted(specs)}"
        )
    first, second = (fields[n][1][0] for n in specs)
    if first != second:
        raise FrameError(f"{expected.__name__}: {first} {list(specs)[0]} with {second} {list(specs)[1]}")
