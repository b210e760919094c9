"""Large payloads travel through the Ray object store; only a handle travels through actors.

Why: a channel actor or a mailbox that receives a 50 MB array as an argument would deserialize it,
hold it in its own heap and serialize it again for the consumer. Instead the producer calls
``ray.put`` once, and the tiny :class:`StoredRef` (a container around the ObjectRef, so that Ray
does not resolve it on the way) is what gets queued. The consumer ``ray.get``s it: on the same node
numpy arrays come back zero-copy (read-only views of shared memory), and the payload is serialized
exactly once. When the consumer drops the value, the object's reference count reaches zero and the
object store frees it.
"""

from __future__ import annotations

from typing import Any

import ray

#: Payloads at or above this many bytes (numpy arrays, torch tensors, dicts/lists/tuples of them)
#: are stored in the object store instead of being passed inline.
LARGE_PAYLOAD_BYTES = 64 * 1024


class StoredRef:
    """A payload that lives in the object store. Holds the ObjectRef inside a list on purpose:
    Ray resolves ObjectRefs only when they are top-level task arguments."""

    __slots__ = ("refs",)

    def __init__(self, ref: ray.ObjectRef):
        self.refs = [ref]

    def __reduce__(self):
        return (_rebuild, (self.refs[0],))


def _rebuild(ref: ray.ObjectRef) -> StoredRef:
    return StoredRef(ref)


def payload_nbytes(obj: Any, stop_at: int = LARGE_PAYLOAD_BYTES, _depth: int = 0) -> int:
    """Bytes held by array-like leaves of ``obj``; stops counting once ``stop_at`` is reached.

    Only looks at numpy arrays, torch tensors, bytes and (nested) dict/list/tuple/dataclass containers of
    them (typed messages are dataclasses); anything else counts as small. Cheap: never serializes.
    """
    if _depth > 4:
        return 0
    nbytes = getattr(obj, "nbytes", None)  # numpy arrays, torch tensors (torch >= 2.1)
    if isinstance(nbytes, int) and not isinstance(obj, type):
        return nbytes
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return len(obj)
    total = 0
    if isinstance(obj, dict):
        children = obj.values()
    elif isinstance(obj, (list, tuple)):
        children = obj
    elif hasattr(type(obj), "__dataclass_fields__"):
        children = [getattr(obj, name) for name in type(obj).__dataclass_fields__]
    else:
        return 0
    for child in children:
        total += payload_nbytes(child, stop_at, _depth + 1)
        if total >= stop_at:
            break
    return total


#: Types that payload_nbytes counts as small: skipped without a look (a batch of small items is the
#: common case, and the look costs a few microseconds per item).
_PLAIN = frozenset({int, float, bool, str, type(None)})


def wrap(obj: Any, threshold: int = LARGE_PAYLOAD_BYTES) -> Any:
    """Return ``obj`` itself when small, else a :class:`StoredRef` to a single ``ray.put`` of it."""
    if type(obj) in _PLAIN:
        return obj
    if threshold >= 0 and payload_nbytes(obj, threshold) >= threshold:
        return StoredRef(ray.put(obj))
    return obj


def unwrap_many(values: list[Any], timeout: float | None = None) -> list[Any]:
    """Resolve every :class:`StoredRef` in ``values`` with one batched ``ray.get``."""
    idx = [i for i, v in enumerate(values) if isinstance(v, StoredRef)]
    if not idx:
        return values
    fetched = ray.get([values[i].refs[0] for i in idx], timeout=timeout)
    out = list(values)
    for i, v in zip(idx, fetched):
        out[i] = v
    return out


async def unwrap_many_async(values: list[Any]) -> list[Any]:
    import asyncio

    idx = [i for i, v in enumerate(values) if isinstance(v, StoredRef)]
    if not idx:
        return values
    fetched = await asyncio.gather(*(values[i].refs[0] for i in idx))
    out = list(values)
    for i, v in zip(idx, fetched):
        out[i] = v
    return out
