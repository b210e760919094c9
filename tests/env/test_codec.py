"""Tensors go on the wire as raw bytes + dtype + shape and come back as numpy views, bit-exact."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rlhw.env import codec, wire
from rlhw.env.v1 import env_pb2 as pb
from rlhw.errors import FaultKind
from rlhw.robot.spec import EnvSpec, TensorSpec

WIRE_DTYPES = ["float32", "float64", "float16", "uint8", "uint16", "uint32", "int8", "int16", "int32", "int64", "bool"]


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(st.sampled_from(WIRE_DTYPES), hnp.array_shapes(min_dims=0, max_dims=4, max_side=5)))
def test_any_wire_array_round_trips_bit_exact_through_the_hand_written_encoder(arr):
    head = pb.StepResponse(reward=[1.5]).SerializeToString()
    data = wire.encode_with_observations(head, [(1, {"x": arr}, {"x": 12.5})])
    msg = pb.StepResponse.FromString(data)
    got, stamps = codec.observation_from_message(msg.observation)
    assert got["x"].dtype == arr.dtype and got["x"].shape == arr.shape
    assert got["x"].tobytes() == arr.tobytes()
    assert float(stamps["x"]) == 12.5 and list(msg.reward) == [1.5]


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(st.sampled_from(WIRE_DTYPES), hnp.array_shapes(min_dims=0, max_dims=3, max_side=12)), st.booleans())
def test_a_hand_written_step_request_parses_to_the_action_every_time_its_header_is_reused(arr, session):
    for action in (arr, arr.T, arr):  # a transposed view is not C-contiguous; headers are cached per dtype and shape
        data = wire.encode_step_request(action, session)
        request = pb.SessionRequest.FromString(data).step if session else pb.StepRequest.FromString(data)
        got = codec.from_tensor(request.action)
        assert got.dtype == action.dtype and got.shape == action.shape
        assert got.tobytes() == np.ascontiguousarray(action).tobytes()


def test_decoding_is_a_view_of_the_message_bytes_not_a_copy():
    t = codec.to_tensor(np.arange(12, dtype=np.float32).reshape(3, 4))
    arr = codec.from_tensor(t)
    assert isinstance(arr.base, bytes) or arr.base is not None
    assert not arr.flags.writeable  # a view of immutable bytes
    assert arr.shape == (3, 4) and arr[2, 3] == 11


def test_big_camera_images_survive_and_nest_inside_the_session_oneof():
    img = np.random.default_rng(0).integers(0, 255, (480, 640, 3), dtype=np.uint8)
    head = pb.StepResponse(terminated=[True]).SerializeToString()
    data = wire.encode_with_observations(head, [(1, {"cam0": img, "cam1": img[::-1]}, None), (9, {"cam0": img}, None)], 2)
    msg = pb.SessionResponse.FromString(data)
    assert msg.WhichOneof("kind") == "step" and list(msg.step.terminated) == [True]
    obs, _ = codec.observation_from_message(msg.step.observation)
    final, _ = codec.observation_from_message(msg.step.final_observation)
    np.testing.assert_array_equal(obs["cam0"], img)
    np.testing.assert_array_equal(obs["cam1"], img[::-1])  # non-contiguous input is made contiguous
    np.testing.assert_array_equal(final["cam0"], img)


def test_a_tensor_whose_bytes_do_not_match_its_shape_is_rejected_with_the_sizes():
    t = pb.Tensor(dtype=pb.FLOAT32, shape=[2, 2], data=b"\0" * 12)
    with pytest.raises(ValueError, match="12 bytes but shape \\[2, 2\\] of float32 needs 16"):
        codec.from_tensor(t)


def test_an_unsupported_dtype_names_the_supported_ones():
    with pytest.raises(ValueError, match="complex128 cannot go on the wire"):
        codec.dtype_code(np.complex128)


def test_env_spec_round_trips_with_scalar_and_array_bounds():
    spec = EnvSpec(
        observations={
            "q": TensorSpec("q", "float32", (7,), -np.arange(7.0), np.arange(7.0) + 1),
            "img": TensorSpec("img", "uint8", (4, 5, 3)),
        },
        action=TensorSpec("action", "float32", (3,), -1.0, 1.0),
        control_hz=15.0,
        robot="fake",
        cameras=("img",),
        description="d",
    )
    msg = codec.env_spec_to_message(spec)
    assert msg.cameras[0].name == "img" and list(msg.cameras[0].shape) == [4, 5, 3]
    assert msg.cameras[0].observation == "img"
    assert msg.autoreset == "none"
    back = codec.env_spec_from_message(pb.EnvSpec.FromString(msg.SerializeToString()))
    np.testing.assert_array_equal(back.observations["q"].high, np.arange(7.0) + 1)
    assert back.observations["img"].low is None and back.action.low == -1.0
    assert back.control_hz == 15.0 and back.cameras == ("img",) and back.robot == "fake"


def test_the_hand_written_step_head_parses_to_the_same_message_protobuf_would_build():
    fields = dict(reward=[1.5, -2.0], terminated=[False, True], truncated=[True, False], success=[False, True],
                  fault=[None, FaultKind.REFLEX], fault_message=["", "joint 4 reflex"], timing={"env": 0.25, "validate": 1e-5},
                  final_mask=[True, False])
    expected = pb.StepResponse(**{**fields, "fault": [pb.FAULT_KIND_UNSPECIFIED, pb.FAULT_KIND_REFLEX]})
    assert pb.StepResponse.FromString(wire.encode_step_head(**fields)) == expected


def test_the_client_reader_returns_views_into_the_received_bytes():
    img = np.arange(128 * 128 * 3, dtype=np.uint32).astype(np.uint8).reshape(128, 128, 3)  # above ZERO_COPY_MIN_BYTES
    data = wire.encode_with_observations(wire.encode_step_head([0.5], [False], [False], [False], [None], [""], {}),
                                          [(1, {"cam": img}, {"cam": 3.0})], 2)
    kind, head, observations = wire.read_session_response(data)
    got = observations["observation"][0]["cam"]
    assert kind == "step" and list(head.reward) == [0.5]
    np.testing.assert_array_equal(got, img)
    assert np.shares_memory(got, np.frombuffer(data, np.uint8))  # no copy after the bytes arrived


def test_small_responses_take_the_protobuf_parser_and_decode_the_same():
    q = np.arange(7, dtype=np.float32)
    data = wire.encode_with_observations(wire.encode_step_head([0.5], [False], [True], [False], [None], [""], {"env": 1e-4}),
                                          [(1, {"q": q}, {"q": 3.0})], 2)
    assert len(data) < wire.ZERO_COPY_MIN_BYTES
    kind, head, observations = wire.read_session_response(data)
    tensors, stamps = observations["observation"]
    assert kind == "step" and list(head.truncated) == [True] and head.timing["env"] == 1e-4
    np.testing.assert_array_equal(tensors["q"], q)
    assert float(stamps["q"]) == 3.0


def test_camera_info_points_at_the_image_observation_of_each_camera():
    spec = EnvSpec(
        observations={"q": TensorSpec("q", "float32", (7,)), "image_wrist": TensorSpec("image_wrist", "uint8", (8, 8, 3))},
        action=TensorSpec("action", "float32", (3,)),
        control_hz=10.0,
        cameras=("wrist", "front"),
    )
    wrist, front = codec.env_spec_to_message(spec).cameras
    assert (wrist.name, wrist.observation, list(wrist.shape)) == ("wrist", "image_wrist", [8, 8, 3])
    assert (front.name, front.observation, list(front.shape)) == ("front", "", [])
