"""The hand-written wire path agrees with protobuf's own serializer and parser, both ways, on random
step messages; and it takes its field keys from the descriptors, so a renumbered proto moves it too."""

from __future__ import annotations

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rlhw.env import codec, step_layout, wire
from rlhw.env.v1 import env_pb2 as pb
from rlhw.env.wire_tags import Tags
from rlhw.errors import FaultKind

DTYPES = [np.dtype(d) for d in ("<f4", "<f8", "u1", "<u2", "<i4", "<i8", "?", "i1", "<f2")]
ARRAYS = st.sampled_from(DTYPES).flatmap(lambda dt: hnp.arrays(dt, hnp.array_shapes(min_dims=0, max_dims=3, max_side=4)))
NAMES = st.text("abcxyz_0123456789", min_size=1, max_size=6)
FLOATS = st.floats(allow_nan=False, width=32)
DOUBLES = st.floats(allow_nan=False)

#: The executed action a `StepReader` step carries (the client's action: the message reports none).
NOT_REPORTED = np.zeros((1, 7), np.float32)


@st.composite
def steps(draw, n_max: int = 3):
    """The values of one StepResponse: n instances, faults, timings, an observation with capture times."""
    n = draw(st.integers(1, n_max))
    per = lambda s: st.lists(s, min_size=n, max_size=n)  # noqa: E731
    obs = draw(st.dictionaries(NAMES, ARRAYS, min_size=1, max_size=3))
    return dict(
        reward=draw(per(FLOATS)), terminated=draw(per(st.booleans())), truncated=draw(per(st.booleans())),
        success=draw(per(st.booleans())), fault=draw(per(st.none() | st.sampled_from(FaultKind))),
        fault_message=draw(per(st.text(max_size=12))), timing=draw(st.dictionaries(NAMES, DOUBLES, max_size=3)),
        final_mask=draw(st.just([]) | per(st.booleans())), obs=obs,
        stamps=draw(st.dictionaries(st.sampled_from(sorted(obs)), DOUBLES)),
    )


def protobuf_message(v: dict, classes=None):
    """The same step built with protobuf's object model (``classes``: message classes by name)."""
    cls = classes or {"StepResponse": pb.StepResponse, "Tensor": pb.Tensor}
    msg = cls["StepResponse"](
        reward=v["reward"], terminated=v["terminated"], truncated=v["truncated"], success=v["success"],
        fault=[codec.fault_to_wire(k) for k in v["fault"]], fault_message=v["fault_message"],
        timing=v["timing"], final_mask=v["final_mask"])
    for name, arr in v["obs"].items():
        msg.observation.tensors[name].CopyFrom(_tensor(cls["Tensor"], arr))
    for name, t in v["stamps"].items():
        msg.observation.capture_time[name].CopyFrom(_tensor(cls["Tensor"], np.float64(t)))
    return msg


def _tensor(tensor_class, value):
    arr = codec.wire_array(np.asarray(value))
    return tensor_class(dtype=codec.dtype_code(arr.dtype), shape=arr.shape, data=arr.tobytes())


def fast_path_bytes(v: dict, wrap: int | None = None) -> bytes:
    head = wire.encode_step_head(v["reward"], v["terminated"], v["truncated"], v["success"], v["fault"],
                                 v["fault_message"], v["timing"], v["final_mask"])
    return wire.encode_with_observations(head, [(wire.T.n_observation, v["obs"], v["stamps"])], wrap)


def _same_observation(got: tuple[dict, dict], v: dict) -> None:
    tensors, stamps = got
    assert tensors.keys() == v["obs"].keys()
    for name, arr in v["obs"].items():
        want = codec.wire_array(arr)
        assert (tensors[name].dtype, tensors[name].shape, tensors[name].tobytes()) == (want.dtype, want.shape, want.tobytes())
    assert {k: float(s) for k, s in stamps.items()} == v["stamps"]


@settings(max_examples=40, deadline=None)
@given(steps(), st.booleans())
def test_what_the_fast_path_writes_protobuf_parses_as_the_message_it_would_build(v, session):
    expected = protobuf_message(v)
    data = fast_path_bytes(v, wire.T.n_session_step if session else None)
    parsed = pb.SessionResponse.FromString(data).step if session else pb.StepResponse.FromString(data)
    assert parsed == expected


@settings(max_examples=40, deadline=None)
@given(steps(), st.booleans())
def test_what_protobuf_writes_the_fast_path_reads_as_the_same_values(v, session):
    msg = protobuf_message(v)
    head, observations = wire.read_observation_response(msg.SerializeToString(), pb.StepResponse)  # hand-written
    data = pb.SessionResponse(step=msg).SerializeToString() if session else msg.SerializeToString()
    without_obs = pb.StepResponse()
    without_obs.CopyFrom(msg)
    without_obs.ClearField("observation")
    assert head == without_obs
    _same_observation(observations["observation"], v)
    n = len(v["reward"])
    assert codec.faults_from_wire(head.fault, n) == (v["fault"][0] if n == 1 else v["fault"])
    # The layout reader either declines (protobuf orders fields its own way) or agrees.
    reader = step_layout.StepReader()
    reader.learn(data, head, session)
    got = reader.read(data, NOT_REPORTED)
    if got is not None:
        obs, reward, terminated, truncated, info = got.gym()  # one instance, as the Gymnasium edge gives it
        assert (reward, terminated, truncated) == (np.float32(v["reward"][0]), v["terminated"][0], v["truncated"][0])
        _same_observation((obs, info["timestamps"]), v)


@settings(max_examples=25, deadline=None)
@given(steps(n_max=1), st.booleans())
def test_the_cached_layout_writer_and_reader_agree_with_protobuf_step_after_step(v, session):
    v.update(fault=[None], fault_message=[""], final_mask=[])  # what the cached layouts cover
    wrap = wire.T.n_session_step if session else None
    writer, reader = step_layout.StepWriter(), step_layout.StepReader()
    expected = protobuf_message(v)
    for _ in range(2):  # the first step prepares the layout, the second is written and read by it
        data = writer.write(v["reward"][0], v["terminated"][0], v["truncated"][0], v["success"][0], v["timing"],
                            v["obs"], v["stamps"], wrap)
        parsed = pb.SessionResponse.FromString(data).step if session else pb.StepResponse.FromString(data)
        assert parsed == expected
        got = reader.read(data, NOT_REPORTED)
        if got is None:
            reader.learn(data, parsed, session)
        else:
            obs, reward, terminated, truncated, info = got.gym()
            assert (reward, terminated, truncated) == (np.float32(v["reward"][0]), v["terminated"][0], v["truncated"][0])
            assert info["timing"] == v["timing"] and info["fault"] is None
            _same_observation((obs, info["timestamps"]), v)
    assert reader.read(data, NOT_REPORTED) is not None  # a step with the learned layout is read by it


# ---------------------------------------------------------------------------------------------
# renumbering


def renumbered_proto():
    """env.proto with the fields the fast path writes moved to other numbers (several of them to
    numbers whose key takes two bytes); returns (Tags, message classes by short name)."""
    fdp = descriptor_pb2.FileDescriptorProto.FromString(pb.DESCRIPTOR.serialized_pb)
    messages = {m.name: m for m in fdp.message_type}
    moves = {
        "Tensor": {"dtype": 4, "shape": 9, "data": 20},
        "Observation": {"tensors": 7, "capture_time": 16},
        "StepResponse": {"observation": 21, "reward": 30, "terminated": 31, "truncated": 32, "success": 33,
                         "fault": 40, "fault_message": 41, "timing": 300, "final_observation": 42, "final_mask": 43},
        "ResetResponse": {"observation": 6},
        "SessionResponse": {"reset": 5, "step": 17, "error": 18},
        "StepRequest": {"action": 19},
        "SessionRequest": {"reset": 3, "step": 22},
    }
    for message, fields in moves.items():
        for field in messages[message].field:
            field.number = fields.get(field.name, field.number)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    file = pool.FindFileByName(fdp.name)
    classes = {name: message_factory.GetMessageClass(file.message_types_by_name[name])
               for name in ("StepResponse", "Tensor", "SessionResponse", "StepRequest", "SessionRequest")}
    return Tags(file), classes


def test_the_fast_path_follows_a_renumbered_proto():
    tags, classes = renumbered_proto()
    assert (tags.n_reward, tags.n_timing, tags.n_session_step) == (30, 300, 17)
    v = dict(reward=[0.5], terminated=[False], truncated=[True], success=[False], fault=[FaultKind.CONTACT],
             fault_message=["over the bound"], timing={"env": 1e-3}, final_mask=[],
             obs={"q": np.arange(7, dtype=np.float32), "cam": np.zeros((4, 4, 3), np.uint8)}, stamps={"q": 12.5})
    expected = protobuf_message(v, classes)
    with_generated_tags = fast_path_bytes(v)
    assert classes["StepResponse"].FromString(with_generated_tags) != expected  # the test has teeth
    old = wire.use_tags(tags)
    try:
        assert classes["StepResponse"].FromString(fast_path_bytes(v)) == expected
        session = classes["SessionResponse"].FromString(fast_path_bytes(v, tags.n_session_step))
        assert session.step == expected
        head, observations = wire.read_observation_response(expected.SerializeToString(), classes["StepResponse"])
        assert list(head.fault) == [pb.FAULT_KIND_CONTACT] and list(head.timing) == ["env"]
        _same_observation(observations["observation"], v)
        request = classes["SessionRequest"].FromString(wire.encode_step_request(np.ones(3, np.float32), True))
        assert list(request.step.action.shape) == [3] and request.step.action.data == np.ones(3, np.float32).tobytes()
        # the cached layouts, prepared from the renumbered keys
        quiet = {**v, "fault": [None], "fault_message": [""]}
        writer, reader = step_layout.StepWriter(), step_layout.StepReader()
        for _ in range(2):
            data = writer.write(0.5, False, True, False, v["timing"], v["obs"], v["stamps"], tags.n_session_step)
            parsed = classes["SessionResponse"].FromString(data).step
            assert parsed == protobuf_message(quiet, classes)
            if reader.read(data, NOT_REPORTED) is None:
                reader.learn(data, parsed, True)
        obs, reward, _, truncated, info = reader.read(data, NOT_REPORTED).gym()
        assert reward == 0.5 and truncated and info["timing"] == v["timing"] and obs["q"].tolist() == list(range(7))
    finally:
        wire.use_tags(old)
