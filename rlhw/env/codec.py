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


def from_tensor(tensor: pb.Tensor) -> np.ndarray:
    """A read-only numpy view of the tensor's bytes (no copy). Raises ValueError on a size mismatch."""
    dt = numpy_dtype(tensor.dtype)
    shape = tuple(tensor.shape)
    expected = math.prod(shape) * dt.itemsize
    if len(tensor.data) != expected:
        raise ValueError(
            f"tensor has {len(tensor.data)} bytes but shape {list(shape)} of {dt.name} needs {expected}"
        )
    return np.frombuffer(tensor.data, dtype=dt).reshape(shape)


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


def _observation_parts(tensors: Mapping[str, np.ndarray], capture_time: Mapping[str, object] | None) -> tuple[list, int]:
    parts: list = []
    size = 0
    for name, value in tensors.items():
        key = name.encode()
        tparts, tsize = _tensor_parts(value)
        entry_size = 2 + len(key) + len(_varint(tsize)) + 1 + tsize
        if len(key) >= 128:
            entry_size += len(_varint(len(key))) - 1
        head = b"\x0a" + _varint(entry_size) + b"\x0a" + _varint(len(key)) + key + b"\x12" + _varint(tsize)
        parts.append(head)
        parts.extend(tparts)
        size += len(head) + tsize
    for name, value in (capture_time or {}).items():
        key = name.encode()
        if isinstance(value, (float, int)):
            tbody = _STAMP_PREFIX + _struct_d.pack(value)
            tparts, tsize = [tbody], len(tbody)
        else:
            tparts, tsize = _tensor_parts(np.asarray(value, dtype=np.float64))
        entry_size = 2 + len(key) + len(_varint(tsize)) + 1 + tsize
        if len(key) >= 128:
            entry_size += len(_varint(len(key))) - 1
        head = b"\x12" + _varint(entry_size) + b"\x0a" + _varint(len(key)) + key + b"\x12" + _varint(tsize)
        parts.append(head)
        parts.extend(tparts)
        size += len(head) + tsize
    return parts, size


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
    stamps = {name: from_tensor(t) for name, t in message.capture_time.items()}
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
        obs = spec.observations.get(cam)
        cameras.append(pb.CameraInfo(name=cam, shape=tuple(obs.shape) if obs is not None else ()))
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
