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
