"""Tensors go on the wire as raw bytes + dtype + shape and come back as numpy views, bit-exact."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rlhw.env import codec
from rlhw.env.v1 import env_pb2 as pb
from rlhw.robot.spec import EnvSpec, TensorSpec

WIRE_DTYPES = ["float32", "float64", "float16", "uint8", "uint16", "uint32", "int8", "int16", "int32", "int64", "bool"]


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(st.sampled_from(WIRE_DTYPES), hnp.array_shapes(min_dims=0, max_dims=4, max_side=5)))
def test_any_wire_array_round_trips_bit_exact_through_an_observation(arr):
    msg = pb.StepResponse(reward=[1.5])
    codec.fill_observation(msg.observation, {"x": arr}, {"x": 12.5})
    msg = pb.StepResponse.FromString(msg.SerializeToString())
    got, stamps = codec.observation_from_message(msg.observation)
    assert got["x"].dtype == arr.dtype and got["x"].shape == arr.shape
    assert got["x"].tobytes() == arr.tobytes()
    assert float(stamps["x"]) == 12.5 and list(msg.reward) == [1.5]


@settings(max_examples=60, deadline=None)
@given(hnp.arrays(st.sampled_from(WIRE_DTYPES), hnp.array_shapes(min_dims=0, max_dims=3, max_side=12)), st.booleans())
def test_a_step_request_parses_to_the_action_contiguous_or_not(arr, session):
    for action in (arr, arr.T):  # a transposed view is not C-contiguous
        data = codec.step_request(action, session)
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
    out = pb.SessionResponse()
    out.step.terminated.append(True)
    codec.fill_observation(out.step.observation, {"cam0": img, "cam1": img[::-1]}, {"cam0": 3.0, "cam1": 4.0})
    codec.fill_observation(out.step.final_observation, {"cam0": img})
    msg = pb.SessionResponse.FromString(out.SerializeToString())
    assert msg.WhichOneof("kind") == "step" and list(msg.step.terminated) == [True]
    observations = codec.observations_of(msg.step)
    (obs, stamps), (final, _) = observations["observation"], observations["final_observation"]
    np.testing.assert_array_equal(obs["cam0"], img)
    np.testing.assert_array_equal(obs["cam1"], img[::-1])  # non-contiguous input is made contiguous
    np.testing.assert_array_equal(final["cam0"], img)
    assert stamps == {"cam0": 3.0, "cam1": 4.0}


def test_a_reset_response_has_no_final_observation():
    msg = pb.ResetResponse()
    codec.fill_observation(msg.observation, {"q": np.arange(7, dtype=np.float32)}, {"q": np.array([1.0, 2.0])})
    observations = codec.observations_of(pb.ResetResponse.FromString(msg.SerializeToString()))
    tensors, stamps = observations["observation"]
    assert list(observations) == ["observation"]
    np.testing.assert_array_equal(tensors["q"], np.arange(7, dtype=np.float32))
    np.testing.assert_array_equal(stamps["q"], [1.0, 2.0])  # a batch's capture times stay an array


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


def test_camera_info_points_at_the_image_observation_of_each_camera():
    spec = EnvSpec(
        observations={
            "q": TensorSpec("q", "float32", (7,)),
            "image_wrist": TensorSpec("image_wrist", "uint8", (8, 8, 3)),
        },
        action=TensorSpec("action", "float32", (3,)),
        control_hz=10.0,
        cameras=("wrist", "front"),
    )
    wrist, front = codec.env_spec_to_message(spec).cameras
    assert (wrist.name, wrist.observation, list(wrist.shape)) == ("wrist", "image_wrist", [8, 8, 3])
    assert (front.name, front.observation, list(front.shape)) == ("front", "", [])
