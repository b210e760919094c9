"""Tensors and specs as rlhw.env.v1 protobuf messages: dtype codes, Tensor <-> numpy, TensorSpec /
EnvSpec <-> the robot's spec types, Observation messages.

These are the conversions every non-step message needs (GetSpec, the dm_env_rpc bridge, the
client's fallbacks); they go through the protobuf object model because clarity beats speed there.
Step and reset messages, which carry camera images every step, are written and read in the wire
format directly (rlhw.env.wire) and, step after step, by a cached layout (rlhw.env.step_layout).
Decoding here is still zero-copy: ``numpy.frombuffer`` over the message's bytes.
"""

from __future__ import annotations

import math
import struct

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

#: The wire code of each supported numpy dtype, keyed by the dtype itself (no name lookup per tensor).
CODE_BY_DTYPE: dict[np.dtype, int] = {dt: code for code, dt in _DTYPES.items()}


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
    arr = wire_array(array)
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


_struct_d = struct.Struct("<d")


def _stamp(tensor: pb.Tensor):
    """A capture time: a float for a scalar float64 tensor (the common case), else an array."""
    if tensor.dtype == pb.FLOAT64 and not tensor.shape:
        data = tensor.data
        if len(data) == 8:
            return _struct_d.unpack(data)[0]
    return from_tensor(tensor)


def wire_array(array) -> np.ndarray:
    """``array`` as a C-contiguous little-endian array (the wire's byte order), copied only if needed."""
    arr = np.asarray(array)
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return np.require(arr, requirements="C")


def observation_from_message(message: pb.Observation) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(tensors, capture times) of a parsed Observation, as views of its bytes."""
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
