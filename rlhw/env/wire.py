"""Step and reset messages in protobuf's wire format, written and read without the object model.

A camera image is the bulk of every step. Through protobuf's objects the server would copy it three
times (``tobytes``, field assignment, serialisation) and the client twice (into the parser's arena,
then into a new bytes object on each access of ``Tensor.data``). Here the server writes the wire
format itself with the array's own buffer as the payload (one copy, into the outgoing message), and
the client reads tensors as numpy views of the received bytes (no copy). The bytes are ordinary
protobuf: any protobuf reader parses what this writes, and this reads what any writer produces.

This is the general path: any batch size, faults, final observations. The per-step fast path in
rlhw.env.step_layout is built from these pieces and falls back to them. Every field key comes from
the generated descriptors (`T`, rlhw.env.wire_tags): no field number is written here by hand.
"""

from __future__ import annotations

import math
import struct
from typing import Iterable, Mapping

import numpy as np

from rlhw.env.codec import CODE_BY_DTYPE, dtype_code, fault_to_wire, numpy_dtype, observation_from_message, wire_array
from rlhw.env.v1 import env_pb2 as pb
from rlhw.env.wire_tags import I32, I64, LEN, VARINT, Tags, varint

#: Arrays above this size go on the wire from their own buffer; smaller ones are copied (cheaper).
BIG_TENSOR_BYTES = 256

# ---------------------------------------------------------------------------------------------
# Writer: responses (server side) and step requests (client side). Chunks are joined once at the end.


#: The field keys of the generated proto. `use_tags` swaps them (tests of a renumbered proto).
T = Tags(pb.DESCRIPTOR)


def use_tags(tags: Tags) -> Tags:
    """Write and read with ``tags`` from now on (and drop every cached prefix); returns the old ones.

    For tests of a renumbered proto. Layouts already prepared by a `step_layout.StepWriter` or
    `StepReader` keep the old keys: make new ones after the swap."""
    global T
    old, T = T, tags
    for cache in (_TENSOR_HEADS, _PREFIXES, _TIMING_KEYS, _BOOL1):
        cache.clear()
    return old


def len_prefix(field: int, size: int) -> bytes:
    """The key and length that start a length-delimited field of ``size`` bytes."""
    return varint((field << 3) | LEN) + varint(size)


_struct_d = struct.Struct("<d")
_struct_f = struct.Struct("<f")


def _tensor_head(dtype: np.dtype, shape: tuple[int, ...], nbytes: int) -> bytearray:
    """Wire bytes of a Tensor message up to its data: dtype, packed shape, the data's length."""
    code = CODE_BY_DTYPE.get(dtype)
    if code is None:
        code = dtype_code(dtype)
    head = bytearray(T.b_dtype + varint(code))
    if shape:
        packed = b"".join([varint(d) for d in shape])
        head += T.b_shape + varint(len(packed)) + packed
    if nbytes:
        head += T.b_data + varint(nbytes)
    return head


_TENSOR_HEADS: dict[tuple, bytes] = {}


def _tensor_parts(array) -> tuple[list, int]:
    """Wire pieces of one Tensor message (header bytes, then the array's own buffer) and their size."""
    arr = array if isinstance(array, np.ndarray) else np.asarray(array)
    if not arr.flags.c_contiguous or arr.dtype.byteorder == ">":
        arr = wire_array(arr)
    n = arr.nbytes
    key = (arr.dtype, arr.shape)
    head = _TENSOR_HEADS.get(key)
    if head is None:  # the same dtype and shape step after step: built once
        head = bytes(_tensor_head(arr.dtype, arr.shape, n))
        if len(_TENSOR_HEADS) > 4096:  # shapes that change every call (unusual): keep the cache bounded
            _TENSOR_HEADS.clear()
        _TENSOR_HEADS[key] = head
    if n > BIG_TENSOR_BYTES:
        return [head, memoryview(arr.reshape(-1)).cast("B")], len(head) + n
    return [head + arr.tobytes()], len(head) + n


_PREFIXES: dict[tuple, tuple[bytes, int]] = {}
F64 = np.dtype("<f8")


def entry_prefix(field: int, name: str, dtype: np.dtype, shape: tuple[int, ...]) -> tuple[bytes, int]:
    """Wire bytes of one map entry up to the tensor's data, and the entry's total size.

    They depend only on (name, dtype, shape), which stay the same step after step, so they are
    built once: per step the encoder writes a cached prefix and the array's own buffer.
    """
    key = (field, name, dtype, shape)
    hit = _PREFIXES.get(key)
    if hit is not None:
        return hit
    nbytes = math.prod(shape) * dtype.itemsize
    tensor_head = _tensor_head(dtype, shape, nbytes)
    tensor_size = len(tensor_head) + nbytes
    k = name.encode()
    entry_head = T.b_entry_key + varint(len(k)) + k + T.b_entry_tensor + varint(tensor_size)
    entry_size = len(entry_head) + tensor_size
    prefix = len_prefix(field, entry_size) + entry_head + bytes(tensor_head)
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
            arr = wire_array(arr)
        prefix, total = entry_prefix(T.n_tensors, name, arr.dtype, arr.shape)
        n = arr.nbytes
        if n > BIG_TENSOR_BYTES:
            parts.append(prefix)
            parts.append(memoryview(arr.reshape(-1)).cast("B"))
        else:
            parts.append(prefix + arr.tobytes() if n else prefix)
        size += total
    for name, value in (capture_time or {}).items():
        if isinstance(value, (float, int)):
            prefix, total = entry_prefix(T.n_capture_time, name, F64, ())
            parts.append(prefix + _struct_d.pack(value))
        else:
            arr = np.require(np.asarray(value, dtype=F64), requirements="C")
            prefix, total = entry_prefix(T.n_capture_time, name, arr.dtype, arr.shape)
            parts.append(prefix + arr.tobytes())
        size += total
    return parts, size


_TIMING_KEYS: dict[tuple[int, str], bytes] = {}


def map_double_entry(field: int, name: str, value: float) -> bytes:
    """One ``map<string, double>`` entry (key prefix cached per name)."""
    prefix = _TIMING_KEYS.get((field, name))
    if prefix is None:
        k = name.encode()
        body = T.b_entry_key + varint(len(k)) + k + T.b_entry_double
        prefix = _TIMING_KEYS[(field, name)] = len_prefix(field, len(body) + 8) + body
    return prefix + _struct_d.pack(value)


def _packed(field: int, fmt: str, values) -> bytes:
    if not values:
        return b""
    body = struct.pack(f"<{len(values)}{fmt}", *values)
    return len_prefix(field, len(body)) + body


def _packed_varints(field: int, values) -> bytes:
    if not values:
        return b""
    body = b"".join([varint(v) for v in values])
    return len_prefix(field, len(body)) + body


def _strings(field: int, values) -> bytes:
    tag = varint((field << 3) | LEN)
    out = []
    for v in values:
        b = v.encode()
        out.append(tag + varint(len(b)) + b)
    return b"".join(out)


_BOOL1: dict[tuple[int, bool], bytes] = {}  # one packed flag: (field, value) -> bytes


def packed_flag(field: int, value: bool) -> bytes:
    """A packed ``repeated bool`` with one element (terminated, truncated, success of one instance)."""
    hit = _BOOL1.get((field, value))
    if hit is None:
        hit = _BOOL1[field, value] = _packed(field, "?", [value])
    return hit


def encode_step_head(reward, terminated, truncated, success, fault, fault_message, timing, final_mask=(),
                     executed_action=None, intervened=None) -> bytes:
    """StepResponse fields other than the observations, written directly (protobuf parses them as it
    would its own). ``fault`` holds a FaultKind or None per instance."""
    if executed_action is not None or intervened is not None:  # what the arm really did
        head = encode_step_head(reward, terminated, truncated, success, fault, fault_message, timing, final_mask)
        if executed_action is not None:
            parts, size = _tensor_parts(executed_action)
            head += len_prefix(T.n_executed_action, size) + b"".join(parts)
        return head + _packed(T.n_intervened, "?", intervened or ())
    if len(reward) == 1 and not final_mask and fault[0] is None and not fault_message[0]:  # the common case
        parts = [len_prefix(T.n_reward, 4), _struct_f.pack(reward[0]), packed_flag(T.n_terminated, bool(terminated[0])),
                 packed_flag(T.n_truncated, bool(truncated[0])), packed_flag(T.n_success, bool(success[0])),
                 no_fault_fields()]
        parts.extend(map_double_entry(T.n_timing, k, v) for k, v in timing.items())
        return b"".join(parts)
    parts = [
        _packed(T.n_reward, "f", reward), _packed(T.n_terminated, "?", terminated),
        _packed(T.n_truncated, "?", truncated), _packed(T.n_success, "?", success),
        _packed_varints(T.n_fault, [fault_to_wire(k) for k in fault]), _strings(T.n_fault_message, fault_message),
    ]
    parts.extend(map_double_entry(T.n_timing, k, v) for k, v in timing.items())
    parts.append(_packed(T.n_final_mask, "?", final_mask))
    return b"".join(parts)


def no_fault_fields() -> bytes:
    """The fault fields of one instance without a fault: fault = [UNSPECIFIED], fault_message = [""]."""
    return _packed_varints(T.n_fault, [fault_to_wire(None)]) + _strings(T.n_fault_message, [""])


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
        prefix = len_prefix(field, osize)
        parts.append(prefix)
        parts.extend(oparts)
        size += len(prefix) + osize
    if wrap_field is not None:
        parts.insert(0, len_prefix(wrap_field, size))
    return b"".join(parts)


def encode_step_request(action: np.ndarray, session: bool) -> bytes:
    """A StepRequest (or SessionRequest{step}) for ``action``, written directly."""
    parts, size = _tensor_parts(action)
    tensor = b"".join(parts)
    step = T.b_request_action + varint(size) + tensor
    if session:
        return T.b_session_request_step + varint(len(step)) + step
    return step


def step_request_prefix(shape: tuple[int, ...], dtype, session: bool) -> bytes:
    """The bytes `encode_step_request` writes before the action's data, for every action of this
    dtype and shape: per step a client appends the action's bytes, and a server recognises the
    layout without parsing."""
    zeros = np.zeros(shape, dtype)
    request = encode_step_request(zeros, session)
    return request[:len(request) - zeros.nbytes]


# ---------------------------------------------------------------------------------------------
# Wire-format reader for responses (client side): tensors become numpy views of the received
# message bytes. protobuf's own parser would copy every image twice (into its arena, then into a
# new bytes object on each access of ``Tensor.data``).


def read_varint(buf, pos: int) -> tuple[int, int]:
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
        key, pos = read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == VARINT:
            value, pos = read_varint(buf, pos)
            yield field, wire, value
        elif wire == LEN:
            n, pos = read_varint(buf, pos)
            yield field, wire, (pos, pos + n)
            pos += n
        elif wire == I32:
            yield field, wire, (pos, pos + 4)
            pos += 4
        elif wire == I64:
            yield field, wire, (pos, pos + 8)
            pos += 8
        else:
            raise ValueError(f"unsupported protobuf wire type {wire} in field {field}")


def _read_tensor(buf, start: int, end: int) -> np.ndarray:
    code = 0
    shape: list[int] = []
    data = (start, start)
    t = T
    for field, wire, value in _fields(buf, start, end):
        key = (field << 3) | wire
        if key == t.k_dtype:
            code = value
        elif key == t.k_shape:  # packed shape
            pos, stop = value
            while pos < stop:
                d, pos = read_varint(buf, pos)
                shape.append(d)
        elif field == t.n_shape and wire == VARINT:  # unpacked shape (allowed by the protobuf spec)
            shape.append(value)
        elif key == t.k_data:
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
    t = T
    for field, wire, value in _fields(buf, start, end):
        if wire != LEN or field not in (t.n_tensors, t.n_capture_time):
            continue
        key = ""
        tensor = None
        for f, w, v in _fields(buf, *value):
            k = (f << 3) | w
            if k == t.k_entry_key:
                key = bytes(buf[v[0]:v[1]]).decode()
            elif k == t.k_entry_tensor:
                tensor = _read_tensor(buf, *v)
        if tensor is None:
            tensor = np.zeros((), np.float32)
        (tensors if field == t.n_tensors else stamps)[key] = tensor
    return tensors, stamps


_OBS_FIELDS: dict[type, dict[int, str]] = {}


def _observation_fields(message_type) -> dict[int, str]:
    """{field number: name} of the Observation fields of ``message_type``, from its descriptor."""
    hit = _OBS_FIELDS.get(message_type)
    if hit is None:
        hit = _OBS_FIELDS[message_type] = {f.number: f.name for f in message_type.DESCRIPTOR.fields
                                           if f.message_type is not None and f.message_type.name == "Observation"}
    return hit


def read_observation_response(data: bytes, message_type):
    """Parse a ResetResponse/StepResponse: (message without observations, {field name: (tensors, stamps)}).

    The arrays are read-only views of ``data``: one copy fewer per image than protobuf, and none
    after the bytes arrived.
    """
    buf = memoryview(data)
    rest: list = []
    observations: dict[str, tuple[dict, dict]] = {}
    obs_fields = _observation_fields(message_type)
    pos = 0
    end = len(buf)
    while pos < end:
        field_start = pos
        key, pos = read_varint(buf, pos)
        field, wire = key >> 3, key & 7
        if wire == LEN:
            n, pos = read_varint(buf, pos)
            if field in obs_fields:
                tensors, stamps = _read_observation(buf, pos, pos + n)
                prev = observations.get(obs_fields[field])
                if prev:  # repeated occurrences of a message field merge
                    tensors = {**prev[0], **tensors}
                    stamps = {**prev[1], **stamps}
                observations[obs_fields[field]] = (tensors, stamps)
            else:
                rest.append(buf[field_start:pos + n])
            pos += n
        elif wire == VARINT:
            _, pos = read_varint(buf, pos)
            rest.append(buf[field_start:pos])
        elif wire in (I64, I32):
            pos += 8 if wire == I64 else 4
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
        if wire != LEN:
            continue
        if field == T.n_session_reset:
            head, obs = read_observation_response(buf[value[0]:value[1]], pb.ResetResponse)
            return "reset", head, obs
        if field == T.n_session_step:
            head, obs = read_observation_response(buf[value[0]:value[1]], pb.StepResponse)
            return "step", head, obs
        if field == T.n_session_error:
            return "error", pb.Error.FromString(bytes(buf[value[0]:value[1]])), None
    return "empty", None, None
