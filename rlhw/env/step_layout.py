"""Step messages of single-instance servers, by the cached layout of the previous step.

Step after step a server sends the same message shape: the same observation names, dtypes and
shapes, the same timing keys, one reward and three flags. Only values change. Both ends therefore
prepare the message's layout once - every byte that does not hold a value - and per step only write
(server, `StepWriter`) or read (client, `StepReader`) the values: a few C calls instead of a walk
over fields. Whenever a step does not fit the prepared layout (first step, a fault, another
camera set, a batch), the general wire path (rlhw.env.wire) handles it and the layout is prepared
afresh; both paths give the same bytes and the same values. Field keys come from the descriptors
(``wire.T``, read when a layout is prepared), never from literals here.
"""

from __future__ import annotations

import math
import struct

import numpy as np

from rlhw.env import wire
from rlhw.env.codec import CODE_BY_DTYPE, faults_from_wire, numpy_dtype
from rlhw.env.v1 import env_pb2 as pb
from rlhw.robot.step import FLAG, Step
from rlhw.env.wire import (
    BIG_TENSOR_BYTES,
    F64,
    encode_step_head,
    encode_with_observations,
    entry_prefix,
    len_prefix,
    map_double_entry,
    no_fault_fields,
    packed_flag,
    read_varint,
)
from rlhw.env.wire_tags import LEN


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
            if any(a.nbytes > BIG_TENSOR_BYTES and not a.flags.c_contiguous for a in obs.values()):
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
        head = encode_step_head([reward], [terminated], [truncated], [success], [None], [""], timing)
        return encode_with_observations(head, [(wire.T.n_observation, obs, stamps)], wrap_field)

    @staticmethod
    def _prepare(key, sig, timing, obs, stamps, wrap_field) -> _WriterLayout | None:
        if any(not isinstance(v, (float, int)) for v in stamps.values()):
            return None  # array capture times (batched envs) take the general path
        t = wire.T
        # each flag: its packed one-element prefix, then the value byte
        head: list = [len_prefix(t.n_reward, 4), "f", packed_flag(t.n_terminated, False)[:-1], "?",
                      packed_flag(t.n_truncated, False)[:-1], "?", packed_flag(t.n_success, False)[:-1], "?",
                      no_fault_fields()]
        for name in timing:
            entry = map_double_entry(t.n_timing, name, 0.0)
            head += [entry[:-8], "d"]
        tensors = []
        tensor_items: list = []
        obs_size = 0
        for (dtype, shape), name in zip(sig, obs):
            if dtype.byteorder == ">" or dtype not in CODE_BY_DTYPE:
                return None
            prefix, total = entry_prefix(t.n_tensors, name, dtype, shape)
            tensors.append((dtype, shape, prefix, total - len(prefix) > BIG_TENSOR_BYTES))
            tensor_items += [prefix, f"{total - len(prefix)}s"]
            obs_size += total
        stamp_items: list = []
        for name in stamps:
            prefix, total = entry_prefix(t.n_capture_time, name, F64, ())
            stamp_items += [prefix, "d"]
            obs_size += total
        head.append(len_prefix(t.n_observation, obs_size))
        if wrap_field is not None:  # the head's own size is its template's: fixed bytes and value slots
            head.insert(0, len_prefix(wrap_field, _Template(head).struct.size + obs_size))
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

    ``read`` returns the `Step` (rlhw.robot.step) of one instance that `read_response` would give, with
    ``executed`` (the client's action: a message with interventions has no layout), or None when the message
    does not have the layout of the previous one that `learn` was given. Every byte outside the value slots
    is compared with that message, and the slots hold only fixed-size values (floats, tensor data,
    one-byte flags), so a message that passes parses exactly as the general reader would parse it.
    """

    def __init__(self):
        self._layout: _ReaderLayout | None = None

    def read(self, data: bytes, executed: np.ndarray) -> Step | None:
        layout = self._layout
        if layout is None or len(data) != layout.size or layout.check.unpack_from(data) != layout.expected:
            return None
        v = layout.values.unpack_from(data)
        reward, terminated, truncated, success = v[:4]
        if terminated > 1 or truncated > 1 or success > 1:
            return None  # a flag written as another varint: let protobuf decide
        ndarray = np.ndarray  # a read-only view of the bytes with its shape (one instance), in one call
        obs = {name: ndarray(shape, dt, data, offset) for name, dt, offset, shape in layout.tensors}
        return Step(obs, np.array([reward]), FLAG[terminated == 1], FLAG[truncated == 1], FLAG[success == 1],
                    executed, FLAG[False], layout.fault, layout.fault_message,
                    {name: np.array([t]) for name, t in zip(layout.stamp_names, v[layout.stamp_slice])},
                    dict(zip(layout.timing_keys, v[layout.timing_slice])))

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
    t = wire.T
    segments = _segments(buf, session)
    if segments is None:
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
            tensors.append((name, dt, a, (1, *shape)))
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
    if flag_fields != [t.n_terminated, t.n_truncated, t.n_success]:
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
    layout.fault = (faults_from_wire(head.fault, 1) if head.fault else None,)
    layout.fault_message = (head.fault_message[0] if head.fault_message else "",)
    return layout


def _segments(buf, session: bool) -> list | None:
    """The message's ("fixed", start, end) and ("slot", kind, start, end, info) pieces, in order;
    None when it is no single-instance step (one reward, three flags)."""
    t = wire.T
    segments: list = []
    pos = 0
    end = len(buf)
    if session:
        key, p = read_varint(buf, 0)
        if key != t.len_key(t.n_session_step):
            return None
        n, p = read_varint(buf, p)
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
    return segments


def _entry_key(buf, pos: int) -> tuple[str, int]:
    """The key of a map entry that starts at ``pos`` (field 1, written first), and where its value starts."""
    k, p = read_varint(buf, pos)
    if k != wire.T.k_entry_key:
        raise _NoLayout()
    kn, p = read_varint(buf, p)
    return bytes(buf[p:p + kn]).decode(), p + kn


def _layout_step(buf, pos: int, end: int, segments: list, slots: dict) -> None:
    t = wire.T
    flags = (t.n_terminated, t.n_truncated, t.n_success)
    general = (t.n_reward, *flags, t.n_final_observation, t.n_final_mask, t.n_executed_action, t.n_intervened)
    double_key = wire.varint(t.k_entry_double)
    while pos < end:
        start = pos
        key, pos = read_varint(buf, pos)
        field, wire_type = key >> 3, key & 7
        if wire_type != LEN:
            raise _NoLayout()
        n, pos = read_varint(buf, pos)
        stop = pos + n
        if field == t.n_reward and n == 4:
            segments += [("fixed", start, pos), ("slot", "reward", pos, stop, None)]
            slots["reward"] += 1
        elif field in flags and n == 1:
            segments += [("fixed", start, pos), ("slot", "flag", pos, stop, field)]
            slots["flags"] += 1
        elif field in general:
            raise _NoLayout()  # batched replies, final observations, interventions: the general reader
        elif field == t.n_timing:
            # map<string, double> entry: key then value, as every writer lays it out
            name, p = _entry_key(buf, pos)
            v = p + len(double_key)
            if v + 8 != stop or bytes(buf[p:v]) != double_key:
                raise _NoLayout()
            segments += [("fixed", start, v), ("slot", "timing", v, stop, name)]
        elif field == t.n_observation:
            segments.append(("fixed", start, pos))
            _layout_observation(buf, pos, stop, segments)
        else:  # the fault fields and anything unknown: fixed bytes (their values are in `head`)
            segments.append(("fixed", start, stop))
        pos = stop
    if pos != end:
        raise _NoLayout()


def _layout_observation(buf, pos: int, end: int, segments: list) -> None:
    t = wire.T
    tensors_key, stamps_key = t.len_key(t.n_tensors), t.len_key(t.n_capture_time)
    while pos < end:
        start = pos
        key, pos = read_varint(buf, pos)
        if key not in (tensors_key, stamps_key):
            raise _NoLayout()
        n, pos = read_varint(buf, pos)
        stop = pos + n
        # entry: key string, then the Tensor
        name, p = _entry_key(buf, pos)
        k, p = read_varint(buf, p)
        if k != t.k_entry_tensor:
            raise _NoLayout()
        tn, p = read_varint(buf, p)
        if p + tn != stop:
            raise _NoLayout()
        # Tensor: dtype, packed shape (optional), data (optional), in field order
        k, p = read_varint(buf, p)
        if k != t.k_dtype:
            raise _NoLayout()
        code, p = read_varint(buf, p)
        dt = numpy_dtype(code)
        shape: list[int] = []
        k, q = read_varint(buf, p) if p < stop else (None, p)
        if k == t.k_shape:
            sn, p = read_varint(buf, q)
            q = p + sn
            while p < q:
                d, p = read_varint(buf, p)
                shape.append(d)
        nbytes = 0
        if p < stop:
            k, p = read_varint(buf, p)
            if k != t.k_data:
                raise _NoLayout()
            nbytes, p = read_varint(buf, p)
        if p + nbytes != stop or nbytes != math.prod(shape) * dt.itemsize:
            raise _NoLayout()
        if key == stamps_key:  # capture time: a float64 scalar
            if dt != F64 or shape or nbytes != 8:
                raise _NoLayout()
            segments += [("fixed", start, p), ("slot", "stamp", p, stop, name)]
        else:
            segments += [("fixed", start, p), ("slot", "tensor", p, stop, (name, dt, tuple(shape)))]
        pos = stop
    if pos != end:
        raise _NoLayout()
