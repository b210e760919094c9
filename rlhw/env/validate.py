"""Check a request's action against the spec before anything reaches the arm.

Every rejection names the field and says what would have been accepted, because the person reading
it is usually writing a client in another language and cannot see the server's code.
"""

from __future__ import annotations

import math
import struct

import numpy as np

from rlhw.env import codec
from rlhw.env.v1 import env_pb2 as pb
from rlhw.errors import ErrorReason
from rlhw.robot.spec import TensorSpec


class InvalidRequest(ValueError):
    """A request does not match the spec. ``field`` is the request field at fault."""

    def __init__(self, field: str, message: str, reason: ErrorReason = ErrorReason.INVALID_REQUEST):
        self.field = field
        self.message = message
        self.reason = reason
        super().__init__(f"{field}: {message}")


class ActionChecker:
    """Validates action tensors for one spec (bounds prepared once, not per step)."""

    def __init__(self, spec: TensorSpec, num_envs: int = 1):
        self.spec = spec
        self.dtype = np.dtype(spec.dtype)
        self.code = codec.dtype_code(self.dtype)
        self.shape = ((num_envs,) if num_envs > 1 else ()) + tuple(int(d) for d in spec.shape)
        self._shape_list = list(self.shape)
        self.nbytes = math.prod(self.shape) * self.dtype.itemsize
        self.low = None if spec.low is None else np.broadcast_to(np.asarray(spec.low, dtype=np.float64), spec.shape)
        self.high = None if spec.high is None else np.broadcast_to(np.asarray(spec.high, dtype=np.float64), spec.shape)
        self.is_float = np.issubdtype(self.dtype, np.floating)
        # Fast path for the common case (finite bounds on both sides): one combined comparison,
        # which NaN and inf also fail; the detailed checks run only to explain a rejection.
        self._fast = None
        self._small = None
        self._uniform = None
        if (
            self.low is not None
            and self.high is not None
            and np.isfinite(self.low).all()
            and np.isfinite(self.high).all()
        ):
            self._fast = (
                np.ascontiguousarray(self.low, dtype=self.dtype),
                np.ascontiguousarray(self.high, dtype=self.dtype),
            )
            n = math.prod(self.shape)
            if self.is_float and n <= 64 and self.dtype.kind == "f" and self.dtype.itemsize in (4, 8):
                # Small actions (arm commands): plain Python comparisons beat numpy's per-call overhead.
                fmt = f"<{n}{'f' if self.dtype.itemsize == 4 else 'd'}"
                low = np.broadcast_to(self._fast[0], self.shape).reshape(-1).tolist()
                high = np.broadcast_to(self._fast[1], self.shape).reshape(-1).tolist()
                self._small = (struct.Struct(fmt), list(zip(low, high)))
                if len(set(low)) == 1 and len(set(high)) == 1:  # one box for every element (the usual case)
                    self._uniform = (low[0], high[0])
        self.size = math.prod(self.shape)  # elements

    def check(self, tensor: pb.Tensor, field: str = "action") -> np.ndarray:
        """The action as a read-only array of the spec's dtype and shape, or InvalidRequest."""
        if tensor.dtype != self.code:
            raise InvalidRequest(
                f"{field}.dtype",
                f"expected {self.dtype.name}, got {codec.dtype_name(tensor.dtype)}; "
                f"send {self.dtype.name} (numpy.{self.dtype.name})",
            )
        shape = tensor.shape[:]  # a list: tuple(repeated field) costs 3x as much
        if shape != self._shape_list:
            raise InvalidRequest(f"{field}.shape", f"expected {list(self.shape)}, got {_dims(tuple(shape))}")
        data = tensor.data  # each access of a bytes field copies it: read it once
        if len(data) != self.nbytes:
            raise InvalidRequest(
                f"{field}.data",
                f"has {len(data)} bytes; shape {list(self.shape)} of {self.dtype.name} needs {self.nbytes}",
            )
        return self._checked(data, field)

    def _checked(self, data: bytes, field: str) -> np.ndarray:
        if self._small is not None and self._within(self._small[0].unpack(data)):
            arr = np.frombuffer(data, self.dtype, self.size)
            return arr if arr.shape == self.shape else arr.reshape(self.shape)
        arr = np.frombuffer(data, self.dtype, self.size).reshape(self.shape)
        return self.check_array(arr, field)

    def from_values(self, values: list, field: str = "action") -> np.ndarray:
        """The checked action of its ``values`` in C order (a dm_env_rpc Tensor's payload), as an array of the
        spec's dtype and shape; InvalidRequest out of bounds or of another number of values."""
        if len(values) != self.size:
            raise InvalidRequest(field, f"has {len(values)} values; shape {list(self.shape)} needs {self.size}")
        arr = np.array(values, self.dtype).reshape(self.shape)
        return arr if self._small is not None and self._within(values) else self.check_array(arr, field)

    def _within(self, values) -> bool:
        """Whether a small action's values are all within its finite bounds (the common case, in plain Python:
        numpy's per-call overhead is most of the cost at this size); False for NaN, which `check_array` explains."""
        if self._uniform is not None:
            lo, hi = self._uniform
            # min/max can step over a NaN; the sum cannot (finite values within finite bounds
            # never sum to NaN), so NaN and inf all fall through to the detailed check.
            return lo <= min(values) and max(values) <= hi and (total := sum(values)) == total
        return all(lo <= v <= hi for v, (lo, hi) in zip(values, self._small[1]))  # (False for NaN)

    def check_array(self, arr: np.ndarray, field: str = "action") -> np.ndarray:
        """Finite and within bounds (dtype and shape already right)."""
        if self._fast is not None and self.is_float:
            low, high = self._fast
            if (arr >= low).all() and (arr <= high).all():
                return arr
        if self.is_float:
            finite = np.isfinite(arr)
            if not finite.all():
                idx = _first(~finite)
                raise InvalidRequest(
                    f"{field}{idx}",
                    f"is {_num(arr[tuple(idx)])}; actions must be finite ({int((~finite).sum())} bad values)",
                )
        for bound, outside, side in (
            (self.low, np.less, "below the spec's low"),
            (self.high, np.greater, "above the spec's high"),
        ):
            if bound is not None:
                mask = outside(arr, bound)
                if mask.any():
                    idx = _first(mask)
                    raise InvalidRequest(
                        f"{field}{idx}",
                        f"= {_num(arr[tuple(idx)])} is {side} bound {_num(self._bound(bound, idx))}; "
                        f"clip actions to the action space",
                    )
        return arr

    def _bound(self, bound: np.ndarray, idx: list[int]):
        per_instance = idx[len(idx) - len(self.spec.shape) :] if self.spec.shape else []
        return bound[tuple(per_instance)]


def _dims(shape: tuple[int, ...], most: int = 8) -> str:
    """A shape as text, the first ``most`` dimensions only: a request may claim any number."""
    if len(shape) <= most:
        return str(list(shape))
    return f"[{', '.join(map(str, shape[:most]))}, ...] ({len(shape)} dimensions)"


def _num(value) -> str:
    return (
        f"{value.item() if hasattr(value, 'item') else value:g}"
        if not isinstance(value, (bool, np.bool_))
        else str(value)
    )


class _Index(list):
    def __str__(self) -> str:
        return "[" + ", ".join(str(i) for i in self) + "]" if self else ""

    __repr__ = __str__


def _first(mask: np.ndarray) -> _Index:
    if mask.ndim == 0:
        return _Index()
    return _Index(int(i) for i in np.argwhere(mask)[0])
