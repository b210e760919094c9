"""Field keys of the env messages, taken from the generated descriptors (env_pb2.DESCRIPTOR).

The hand-written wire code (rlhw.env.wire, rlhw.env.step_layout) writes and compares field keys -
``(field_number << 3) | wire_type`` - instead of going through protobuf's objects. Every key it uses
is computed here from the descriptors, so renumbering a field in proto/rlhw/env/v1/env.proto (and
regenerating) moves the fast path with it; nothing else in the wire code knows a field number.
"""

from __future__ import annotations

from google.protobuf.descriptor import Descriptor, FieldDescriptor, FileDescriptor

# protobuf wire types
VARINT, I64, LEN, I32 = 0, 1, 2, 5
_WIRE_TYPES = {
    FieldDescriptor.TYPE_DOUBLE: I64, FieldDescriptor.TYPE_FIXED64: I64, FieldDescriptor.TYPE_SFIXED64: I64,
    FieldDescriptor.TYPE_FLOAT: I32, FieldDescriptor.TYPE_FIXED32: I32, FieldDescriptor.TYPE_SFIXED32: I32,
    FieldDescriptor.TYPE_STRING: LEN, FieldDescriptor.TYPE_BYTES: LEN, FieldDescriptor.TYPE_MESSAGE: LEN,
}  # every other scalar (ints, bool, enum) is a varint

_SMALL_VARINTS = [bytes((i,)) for i in range(128)]


def varint(value: int) -> bytes:
    """A protobuf base-128 varint (negative values as their 64-bit two's complement)."""
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


def wire_type(field: FieldDescriptor) -> int:
    """The wire type a writer uses for ``field`` (packed repeated scalars are length-delimited)."""
    if field.is_repeated and field.is_packed:
        return LEN
    return _WIRE_TYPES.get(field.type, VARINT)


def key(message: Descriptor, name: str) -> int:
    """The key of field ``name`` of ``message``, as an int (compare it with a decoded varint)."""
    field = message.fields_by_name[name]
    return (field.number << 3) | wire_type(field)


class Tags:
    """The field numbers (``n_*``) and keys (``k_*``, ints; ``b_*``, their bytes) the wire code uses.

    Built once from a FileDescriptor: the generated one in normal use, another one in the tests
    that prove the fast path follows a renumbered proto.
    """

    def __init__(self, file: FileDescriptor):
        m = file.message_types_by_name
        tensor, obs, step, reset = m["Tensor"], m["Observation"], m["StepResponse"], m["ResetResponse"]
        step_request, session_request, session_response = m["StepRequest"], m["SessionRequest"], m["SessionResponse"]
        tensor_entry = obs.fields_by_name["tensors"].message_type  # map<string, Tensor> entry
        timing_entry = step.fields_by_name["timing"].message_type  # map<string, double> entry
        # Tensor
        self.k_dtype = key(tensor, "dtype")
        self.k_shape = key(tensor, "shape")  # packed
        self.n_shape = tensor.fields_by_name["shape"].number  # also read unpacked (protobuf allows both)
        self.k_data = key(tensor, "data")
        # map entries: the key string, then the value (a Tensor, or a double)
        self.k_entry_key = key(tensor_entry, "key")
        self.k_entry_tensor = key(tensor_entry, "value")
        self.k_entry_double = key(timing_entry, "value")
        assert key(timing_entry, "key") == self.k_entry_key
        # Observation
        self.n_tensors = obs.fields_by_name["tensors"].number
        self.n_capture_time = obs.fields_by_name["capture_time"].number
        # StepResponse and ResetResponse
        self.n_reset_observation = reset.fields_by_name["observation"].number
        f = step.fields_by_name
        self.n_observation = f["observation"].number
        self.n_final_observation = f["final_observation"].number
        self.n_reward, self.n_terminated, self.n_truncated, self.n_success = (
            f[x].number for x in ("reward", "terminated", "truncated", "success"))
        self.n_fault, self.n_fault_message, self.n_timing = f["fault"].number, f["fault_message"].number, f["timing"].number
        self.n_final_mask, self.n_executed_action, self.n_intervened = (
            f[x].number for x in ("final_mask", "executed_action", "intervened"))
        for name in ("reward", "terminated", "truncated", "success", "fault", "final_mask", "intervened"):
            assert wire_type(f[name]) == LEN, f"StepResponse.{name} must be a packed repeated scalar"
        # Session stream and requests
        self.n_session_reset = session_response.fields_by_name["reset"].number
        self.n_session_step = session_response.fields_by_name["step"].number
        self.n_session_error = session_response.fields_by_name["error"].number
        self.b_request_action = varint(key(step_request, "action"))
        self.b_session_request_step = varint(key(session_request, "step"))
        # bytes of the keys that are written
        self.b_dtype, self.b_shape, self.b_data = varint(self.k_dtype), varint(self.k_shape), varint(self.k_data)
        self.b_entry_key, self.b_entry_tensor = varint(self.k_entry_key), varint(self.k_entry_tensor)
        self.b_entry_double = varint(self.k_entry_double)

    def len_key(self, field: int) -> int:
        """The key of a length-delimited field (messages, strings, packed scalars) numbered ``field``."""
        return (field << 3) | LEN
