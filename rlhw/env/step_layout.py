"""Where a usual step's values lie in its serialised message: a `Layout` learned from protobuf's own bytes.

Step after step a server answers with the same message but for its values: the same observation names, dtypes
and shapes, the same timing keys, the same number of instances. Every byte that is not a value (field keys,
lengths, map keys, dtypes, shapes) is the same from one step to the next, and every value has the same size. So
once protobuf has serialised (server) or parsed (client) one usual step, `Layout.learn` walks its bytes once and
notes where each value lies; after that the server writes a step's values into those places, and the client reads
them from there, with one `struct` call each instead of a walk over protobuf's fields and maps.

Nothing here encodes a message from scratch: every layout comes from bytes protobuf wrote, and a message is read by
a layout only where its every other byte equals the learned message's, so it means what the learned message means
with other values. Anything else (a fault, a final observation, an operator's takeover, an error, a new camera, a
field this version does not know) does not match, and the caller takes protobuf's own path.
"""

from __future__ import annotations

import enum
import struct
from dataclasses import dataclass

from rlhw.env.v1 import env_pb2 as pb


class Part(enum.Enum):
    """What a value in a usual step's message is (with a key for the first three)."""

    OBSERVATION = "observation"  # an observation tensor's data
    CAPTURE_TIME = "capture_time"  # its capture time's data (float64, one per instance)
    TIMING = "timing"  # one phase's seconds (a double)
    REWARD = "reward"  # packed float32, one per instance
    TERMINATED = "terminated"  # packed bools, one byte per instance
    TRUNCATED = "truncated"
    SUCCESS = "success"


Slot = tuple[Part, str]  # a value's part and key ("" for the per-instance scalars)

_STEP_FIELDS = pb.StepResponse.DESCRIPTOR.fields_by_name
_OBSERVATION, _TIMING = _STEP_FIELDS["observation"].number, _STEP_FIELDS["timing"].number
_SCALARS = {_STEP_FIELDS[p.value].number: p for p in (Part.REWARD, Part.TERMINATED, Part.TRUNCATED, Part.SUCCESS)}
_IN_SESSION = pb.SessionResponse.DESCRIPTOR.fields_by_name["step"].number
_MAPS = {
    pb.Observation.DESCRIPTOR.fields_by_name["tensors"].number: Part.OBSERVATION,
    pb.Observation.DESCRIPTOR.fields_by_name["capture_time"].number: Part.CAPTURE_TIME,
}
_TENSOR = {f.name: f.number for f in pb.Tensor.DESCRIPTOR.fields}
_LEN, _FIXED64, _VARINT, _FIXED32 = 2, 1, 0, 5  # protobuf's wire types


class _NotLaidOut(Exception):
    """The message holds something a layout does not (see `Layout.learn`)."""


#: How `Layout.read` cuts out each part's values (``{}``: the value's size): timings as doubles; tensors' data
#: skipped (an empty bytes in its place), since the reader makes its arrays as views of the message at `starts`.
_READ = {Part.TIMING: "d", Part.OBSERVATION: "{}x0s", Part.CAPTURE_TIME: "{}x0s"}


@dataclass(frozen=True, eq=False)
class Layout:
    """A usual step's message as its parts: fixed bytes and values in turn, ``skeleton[0]``, value 0,
    ``skeleton[1]``, ..., value k-1, ``skeleton[k]``; ``slots[i]`` says what value i is and ``starts[i]`` where it
    begins in the message."""

    slots: tuple[Slot, ...]
    sizes: tuple[int, ...]  # each value's bytes
    starts: tuple[int, ...]
    skeleton: tuple[bytes, ...]
    template: tuple[bytes, ...]  # the learned message's parts, its values in place (`blank`)
    reading: struct.Struct  # the whole message, cut as `read` gives it

    @classmethod
    def learn(cls, data: bytes, in_session: bool) -> Layout | None:
        """The layout of ``data``, a serialised usual StepResponse (``in_session``: SessionResponse{step}); None
        where it holds anything else, a field twice, or an empty tensor (nothing to lay out)."""
        try:
            start, end = 0, len(data)
            if in_session:
                ((number, wire, start, end),) = list(_fields(data, 0, len(data)))
                if number != _IN_SESSION or wire != _LEN:
                    raise _NotLaidOut
            places = _step_places(data, start, end)
        except (_NotLaidOut, ValueError):  # ValueError: no field, or more than one, around a session's step
            return None
        template, fmt, pos = [], ["<"], 0
        for (part, _key), (begin, stop) in places.items():
            template += [data[pos:begin], data[begin:stop]]
            fmt.append(f"{begin - pos}s" + _READ.get(part, "{}s").format(stop - begin))
            pos = stop
        template.append(data[pos:])
        fmt.append(f"{len(data) - pos}s")
        return cls(
            tuple(places),
            tuple(stop - begin for begin, stop in places.values()),
            tuple(begin for begin, _ in places.values()),
            tuple(template[0::2]),
            tuple(template),
            struct.Struct("".join(fmt)),
        )

    def read(self, data: bytes) -> tuple | None:
        """``data`` cut into fixed bytes and values in turn (value i at index `at(i)`: bytes, a timing's float, or
        an empty bytes for a tensor's data); None where any fixed byte differs from the learned message's (another
        kind of message, or the same kind laid out otherwise)."""
        if len(data) != self.reading.size:
            return None
        parts = self.reading.unpack(data)
        return parts if parts[0::2] == self.skeleton else None

    def blank(self) -> list:
        """A message's parts to fill in: the fixed bytes in place, value i to go at index `at(i)`."""
        return list(self.template)

    def pack(self, parts: list) -> bytes | None:
        """The message of `blank`'s ``parts`` (each value bytes-like: bytes, or a C-contiguous array); None where
        a value is not bytes-like or not its slot's size."""
        try:
            data = b"".join(parts)
        except TypeError:  # (an array that is not C-contiguous)
            return None
        return data if len(data) == self.reading.size else None

    @staticmethod
    def at(i: int) -> int:
        """Where value i is among a message's parts (`read`, `blank`)."""
        return 2 * i + 1


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise _NotLaidOut
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _fields(data: bytes, pos: int, end: int):
    """(field number, wire type, payload start, payload end) of each field in ``data[pos:end]``."""
    while pos < end:
        key, pos = _varint(data, pos)
        wire = key & 7
        if wire == _VARINT:
            stop = _varint(data, pos)[1]
        elif wire == _FIXED64:
            stop = pos + 8
        elif wire == _LEN:
            size, pos = _varint(data, pos)
            stop = pos + size
        elif wire == _FIXED32:
            stop = pos + 4
        else:
            raise _NotLaidOut
        if stop > end:
            raise _NotLaidOut
        yield key >> 3, wire, pos, stop
        pos = stop


def _entry(data: bytes, start: int, end: int) -> tuple[str, int, int, int]:
    """(key, value's wire type, start, end) of a map entry with a string key (protobuf writes a map entry as a
    message with the key as field 1 and the value as field 2)."""
    key = value = None
    for number, wire, begin, stop in _fields(data, start, end):
        if number == 1 and wire == _LEN and key is None:
            try:
                key = data[begin:stop].decode()
            except UnicodeDecodeError:
                raise _NotLaidOut from None
        elif number == 2 and value is None:
            value = (wire, begin, stop)
        else:
            raise _NotLaidOut
    if key is None or value is None:
        raise _NotLaidOut
    return (key, *value)


def _step_places(data: bytes, start: int, end: int) -> dict[Slot, tuple[int, int]]:
    """Each value's (start, end) in a StepResponse's bytes, in wire order."""
    places: dict[Slot, tuple[int, int]] = {}
    seen = set()
    for number, wire, begin, stop in _fields(data, start, end):
        if wire != _LEN or (number in seen and number != _TIMING):  # (each timing is an entry of its own)
            raise _NotLaidOut
        seen.add(number)
        if number == _OBSERVATION:
            _observation_places(data, begin, stop, places)
        elif number == _TIMING:
            key, value_wire, value_start, value_end = _entry(data, begin, stop)
            if value_wire != _FIXED64 or (Part.TIMING, key) in places:
                raise _NotLaidOut
            places[Part.TIMING, key] = (value_start, value_end)
        elif number in _SCALARS:  # packed: all instances' values in one field
            places[_SCALARS[number], ""] = (begin, stop)
        else:  # a fault, a final observation, an executed action: not a usual step
            raise _NotLaidOut
    return places


def _observation_places(data: bytes, start: int, end: int, places: dict) -> None:
    for number, wire, begin, stop in _fields(data, start, end):
        part = _MAPS.get(number)
        if part is None or wire != _LEN:
            raise _NotLaidOut
        key, value_wire, value_start, value_end = _entry(data, begin, stop)
        if value_wire != _LEN or (part, key) in places:
            raise _NotLaidOut
        place = None
        for field, tensor_wire, tensor_start, tensor_end in _fields(data, value_start, value_end):
            if field == _TENSOR["data"] and tensor_wire == _LEN and place is None:
                place = (tensor_start, tensor_end)
            elif field not in (_TENSOR["dtype"], _TENSOR["shape"]):  # the layout's fixed bytes
                raise _NotLaidOut
        if place is None:
            raise _NotLaidOut
        places[part, key] = place
