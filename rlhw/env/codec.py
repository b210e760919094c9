"""Tensors and specs on the wire: numpy <-> rlhw.env.v1 messages, with as few copies as possible.

Decoding is zero-copy (``numpy.frombuffer`` over the message's bytes). Encoding of the large
tensors (camera images) bypasses the protobuf object model: the server writes the protobuf wire
format itself, with the array's own buffer as the payload, so an image is copied once (into the
outgoing message) instead of three times (``tobytes``, field assignment, serialisation). The
result is ordinary protobuf bytes that any protobuf reader parses.
"""

from __future__ import annotations

import math
import struct
from typing import Iterable, Mapping

import numpy as np

from rlhw.env.v1 import env_pb2 as pb
from rlhw.robot.spec import EnvSpec, TensorSpec

_DTYPES: dict[int, np.dtype] = {
    pb.FLOAT32: np.dtype("<f4"),
    pb.FLOAT64: np.dtype("<f8"),
    pb.FLOAT16: np.dtype("<f2"),
    pb.UINT8: np.dtype("u1"),
    pb.UINT16: np.dtype("<u2"),
    pb.UINT32: np.dtype("<u4"),
    pb.INT8: np.dtype("i1"),
    pb.INT16: np.dtype("<i2"),
    pb.INT32: np.dtype("<i4"),
    pb.INT64: np.dtype("<i8"),
    pb.BOOL: np.dtype("?"),
}
_CODES: dict[str, int] = {dt.name: code for code, dt in _DTYPES.items()}


def dtype_code(dtype) -> int:
    """The wire code of a numpy dtype (or its name)."""
    name = np.dtype(dtype).name
    try:
        return _CODES[name]
    except KeyError:
        raise ValueError(f"dtype {name} cannot go on the wire; use one of {sorted(_CODES)}") from None


def numpy_dtype(code: int) -> np.dtype:
    try:
        return _DTYPES[code]
    except KeyError:
        raise ValueError(f"unknown wire dtype code {code}") from None


def dtype_name(code: int) -> str:
    dt = _DTYPES.get(code)
    return dt.name if dt is not None else f"<unknown dtype {code}>"


# ---------------------------------------------------------------------------------------------
# numpy -> message (small tensors, client side)


def to_tensor(array) -> pb.Tensor:
    """A Tensor message holding a copy of ``array`` (fine for actions; images use the encoders)."""
    arr = _wire_array(array)
    return pb.Tensor(dtype=dtype_code(arr.dtype), shape=arr.shape, data=arr.tobytes())


_LAYOUTS: dict[tuple, tuple[np.dtype, int]] = {}


def from_tensor(tensor: pb.Tensor) -> np.ndarray:
    """A read-only numpy view of the tensor's bytes (no copy). Raises ValueError on a size mismatch."""
    shape = tuple(tensor.shape)
    key = (tensor.dtype, shape)
    layout = _LAYOUTS.get(key)
    if layout is None:
        dt = numpy_dtype(tensor.dtype)
        layout = (dt, math.prod(shape) * dt.itemsize)
        if len(_LAYOUTS) < 4096:
            _LAYOUTS[key] = layout
    dt, expected = layout
    data = tensor.data  # each access of a bytes field makes a new bytes object: read it once
    if len(data) != expected:
        raise ValueError(f"tensor has {len(data)} bytes but shape {list(shape)} of {dt.name} needs {expected}")
    return np.frombuffer(data, dtype=dt).reshape(shape)


def _stamp(tensor: pb.Tensor):
    """A capture time: a float for a scalar float64 tensor (the common case), else an array."""
    if tensor.dtype == pb.FLOAT64 and not tensor.shape:
        data = tensor.data
        if len(data) == 8:
            return _struct_d.unpack(data)[0]
    return from_tensor(tensor)


def _wire_array(array) -> np.ndarray:
    arr = np.asarray(array)
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return np.require(arr, requirements="C")


# ---------------------------------------------------------------------------------------------
# Wire-format writer for responses (server side). Chunks are joined once at the end.


_SMALL_VARINTS = [bytes((i,)) for i in range(128)]


def _varint(value: int) -> bytes:
    if 0 <= value < 128:
        return _SMALL_VARINTS[value]
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        bits = value & 0x7F
        value >>= 7
        if value:
            out.append(bits | 0x80)
        else:
            out.append(bits)
            return bytes(out)


def _len_prefix(field: int, size: int) -> bytes:
    return _varint((field << 3) | 2) + _varint(size)


_F64_CODE = pb.FLOAT64
_struct_d = struct.Struct("<d")
_struct_f = struct.Struct("<f")
_STAMP_PREFIX = bytes((0x08, _F64_CODE, 0x1A, 8))  # dtype=FLOAT64, data: 8 bytes (shape [] omitted)
_CODE_BY_DTYPE = {dt: code for code, dt in _DTYPES.items()}


def _tensor_parts(array) -> tuple[list, int]:
    """Wire pieces of one Tensor message (header bytes, then the array's own buffer) and their size."""
    arr = array if isinstance(array, np.ndarray) else np.asarray(array)
    if not arr.flags.c_contiguous or arr.dtype.byteorder == ">":
        arr = _wire_array(arr)
    code = _CODE_BY_DTYPE.get(arr.dtype)
    if code is None:
        code = dtype_code(arr.dtype)
    head = bytearray((0x08, code))
    if arr.ndim:
        packed = b"".join([_varint(d) for d in arr.shape])
        head += b"\x12" + _varint(len(packed)) + packed
    n = arr.nbytes
    if n:
        head += b"\x1a" + _varint(n)
        if n <= 256:
            head += arr.tobytes()
            return [bytes(head)], len(head)
        return [bytes(head), memoryview(arr.reshape(-1)).cast("B")], len(head) + n
    return [bytes(head)], len(head)


_PREFIXES: dict[tuple, tuple[bytes, int]] = {}
_F64 = np.dtype("<f8")


def _entry_prefix(field: int, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> tuple[bytes, int]:
    """Wire bytes of one map entry up to the tensor's data, and the entry's total size.

    They depend only on (name, dtype, shape), which stay the same step after step, so they are
    built once: per step the encoder writes a cached prefix and the array's own buffer.
    """
    key = (field, name, dtype, shape)
    hit = _PREFIXES.get(key)
    if hit is not None:
        return hit
    code = _CODE_BY_DTYPE.get(dtype)
    if code is None:
        code = dtype_code(dtype)
    tensor_head = bytearray((0x08, code))
    if shape:
        packed = b"".join([_varint(d) for d in shape])
        tensor_head += b"\x12" + _varint(len(packed)) + packed
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes:
        tensor_head += b"\x1a" + _varint(nbytes)
    tensor_size = len(tensor_head) + nbytes
    k = name.encode()
    entry_head = b"\x0a" + _varint(len(k)) + k + b"\x12" + _varint(tensor_size)
    entry_size = len(entry_head) + tensor_size
    prefix = _varint((field << 3) | 2) + _varint(entry_size) + entry_head + bytes(tensor_head)
    hit = (prefix, len(prefix) + nbytes)
    if len(_PREFIXES) > 4096:  # shapes that change every step (unusual): keep the cache bounded
        _PREFIXES.clear()
    _PREFIXES[key] = hit
    return hit


def _observation_parts(tensors: Mapping[str, np.ndarray], capture_time: Mapping[str, object] | None) -> tuple[list, int]:
    parts: list = []
    size = 0
    for name, value in tensors.items():
        arr = value if isinstance(value, np.ndarray) else np.asarray(value)
        if not arr.flags.c_contiguous or arr.dtype.byteorder == ">":
            arr = _wire_array(arr)
        prefix, total = _entry_prefix(1, name, arr.dtype, arr.shape)
        n = arr.nbytes
        if n > 256:
            parts.append(prefix)
            parts.append(memoryview(arr.reshape(-1)).cast("B"))
        else:
            parts.append(prefix + arr.tobytes() if n else prefix)
        size += total
    for name, value in (capture_time or {}).items():
        if isinstance(value, (float, int)):
            prefix, total = _entry_prefix(2, name, _F64, ())
            parts.append(prefix + _struct_d.pack(value))
        else:
            arr = np.require(np.asarray(value, dtype=_F64), requirements="C")
            prefix, total = _entry_prefix(2, name, arr.dtype, arr.shape)
            parts.append(prefix + arr.tobytes())
        size += total
    return parts, size


_TIMING_KEYS: dict[tuple[int, str], bytes] = {}


def _map_double_entry(field: int, name: str, value: float) -> bytes:
    """One ``map<string, double>`` entry (key prefix cached per name)."""
    prefix = _TIMING_KEYS.get((field, name))
    if prefix is None:
        k = name.encode()
        body_len = 1 + len(_varint(len(k))) + len(k) + 9
        prefix = _TIMING_KEYS[(field, name)] = _varint((field << 3) | 2) + _varint(body_len) + b"\x0a" + _varint(len(k)) + k + b"\x11"
    return prefix + _struct_d.pack(value)


def _packed(field: int, fmt: str, values) -> bytes:
    if not values:
        return b""
    body = struct.pack(f"<{len(values)}{fmt}", *values)
    return _varint((field << 3) | 2) + _varint(len(body)) + body


def _strings(field: int, values) -> bytes:
    tag = _varint((field << 3) | 2)
    out = []
    for v in values:
        b = v.encode()
        out.append(tag + _varint(len(b)) + b)
    return b"".join(out)


_BOOL1 = {(f, v): _varint((f << 3) | 2) + b"\x01" + (b"\x01" if v else b"\x00") for f in (3, 4, 5) for v in (False, True)}


def encode_step_head(reward, terminated, truncated, success, fault, fault_message, timing, final_mask=()) -> bytes:
    """StepResponse fields other than the observations, written directly (same bytes protobuf makes)."""
    if len(reward) == 1 and not final_mask and not fault[0] and not fault_message[0]:  # the common case
        parts = [b"\x12\x04", _struct_f.pack(reward[0]), _BOOL1[3, bool(terminated[0])],
                 _BOOL1[4, bool(truncated[0])], _BOOL1[5, bool(success[0])], b"\x32\x00\x3a\x00"]
        parts.extend(_map_double_entry(8, k, v) for k, v in timing.items())
        return b"".join(parts)
    parts = [
        _packed(2, "f", reward), _packed(3, "?", terminated), _packed(4, "?", truncated), _packed(5, "?", success),
        _strings(6, fault), _strings(7, fault_message),
    ]
    parts.extend(_map_double_entry(8, k, v) for k, v in timing.items())
    parts.append(_packed(10, "?", final_mask))
    return b"".join(parts)


def encode_with_observations(
    head: bytes,
    observations: Iterable[tuple[int, Mapping[str, np.ndarray], Mapping[str, object] | None]],
    wrap_field: int | None = None,
) -> bytes:
    """Serialised message = ``head`` (the message without its observations, from protobuf) plus
    each ``(field_number, tensors, capture_times)`` observation written from the arrays' buffers.

    Protobuf merges repeated occurrences of a message field, so appending is equivalent to having
    set the field. ``wrap_field`` nests the whole thing as that field of an outer message (the
    Session stream's oneof).
    """
    parts = [head]
    size = len(head)
    for field, tensors, stamps in observations:
        oparts, osize = _observation_parts(tensors, stamps)
        prefix = _len_prefix(field, osize)
        parts.append(prefix)
        parts.extend(oparts)
        size += len(prefix) + osize
    if wrap_field is not None:
        parts.insert(0, _len_prefix(wrap_field, size))
    return b"".join(parts)


def observation_to_message(tensors: Mapping[str, np.ndarray], capture_time: Mapping[str, object] | None = None) -> pb.Observation:
    """An Observation message through protobuf (tests and the client-side fallbacks use this)."""
    return pb.Observation.FromString(b"".join(_observation_parts(tensors, capture_time)[0]))


def observation_from_message(message: pb.Observation) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    tensors = {name: from_tensor(t) for name, t in message.tensors.items()}
    stamps = {name: _stamp(t) for name, t in message.capture_time.items()}
    return tensors, stamps


# ---------------------------------------------------------------------------------------------
# Specs


def _bounds_list(value, shape) -> list[float]:
    if value is None:
        return []
    arr = np.asarray(value, dtype=np.float64)
    if arr.size == 1:
        return [float(arr.reshape(-1)[0])]
    return np.broadcast_to(arr, shape).reshape(-1).tolist()


def tensor_spec_to_message(spec: TensorSpec) -> pb.TensorSpec:
    shape = tuple(int(d) for d in spec.shape)
    return pb.TensorSpec(
        name=spec.name,
        dtype=dtype_code(spec.dtype),
        shape=shape,
        low=_bounds_list(spec.low, shape),
        high=_bounds_list(spec.high, shape),
    )


def tensor_spec_from_message(message: pb.TensorSpec) -> TensorSpec:
    shape = tuple(int(d) for d in message.shape)

    def bound(values):
        if not values:
            return None
        if len(values) == 1:
            return float(values[0])
        return np.asarray(values, dtype=np.float64).reshape(shape)

    return TensorSpec(
        name=message.name, dtype=dtype_name(message.dtype), shape=shape, low=bound(message.low), high=bound(message.high)
    )


def env_spec_to_message(spec: EnvSpec) -> pb.EnvSpec:
    cameras = []
    for cam in spec.cameras:
        key = next((k for k in (cam, f"image_{cam}") if k in spec.observations), "")
        shape = tuple(spec.observations[key].shape) if key else ()
        cameras.append(pb.CameraInfo(name=cam, shape=shape, observation=key))
    return pb.EnvSpec(
        observations=[tensor_spec_to_message(s) for s in spec.observations.values()],
        action=tensor_spec_to_message(spec.action),
        control_hz=float(spec.control_hz),
        num_envs=int(spec.num_envs),
        robot=spec.robot,
        cameras=cameras,
        description=spec.description,
        autoreset="same_step" if spec.num_envs > 1 else "none",
    )


def env_spec_from_message(message: pb.EnvSpec) -> EnvSpec:
    observations = {s.name: tensor_spec_from_message(s) for s in message.observations}
    return EnvSpec(
        observations=observations,
        action=tensor_spec_from_message(message.action),
        control_hz=message.control_hz,
        num_envs=message.num_envs or 1,
        robot=message.robot,
        cameras=tuple(c.name for c in message.cameras),
        description=message.description,
    )


# ---------------------------------------------------------------------------------------------
# Wire-format reader for responses (client side): tensors become numpy views of the received
# message bytes. protobuf's own parser would copy every image twice (into its arena, then into a
# new bytes object on each access of ``Tensor.data``).


def _read_varint(buf, pos: int) -> tuple[int, int]:
    b = buf[pos]
    if b < 0x80:
        return b, pos + 1
    value = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
        shift += 7


def _fields(buf, start: int, end: int):
    """Yield (field_number, wire_type, value_or_(start, end)) over a message body."""
    pos = start
    while pos < end:
        key, pos = _read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _read_varint(buf, pos)
            yield field, wire, value
        elif wire == 2:
            n, pos = _read_varint(buf, pos)
            yield field, wire, (pos, pos + n)
            pos += n
        elif wire == 5:
            yield field, wire, (pos, pos + 4)
            pos += 4
        elif wire == 1:
            yield field, wire, (pos, pos + 8)
            pos += 8
        else:
            raise ValueError(f"unsupported protobuf wire type {wire} in field {field}")


def _read_tensor(buf, start: int, end: int) -> np.ndarray:
    code = 0
    shape: list[int] = []
    data = (start, start)
    for field, wire, value in _fields(buf, start, end):
        if field == 1 and wire == 0:
            code = value
        elif field == 2 and wire == 2:  # packed shape
            pos, stop = value
            while pos < stop:
                d, pos = _read_varint(buf, pos)
                shape.append(d)
        elif field == 2 and wire == 0:  # unpacked shape (allowed by the protobuf spec)
            shape.append(value)
        elif field == 3 and wire == 2:
            data = value
    dt = numpy_dtype(code)
    n = data[1] - data[0]
    expected = math.prod(shape) * dt.itemsize
    if n != expected:
        raise ValueError(f"tensor has {n} bytes but shape {shape} of {dt.name} needs {expected}")
    return np.frombuffer(buf[data[0]:data[1]], dtype=dt).reshape(shape)


def _read_observation(buf, start: int, end: int) -> tuple[dict, dict]:
    tensors: dict[str, np.ndarray] = {}
    stamps: dict[str, np.ndarray] = {}
    for field, wire, value in _fields(buf, start, end):
        if wire != 2 or field not in (1, 2):
            continue
        key = ""
        tensor = None
        for f, w, v in _fields(buf, *value):
            if f == 1 and w == 2:
                key = bytes(buf[v[0]:v[1]]).decode()
            elif f == 2 and w == 2:
                tensor = _read_tensor(buf, *v)
        if tensor is None:
            tensor = np.zeros((), np.float32)
        (tensors if field == 1 else stamps)[key] = tensor
    return tensors, stamps


#: Fields holding an Observation in ResetResponse / StepResponse.
_OBS_FIELDS = {1: "observation", 9: "final_observation"}


def read_observation_response(data: bytes, message_type):
    """Parse a ResetResponse/StepResponse: (message without observations, {field name: (tensors, stamps)}).

    The arrays are read-only views of ``data``: one copy fewer per image than protobuf, and none
    after the bytes arrived.
    """
    buf = memoryview(data)
    rest: list = []
    observations: dict[str, tuple[dict, dict]] = {}
    pos = 0
    end = len(buf)
    while pos < end:
        field_start = pos
        key, pos = _read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == 2:
            n, pos = _read_varint(buf, pos)
            if field in _OBS_FIELDS:
                tensors, stamps = _read_observation(buf, pos, pos + n)
                prev = observations.get(_OBS_FIELDS[field])
                if prev:  # repeated occurrences of a message field merge
                    tensors = {**prev[0], **tensors}
                    stamps = {**prev[1], **stamps}
                observations[_OBS_FIELDS[field]] = (tensors, stamps)
            else:
                rest.append(buf[field_start:pos + n])
            pos += n
        elif wire == 0:
            _, pos = _read_varint(buf, pos)
            rest.append(buf[field_start:pos])
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
            rest.append(buf[field_start:pos])
        else:
            raise ValueError(f"unsupported protobuf wire type {wire} in field {field}")
    head = message_type.FromString(b"".join(rest))
    return head, observations


#: Below this size protobuf's C parser beats the Python wire reader; above it, copies dominate.
ZERO_COPY_MIN_BYTES = 32 * 1024


def _observations_of(message) -> dict[str, tuple[dict, dict]]:
    out = {}
    for name in ("observation", "final_observation"):
        if name in message.DESCRIPTOR.fields_by_name and message.HasField(name):
            out[name] = observation_from_message(getattr(message, name))
    return out


def read_response(data: bytes, message_type):
    """Like `read_observation_response`, choosing the faster parser for the message size."""
    if len(data) >= ZERO_COPY_MIN_BYTES:
        return read_observation_response(data, message_type)
    message = message_type.FromString(data)
    return message, _observations_of(message)


def read_session_response(data: bytes):
    """Parse a SessionResponse: ("reset"|"step", head, observations) or ("error", Error, None)."""
    if len(data) < ZERO_COPY_MIN_BYTES:
        message = pb.SessionResponse.FromString(data)
        kind = message.WhichOneof("kind")
        if kind in ("step", "reset"):
            inner = getattr(message, kind)
            return kind, inner, _observations_of(inner)
        return (kind, message.error, None) if kind == "error" else ("empty", None, None)
    buf = memoryview(data)
    for field, wire, value in _fields(buf, 0, len(buf)):
        if wire != 2:
            continue
        if field == 1:
            head, obs = read_observation_response(buf[value[0]:value[1]], pb.ResetResponse)
            return "reset", head, obs
        if field == 2:
            head, obs = read_observation_response(buf[value[0]:value[1]], pb.StepResponse)
            return "step", head, obs
        if field == 3:
            return "error", pb.Error.FromString(bytes(buf[value[0]:value[1]])), None
    return "empty", None, None


def encode_step_request(action: np.ndarray, session: bool) -> bytes:
    """A StepRequest (or SessionRequest{step}) for ``action``, written directly."""
    parts, size = _tensor_parts(action)
    tensor = b"".join(parts)
    step = b"\x0a" + _varint(size) + tensor  # StepRequest.action = 1
    if session:
        return b"\x12" + _varint(len(step)) + step  # SessionRequest.step = 2
    return step


# ---------------------------------------------------------------------------------------------
# Step responses of single-instance servers, with the layout of the previous step cached.
#
# Step after step a server sends the same message shape: the same observation names, dtypes and
# shapes, the same timing keys, one reward and three flags. Only values change. Both ends
# therefore prepare the message's layout once - every byte that does not hold a value - and per
# step only write (server) or read (client) the values: a few C calls instead of a walk over
# fields. Whenever a step does not fit the prepared layout (first step, a fault string, another
# camera set), the general code above handles it and the layout is prepared afresh.


class _Template:
    """Fixed byte strings interleaved with values, packed by one `struct.Struct`.

    ``items`` alternate: bytes, format character, bytes, ..., bytes. ``pack(values)`` writes the
    message piece with ``values`` in the slots.
    """

    __slots__ = ("struct", "args")

    def __init__(self, items: list):
        merged: list = [b""]
        for item in items:
            if isinstance(item, bytes):
                if isinstance(merged[-1], bytes):
                    merged[-1] += item
                else:
                    merged.append(item)
            else:
                if not isinstance(merged[-1], bytes):
                    merged.append(b"")
                merged.append(item)
        if not isinstance(merged[-1], bytes):
            merged.append(b"")
        fmt = "<" + "".join(f"{len(x)}s" if isinstance(x, bytes) else x for x in merged)
        self.struct = struct.Struct(fmt)
        self.args = [x if isinstance(x, bytes) else 0 for x in merged]

    def pack(self, values) -> bytes:
        args = self.args.copy()  # a copy: two threads may write with one layout
        args[1::2] = values
        return self.struct.pack(*args)


class _WriterLayout:
    __slots__ = ("key", "sig", "head", "tensors", "stamps", "whole")


#: Arrays above this size go on the wire from their own buffer; smaller ones are copied (cheaper).
_BIG = 256


class StepWriter:
    """Serialises single-instance StepResponses (optionally inside SessionResponse.step).

    ``write`` gives the same bytes as `encode_step_head` + `encode_with_observations`; a step
    with a fault, a batch or an unusual observation goes through those functions.
    """

    def __init__(self):
        self._layout: _WriterLayout | None = None

    def write(self, reward, terminated, truncated, success, timing: dict, obs: dict, stamps: dict | None,
              wrap_field: int | None) -> bytes:
        stamps = stamps or {}
        # Names in order, and the capture times' types; the counts keep the groups apart.
        key = (wrap_field, len(timing), len(obs), *timing, *obs, *stamps, *map(type, stamps.values()))
        layout = self._layout
        if layout is None or layout.key != key:
            layout = self._relayout(key, timing, obs, stamps, wrap_field)
            if layout is None:
                return self._general(reward, terminated, truncated, success, timing, obs, stamps, wrap_field)
        try:
            if layout.whole is not None:  # small tensors only (proprio): the message is one pack
                values = [reward, terminated, truncated, success, *timing.values()]
                append = values.append
                for arr, (dtype, shape, prefix, big) in zip(obs.values(), layout.tensors):
                    if arr.shape != shape or arr.dtype != dtype:
                        break
                    append(arr.tobytes())
                else:
                    values += stamps.values()
                    args = layout.whole.args.copy()  # a copy: two threads may write with one layout
                    args[1::2] = values
                    return layout.whole.struct.pack(*args)
            else:
                args = layout.head.args.copy()
                args[1::2] = (reward, terminated, truncated, success, *timing.values())
                parts = [layout.head.struct.pack(*args)]
                append = parts.append
                for arr, (dtype, shape, prefix, big) in zip(obs.values(), layout.tensors):
                    if arr.shape != shape or arr.dtype != dtype:
                        break
                    append(prefix)
                    append(memoryview(arr).cast("B") if big else arr.tobytes())
                else:
                    append(layout.stamps.pack(stamps.values()))
                    return b"".join(parts)
        except (AttributeError, TypeError):  # not an array, or a big one that is not C-contiguous
            pass
        # An observation changed dtype or shape (or cannot be written from its buffer).
        if self._relayout(key, timing, obs, stamps, wrap_field) is not None:
            return self.write(reward, terminated, truncated, success, timing, obs, stamps, wrap_field)
        return self._general(reward, terminated, truncated, success, timing, obs, stamps, wrap_field)

    def _relayout(self, key, timing, obs, stamps, wrap_field) -> _WriterLayout | None:
        try:
            sig = [(a.dtype, a.shape) for a in obs.values()]
            if any(a.nbytes > _BIG and not a.flags.c_contiguous for a in obs.values()):
                sig = None
        except AttributeError:  # an observation that is not an array
            sig = None
        old = self._layout
        self._layout = None if sig is None else self._prepare(key, sig, timing, obs, stamps, wrap_field)
        if old is not None and self._layout is not None and old.key == key and old.sig == sig:
            return None  # nothing changed, yet the fast path failed: write this step the general way
        return self._layout

    @staticmethod
    def _general(reward, terminated, truncated, success, timing, obs, stamps, wrap_field) -> bytes:
        head = encode_step_head([reward], [terminated], [truncated], [success], [""], [""], timing)
        return encode_with_observations(head, [(1, obs, stamps)], wrap_field)

    @staticmethod
    def _prepare(key, sig, timing, obs, stamps, wrap_field) -> _WriterLayout | None:
        if any(not isinstance(v, (float, int)) for v in stamps.values()):
            return None  # array capture times (batched envs) take the general path
        head: list = [b"\x12\x04", "f", b"\x1a\x01", "?", b"\x22\x01", "?", b"\x2a\x01", "?", b"\x32\x00\x3a\x00"]
        for name in timing:
            entry = _map_double_entry(8, name, 0.0)
            head += [entry[:-8], "d"]
        tensors = []
        tensor_items: list = []
        obs_size = 0
        for (dtype, shape), name in zip(sig, obs):
            if dtype.byteorder == ">" or dtype not in _CODE_BY_DTYPE:
                return None
            prefix, total = _entry_prefix(1, name, dtype, shape)
            tensors.append((dtype, shape, prefix, total - len(prefix) > _BIG))
            tensor_items += [prefix, f"{total - len(prefix)}s"]
            obs_size += total
        stamp_items: list = []
        for name in stamps:
            prefix, total = _entry_prefix(2, name, _F64, ())
            stamp_items += [prefix, "d"]
            obs_size += total
        obs_prefix = _len_prefix(1, obs_size)
        head.append(obs_prefix)
        head_size = (4 + 2) + 3 * 3 + 4 + sum(len(_map_double_entry(8, k, 0.0)) for k in timing) + len(obs_prefix)
        if wrap_field is not None:
            head.insert(0, _len_prefix(wrap_field, head_size + obs_size))
        layout = _WriterLayout()
        layout.key, layout.sig = key, sig
        layout.head = _Template(head)
        layout.tensors = tensors
        layout.stamps = _Template(stamp_items)
        layout.whole = None if any(big for *_, big in tensors) else _Template(head + tensor_items + stamp_items)
        return layout


class _ReaderLayout:
    __slots__ = ("size", "check", "expected", "values", "tensors", "timing_keys", "timing_slice",
                 "stamp_names", "stamp_slice", "fault", "fault_message")


class StepReader:
    """Reads single-instance StepResponses (optionally inside SessionResponse.step) by layout.

    ``read`` returns what `RemoteEnv.step` returns for a single env - ``(obs, reward, terminated,
    truncated, info)`` with info's ``timestamps``, ``timing``, ``success``, ``fault`` and
    ``fault_message`` - from the values `read_response` would give, or None when the message does
    not have the layout of the previous one that `learn` was given. Every byte outside the value slots
    is compared with that message, and the slots hold only fixed-size values (floats, tensor data,
    one-byte flags), so a message that passes parses exactly as the general reader would parse it.
    """

    def __init__(self):
        self._layout: _ReaderLayout | None = None

    def read(self, data: bytes):
        layout = self._layout
        if layout is None or len(data) != layout.size or layout.check.unpack_from(data) != layout.expected:
            return None
        v = layout.values.unpack_from(data)
        reward, terminated, truncated, success = v[:4]
        if terminated > 1 or truncated > 1 or success > 1:
            return None  # a flag written as another varint: let protobuf decide
        ndarray = np.ndarray  # a read-only view of the bytes with its shape, in one call
        obs = {name: ndarray(shape, dt, data, offset) for name, dt, offset, shape in layout.tensors}
        return obs, reward, terminated == 1, truncated == 1, {
            "timestamps": dict(zip(layout.stamp_names, v[layout.stamp_slice])),
            "timing": dict(zip(layout.timing_keys, v[layout.timing_slice])),
            "success": success == 1, "fault": layout.fault, "fault_message": layout.fault_message}

    def learn(self, data: bytes, head: pb.StepResponse, session: bool) -> None:
        """Prepare the layout of ``data`` (a StepResponse, or with ``session`` a
        SessionResponse{step}) whose StepResponse parsed as ``head``; a message this reader cannot
        lay out leaves it with no layout."""
        self._layout = None
        try:
            self._layout = _reader_layout(memoryview(data), head, session)
        except (ValueError, IndexError):
            pass


class _NoLayout(ValueError):
    pass


def _reader_layout(buf, head, session: bool) -> _ReaderLayout | None:
    """The layout of one message: its fixed bytes and its value slots, compiled to two Structs."""
    if len(head.reward) != 1 or len(head.terminated) != 1 or len(head.truncated) != 1 or len(head.success) != 1:
        return None
    segments: list = []  # ("fixed", start, end) and ("slot", kind, start, end, info), in order
    pos = 0
    end = len(buf)
    if session:
        key, p = _read_varint(buf, 0)
        if key != (2 << 3) | 2:  # SessionResponse.step
            return None
        n, p = _read_varint(buf, p)
        if p + n != end:
            return None
        segments.append(("fixed", 0, p))
        pos = p
    slots = {"reward": 0, "flags": 0, "timing": [], "tensors": [], "stamps": []}
    try:
        _layout_step(buf, pos, end, segments, slots)
    except _NoLayout:
        return None
    if slots["reward"] != 1 or slots["flags"] != 3:
        return None
    check_fmt, value_fmt, expected = ["<"], ["<"], []
    order: list = []  # value slot kinds in message order
    tensors = []
    for seg in segments:
        if seg[0] == "fixed":
            _, a, b = seg
            check_fmt.append(f"{b - a}s")
            value_fmt.append(f"{b - a}x")
            expected.append(bytes(buf[a:b]))
            continue
        _, kind, a, b, info = seg
        check_fmt.append(f"{b - a}x")
        if kind == "tensor":
            value_fmt.append(f"{b - a}x")
            name, dt, shape = info
            tensors.append((name, dt, a, shape))
        else:
            value_fmt.append({"reward": "f", "flag": "B", "timing": "d", "stamp": "d"}[kind])
            order.append((kind, info))
    kinds = [k for k, _ in order]
    n_timing = kinds.count("timing")
    n_stamps = kinds.count("stamp")
    # The fast read takes reward and flags first, then timing, then stamps, each as one run.
    want = (["reward"] + ["flag"] * 3 + ["timing"] * n_timing + ["stamp"] * n_stamps)
    if kinds != want:
        return None
    flag_fields = [info for k, info in order if k == "flag"]
    if flag_fields != [3, 4, 5]:
        return None
    layout = _ReaderLayout()
    layout.size = len(buf)
    layout.check = struct.Struct("".join(check_fmt))
    layout.expected = tuple(expected)
    layout.values = struct.Struct("".join(value_fmt))
    layout.tensors = tuple(tensors)
    layout.timing_keys = tuple(info for k, info in order if k == "timing")
    layout.timing_slice = slice(4, 4 + n_timing)
    layout.stamp_names = tuple(info for k, info in order if k == "stamp")
    layout.stamp_slice = slice(4 + n_timing, 4 + n_timing + n_stamps)
    layout.fault = head.fault[0] or None if head.fault else []
    layout.fault_message = head.fault_message[0] if head.fault_message else []
    return layout


def _layout_step(buf, pos: int, end: int, segments: list, slots: dict) -> None:
    while pos < end:
        start = pos
        key, pos = _read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire != 2:
            raise _NoLayout()
        n, pos = _read_varint(buf, pos)
        stop = pos + n
        if field == 2 and n == 4:
            segments += [("fixed", start, pos), ("slot", "reward", pos, stop, None)]
            slots["reward"] += 1
        elif field in (3, 4, 5) and n == 1:
            segments += [("fixed", start, pos), ("slot", "flag", pos, stop, field)]
            slots["flags"] += 1
        elif field in (2, 3, 4, 5, 9, 10):
            raise _NoLayout()  # batched replies and final observations: the general reader
        elif field == 8:
            # map<string, double> entry: key then value, as every writer lays it out
            k, p = _read_varint(buf, pos)
            if k != 0x0A:
                raise _NoLayout()
            kn, p = _read_varint(buf, p)
            name = bytes(buf[p:p + kn]).decode()
            p += kn
            if p + 9 != stop or buf[p] != 0x11:
                raise _NoLayout()
            segments += [("fixed", start, p + 1), ("slot", "timing", p + 1, stop, name)]
        elif field == 1:
            segments.append(("fixed", start, pos))
            _layout_observation(buf, pos, stop, segments)
        else:  # fault strings and anything unknown: fixed bytes (their values are in `head`)
            segments.append(("fixed", start, stop))
        pos = stop
    if pos != end:
        raise _NoLayout()


def _layout_observation(buf, pos: int, end: int, segments: list) -> None:
    while pos < end:
        start = pos
        key, pos = _read_varint(buf, pos)
        if key not in (0x0A, 0x12):
            raise _NoLayout()
        n, pos = _read_varint(buf, pos)
        stop = pos + n
        # entry: key string, then the Tensor
        k, p = _read_varint(buf, pos)
        if k != 0x0A:
            raise _NoLayout()
        kn, p = _read_varint(buf, p)
        name = bytes(buf[p:p + kn]).decode()
        p += kn
        k, p = _read_varint(buf, p)
        if k != 0x12:
            raise _NoLayout()
        tn, p = _read_varint(buf, p)
        if p + tn != stop:
            raise _NoLayout()
        # Tensor: dtype, packed shape (optional), data (optional), in field order
        k, p = _read_varint(buf, p)
        if k != 0x08:
            raise _NoLayout()
        code, p = _read_varint(buf, p)
        dt = numpy_dtype(code)
        shape: list[int] = []
        if p < stop and buf[p] == 0x12:
            sn, p = _read_varint(buf, p + 1)
            q = p + sn
            while p < q:
                d, p = _read_varint(buf, p)
                shape.append(d)
        nbytes = 0
        if p < stop:
            if buf[p] != 0x1A:
                raise _NoLayout()
            nbytes, p = _read_varint(buf, p + 1)
        if p + nbytes != stop or nbytes != math.prod(shape) * dt.itemsize:
            raise _NoLayout()
        if key == 0x12:  # capture time: a float64 scalar
            if dt != _F64 or shape or nbytes != 8:
                raise _NoLayout()
            segments += [("fixed", start, p), ("slot", "stamp", p, stop, name)]
        else:
            segments += [("fixed", start, p), ("slot", "tensor", p, stop, (name, dt, tuple(shape)))]
        pos = stop
    if pos != end:
        raise _NoLayout()
