"""Tensors and specs as rlhw.env.v1 protobuf messages: dtype codes, Tensor <-> numpy, TensorSpec /
EnvSpec <-> the robot's spec types, Observation messages, step requests.

Every message is built and parsed by protobuf's generated code (the upb C backend); the one
exception to building, a step's observations appended as the bytes protobuf writes before them
(rlhw.env.step_messages.DeclaredTensor), is declared from the spec with these functions. Decoding
is a view: ``numpy.frombuffer`` over the tensor's bytes.
"""

from __future__ import annotations

import math
import struct

import numpy as np

from rlhw.env.v1 import env_pb2 as pb
from rlhw.errors import ErrorReason, FaultKind
from rlhw.robot.spec import EnvSpec, TensorSpec

# ---------------------------------------------------------------------------------------------
# Fault kinds and error reasons: the Python enums and the proto's, one-to-one by name
# (FaultKind.CAMERA_STALL <-> FAULT_KIND_CAMERA_STALL). A member missing on either side fails here,
# at import, not in the middle of an episode.

FAULT_TO_WIRE: dict[FaultKind, int] = {k: pb.FaultKind.Value("FAULT_KIND_" + k.name) for k in FaultKind}
FAULT_FROM_WIRE: dict[int, FaultKind] = {v: k for k, v in FAULT_TO_WIRE.items()}
REASON_TO_WIRE: dict[ErrorReason, int] = {r: pb.ErrorReason.Value("ERROR_REASON_" + r.name) for r in ErrorReason}
REASON_FROM_WIRE: dict[int, ErrorReason] = {v: r for r, v in REASON_TO_WIRE.items()}
#: Trailing metadata of a failed unary call: the ErrorReason's proto name, e.g. ERROR_REASON_CONTROLLED_BY_OTHER.
REASON_METADATA_KEY = "rlhw-error-reason"
#: Trailing metadata of a failed unary call: the request field at fault (``Error.field`` in-band).
FIELD_METADATA_KEY = "rlhw-error-field"


def fault_to_wire(kind: FaultKind | None) -> int:
    """The proto value of a fault kind (FAULT_KIND_UNSPECIFIED = no fault)."""
    return FAULT_TO_WIRE[kind] if kind is not None else pb.FAULT_KIND_UNSPECIFIED


def fault_from_wire(value: int) -> FaultKind | None:
    """The fault kind of a proto value; None for no fault. A value this client does not know (a
    newer server) raises, naming it: a fault must not pass as "no fault"."""
    if value == pb.FAULT_KIND_UNSPECIFIED:
        return None
    kind = FAULT_FROM_WIRE.get(value)
    if kind is None:
        raise ValueError(
            f"StepResponse.fault holds FaultKind value {value}, which this client does not know; "
            "update rlhw (proto/rlhw/env/v1/env.proto) to the server's version"
        )
    return kind


def reason_to_metadata(reason: ErrorReason) -> tuple[str, str]:
    """The trailing-metadata pair that carries ``reason`` on a failed unary call."""
    return REASON_METADATA_KEY, pb.ErrorReason.Name(REASON_TO_WIRE[reason])


def reason_from_wire(value: int | str | None) -> ErrorReason | None:
    """The reason of an ``Error.reason`` value or of the metadata's name; None when absent or unknown
    (an older or newer server): the client then goes by the status code alone."""
    if isinstance(value, str):
        value = pb.ErrorReason.Value(value) if value in pb.ErrorReason.keys() else None
    return REASON_FROM_WIRE.get(value) if value else None


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
# numpy <-> message


def to_tensor(array) -> pb.Tensor:
    """A Tensor message holding a copy of ``array`` (`fill_tensor` sets a field in place instead)."""
    arr = wire_array(array)
    return pb.Tensor(dtype=dtype_code(arr.dtype), shape=arr.shape, data=arr.tobytes())


_LAYOUTS: dict[tuple, tuple[np.dtype, int]] = {}


def from_tensor(tensor: pb.Tensor) -> np.ndarray:
    """A read-only numpy view of the tensor's bytes (no copy). Raises ValueError on a size mismatch."""
    shape = tensor.shape[:]  # a list: tuple(repeated field) costs 3x as much
    key = (tensor.dtype, *shape)
    layout = _LAYOUTS.get(key)
    if layout is None:
        dt = numpy_dtype(tensor.dtype)
        layout = (dt, math.prod(shape) * dt.itemsize)
        if len(_LAYOUTS) < 4096:
            _LAYOUTS[key] = layout
    dt, expected = layout
    data = tensor.data  # each access of a bytes field makes a new bytes object: read it once
    if len(data) != expected:
        raise ValueError(f"tensor has {len(data)} bytes but shape {shape} of {dt.name} needs {expected}")
    arr = np.frombuffer(data, dtype=dt)
    return arr if len(shape) == 1 else arr.reshape(shape)


_struct_d = struct.Struct("<d")


def _stamp(tensor: pb.Tensor):
    """A capture time: a float for a scalar float64 tensor (the common case), else an array."""
    if tensor.dtype == pb.FLOAT64 and not tensor.shape:
        data = tensor.data
        if len(data) == 8:
            return _struct_d.unpack(data)[0]
    return from_tensor(tensor)


def wire_array(array) -> np.ndarray:
    """``array`` in the wire's byte order (little-endian), copied only if it is not. Its layout does not
    matter: ``tobytes`` writes C order. (``np.require`` cost as much as the rest of a tensor's encoding.)"""
    arr = np.asarray(array)
    if arr.dtype.byteorder == ">":
        arr = arr.astype(arr.dtype.newbyteorder("<"))
    return arr


def fill_tensor(message: pb.Tensor, array) -> None:
    """Set ``message`` (a Tensor field, set in place) to ``array``. protobuf takes only ``bytes``, so
    the data is copied twice: ``tobytes``, then into protobuf's arena."""
    arr = wire_array(array)
    code = CODE_BY_DTYPE.get(arr.dtype)
    message.dtype = code if code is not None else dtype_code(arr.dtype)
    message.shape.extend(arr.shape)
    message.data = arr.tobytes()


def fill_observation(message: pb.Observation, tensors, stamps=None) -> None:
    """Set ``message`` (an Observation field, set in place) to ``tensors`` and their capture times
    (float seconds, or arrays of them for a batch)."""
    fields = message.tensors  # read each map once: every attribute access of a protobuf field costs
    for name, value in tensors.items():
        fill_tensor(fields[name], value)
    if not stamps:
        return
    times = message.capture_time
    for name, value in stamps.items():
        if isinstance(value, float):  # the common case: one wall-clock time
            stamp = times[name]
            stamp.dtype = pb.FLOAT64
            stamp.data = _struct_d.pack(value)
        else:
            fill_tensor(times[name], np.asarray(value, dtype=np.float64))


def observation_from_message(message: pb.Observation) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(tensors, capture times) of a parsed Observation, as views of its bytes."""
    # By key: a protobuf map's items() and dict(map) go through the generic Mapping methods, 4x slower
    fields, times = message.tensors, message.capture_time
    return {name: from_tensor(fields[name]) for name in fields}, {name: _stamp(times[name]) for name in times}


def array_of(values, dtype) -> np.ndarray:
    """A numpy array of a repeated scalar field. ``np.asarray`` on the field itself probes it for the
    buffer and array protocols first, 3-4x slower than reading it into a list."""
    return np.array(values[:], dtype)


def map_of(field) -> dict:
    """A protobuf map field (string -> scalar) as a dict, read by key: ``dict(field)`` goes through the generic
    Mapping methods, about twice as slow."""
    return {k: field[k] for k in field}


def fill_map(field, values: dict) -> None:
    """Set a protobuf map field's (string -> scalar) entries to ``values``'s; its ``update`` is the generic
    Mapping method, about twice as slow as setting each entry."""
    for k, v in values.items():
        field[k] = v


def observations_of(message: pb.StepResponse | pb.ResetResponse) -> dict[str, tuple[dict, dict]]:
    """{"observation" / "final_observation": (tensors, capture times)} of a parsed response, for the
    Observation fields it has set."""
    out = {}
    for name in ("observation", "final_observation"):
        if name in message.DESCRIPTOR.fields_by_name and message.HasField(name):
            out[name] = observation_from_message(getattr(message, name))
    return out


def step_request(action: np.ndarray, session: bool) -> bytes:
    """A serialised StepRequest for ``action`` (with ``session``, a SessionRequest{step})."""
    message = pb.SessionRequest() if session else pb.StepRequest()
    fill_tensor((message.step if session else message).action, action)
    return message.SerializeToString()


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
        name=message.name,
        dtype=dtype_name(message.dtype),
        shape=shape,
        low=bound(message.low),
        high=bound(message.high),
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
