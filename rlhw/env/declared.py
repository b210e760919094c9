"""`DeclaredTensor`: where an array's bytes go in a message protobuf wrote, declared once, not learned per step.

Protobuf parses a message and another written after it as the two merged: a map or a repeated field gains the
second's entries, a message field set in both is merged. So an answer can be protobuf's serialisation of
everything but its large arrays, then, for each array, a small message of its own holding only that array, written
as ``prefix + the array's bytes + suffix``. ``prefix`` and ``suffix`` are cut, once when a server starts, from
protobuf's own serialisation of that small message with a probe array in it, and checked there against a second
array: a protobuf that lays its bytes out otherwise (or a payload that is not the array's raw bytes, such as
varints) declares nothing, and everything goes through protobuf's generated code as before.

A reader that knows the same declarations reads such an array as a view of the received bytes where they end with
it (`view_before`), and gives protobuf's parser the bytes before it: a parse that ends exactly there ends at a field's
boundary, so the two readings are protobuf's reading of the whole.

Why: an array set on a protobuf message is copied three times (``tobytes``, into the message's arena, into the
serialised bytes), each into fresh pages; two 640x480 camera frames cost 1.7-4 ms to encode that way, against
about 0.2 ms as declared pieces (docs/env_service.md, "The wire").
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from google.protobuf.message import Message

log = logging.getLogger("rlhw.env")


def _probe(dtype: np.dtype, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """An array of distinct-looking finite values (no NaN, whose bits protobuf's float path may change)."""
    count = math.prod(shape)
    if dtype.kind == "b":
        values = (np.arange(count) * 7 + seed) % 3 == 0
    else:
        values = (np.arange(count) * 37 + 11 + 53 * seed) % 251 + (0.5 if dtype.kind == "f" else 0)
    return np.ascontiguousarray(values.astype(dtype).reshape(shape))


@dataclass(frozen=True)
class DeclaredTensor:
    """One array of a fixed dtype and shape as a message of its own: ``prefix + array bytes + suffix``."""

    dtype: np.dtype
    shape: tuple[int, ...]
    prefix: bytes
    suffix: bytes
    count: int = field(init=False, repr=False, compare=False)  # the array's elements
    size: int = field(init=False, repr=False, compare=False)  # bytes of the whole message: prefix, array, suffix

    def __post_init__(self):
        # Derived once: the reader checks every step's pieces against these.
        count = math.prod(self.shape)
        object.__setattr__(self, "count", count)
        object.__setattr__(self, "size", len(self.prefix) + count * self.dtype.itemsize + len(self.suffix))

    @classmethod
    def declare(
        cls,
        what: str,
        dtype,
        shape: tuple[int, ...],
        new: Callable[[], Message],
        put: Callable[[Message, np.ndarray], None],
    ) -> DeclaredTensor | None:
        """The declared tensor of arrays of ``dtype`` and ``shape`` that ``put`` sets into a message ``new`` makes;
        None (logged as ``what``) where protobuf's bytes of it are not one run of the array's bytes between fixed
        ones, or the array is empty."""
        dtype, shape = np.dtype(dtype), tuple(int(d) for d in shape)
        if math.prod(shape) == 0:
            return None
        pieces = []
        for seed in (0, 1):
            array = _probe(dtype, shape, seed)
            message = new()
            put(message, array)
            data, raw = message.SerializeToString(), array.tobytes()
            at = data.find(raw)
            if at < 0 or data.find(raw, at + 1) >= 0:
                pieces.append(None)
                break
            pieces.append((data[:at], data[at + len(raw) :]))
        if pieces[-1] is None or pieces[0] != pieces[1]:
            log.warning(
                "%s goes through protobuf's generated code: its bytes are not the array's between fixed ones", what
            )
            return None
        return cls(dtype, shape, *pieces[0])

    def view_before(self, data: bytes, end: int) -> np.ndarray | None:
        """The array of this message where it ends ``data[:end]`` (a read-only view of ``data``, no copy); None
        where ``data[:end]`` does not end with its prefix, the array's number of bytes and its suffix."""
        start = end - self.size
        prefix = self.prefix
        if start < 0 or not data.startswith(prefix, start) or not data.endswith(self.suffix, 0, end):
            return None
        return np.frombuffer(data, self.dtype, self.count, start + len(prefix)).reshape(self.shape)

    def fits(self, value) -> bool:
        """Whether ``value``'s bytes as they are say what protobuf would write for it."""
        return (
            isinstance(value, np.ndarray)
            and value.dtype == self.dtype
            and value.shape == self.shape
            and value.flags.c_contiguous
        )

    def pieces(self, value: np.ndarray) -> tuple:
        """The message holding ``value``, as pieces for ``bytes.join`` (the array itself: its one copy)."""
        return (self.prefix, value, self.suffix) if self.suffix else (self.prefix, value)
