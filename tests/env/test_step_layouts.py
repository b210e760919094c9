"""The per-step fast paths give exactly what the general code gives, and fall back to it whenever a
message does not have the cached layout: canonical requests read from bytes (server), responses
written from a cached layout (server) and read by layout (client)."""

from __future__ import annotations

import grpc
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from rlhw.env import codec, step_layout, wire
from rlhw.env.client import RemoteEnv
from rlhw.env.fake_env import FakeEnv
from rlhw.env.v1 import env_pb2 as pb
from rlhw.env.validate import ActionChecker, InvalidRequest
from rlhw.errors import FaultKind, RobotFault
from rlhw.robot.spec import TensorSpec

BOX = TensorSpec("action", "float32", (7,), -1.0, 1.0)
UNEVEN = TensorSpec("action", "float32", (3,), [-1.0, -2.0, 0.0], [1.0, 2.0, 0.08])

#: The executed action a `StepReader` step carries (the client's action: the message reports none).
NOT_REPORTED = np.zeros((1, 7), np.float32)


# ---------------------------------------------------------------------------------------------
# requests


@settings(max_examples=80, deadline=None)
@given(hnp.arrays(np.float32, (7,), elements=st.floats(-1, 1, width=32)), st.booleans())
def test_a_canonical_request_is_read_from_its_bytes_as_the_protobuf_path_reads_it(action, session):
    checker = ActionChecker(BOX)
    data = wire.encode_step_request(action, session)
    fast = checker.from_request(data, session)
    parsed = pb.SessionRequest.FromString(data).step if session else pb.StepRequest.FromString(data)
    slow = checker.check(parsed.action)
    assert fast.dtype == slow.dtype and fast.shape == slow.shape and fast.tobytes() == slow.tobytes()


@settings(max_examples=60, deadline=None)
@given(st.integers(0, 6), st.sampled_from([np.nan, np.inf, -np.inf, 1.5, -1.0001, 3e38]), st.booleans())
def test_the_bytes_path_rejects_any_bad_value_with_the_same_error_as_the_protobuf_path(i, value, session):
    checker = ActionChecker(BOX)
    action = np.zeros(7, np.float32)
    action[i] = value
    with pytest.raises(InvalidRequest) as fast:
        checker.from_request(wire.encode_step_request(action, session), session)
    with pytest.raises(InvalidRequest) as slow:
        checker.check(codec.to_tensor(action))
    assert fast.value.field == slow.value.field == f"action[{i}]" and str(fast.value) == str(slow.value)


def test_per_element_bounds_are_checked_on_the_bytes_path_too():
    checker = ActionChecker(UNEVEN)
    ok = np.array([0.5, -1.5, 0.08], np.float32)
    assert checker.from_request(wire.encode_step_request(ok, False), False).tolist() == ok.tolist()
    with pytest.raises(InvalidRequest, match=r"action\[2\]: = 0.09 is above the spec's high bound 0.08"):
        checker.from_request(wire.encode_step_request(np.array([0, 0, 0.09], np.float32), False), False)


def test_requests_laid_out_otherwise_are_left_to_the_protobuf_path():
    checker = ActionChecker(BOX)
    good = wire.encode_step_request(np.zeros(7, np.float32), False)
    assert checker.from_request(good, False) is not None
    assert checker.from_request(good + b"\x10\x01", False) is None  # an extra (unknown) field
    assert checker.from_request(good, True) is None  # a StepRequest is not a SessionRequest
    assert checker.from_request(wire.encode_step_request(np.zeros(6, np.float32), False), False) is None
    assert checker.from_request(wire.encode_step_request(np.zeros(7, np.float64), False), False) is None
    reordered = pb.Tensor(data=np.zeros(7, np.float32).tobytes(), shape=[7], dtype=pb.FLOAT32)
    assert checker.from_request(b"\x0a" + bytes([len(reordered.SerializeToString())]) +
                                reordered.SerializeToString()[::-1], False) is None


# ---------------------------------------------------------------------------------------------
# responses: writer


OBS_ARRAYS = hnp.arrays(st.sampled_from(["float32", "float64", "uint8", "int64", "bool"]),
                        hnp.array_shapes(min_dims=0, max_dims=3, max_side=12))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.dictionaries(st.sampled_from(["q", "cam0", "ee", "img"]), OBS_ARRAYS, min_size=1, max_size=3),
                min_size=1, max_size=4),
       st.sampled_from([None, 2]), st.floats(-1e6, 1e6, width=32), st.booleans(), st.booleans())
def test_the_writer_gives_the_general_encoders_bytes_step_after_step(steps, wrap, reward, terminated, truncated):
    writer = step_layout.StepWriter()
    timing = {"env": 1e-4, "env.observe": 2e-5, "validate": 3e-6, "server": 4e-4}
    for obs in steps + steps:  # layouts change and come back
        stamps = {name: 1700000000.25 for name in obs}
        fast = writer.write(reward, terminated, truncated, False, timing, obs, stamps, wrap)
        assert fast == step_layout.StepWriter._general(reward, terminated, truncated, False, timing, obs, stamps, wrap)


def test_the_writer_copies_non_contiguous_and_big_endian_arrays_like_the_general_encoder():
    writer = step_layout.StepWriter()
    img = np.random.default_rng(0).integers(0, 255, (48, 64, 3), dtype=np.uint8)
    for obs in ({"cam": img}, {"cam": img[::-1]}, {"cam": img.astype(">u2")}, {"cam": img}, {"q": [1.0, 2.0]}):
        fast = writer.write(0.5, False, False, True, {"env": 1e-3}, obs, {"cam": 5.0}, 2)
        assert fast == step_layout.StepWriter._general(0.5, False, False, True, {"env": 1e-3}, obs, {"cam": 5.0}, 2)
    msg = pb.SessionResponse.FromString(fast).step
    assert list(msg.observation.tensors["q"].shape) == [2] and list(msg.success) == [True]


# ---------------------------------------------------------------------------------------------
# responses: reader


def _message(obs, reward=0.25, terminated=False, truncated=False, timing=None, stamps=None, wrap=2, fault=(None, "")):
    timing = {"env": 1e-3, "server": 2e-3} if timing is None else timing
    head = wire.encode_step_head([reward], [terminated], [truncated], [False], [fault[0]], [fault[1]], timing)
    return wire.encode_with_observations(head, [(1, obs, stamps or {})], wrap)


def _general(data, session):
    if session:
        _, head, observations = wire.read_session_response(data)
    else:
        head, observations = wire.read_response(data, pb.StepResponse)
    return head, observations


def _learned(data, session):
    reader = step_layout.StepReader()
    reader.learn(data, _general(data, session)[0], session)
    return reader


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.sampled_from(["q", "cam0", "ee"]), OBS_ARRAYS, min_size=1, max_size=3),
       st.booleans(), st.floats(-1e6, 1e6, width=32), st.booleans(), st.booleans())
def test_the_reader_gives_what_the_general_reader_gives(obs, session, reward, terminated, truncated):
    wrap = 2 if session else None
    first = _message(obs, stamps={n: 1.5 for n in obs}, wrap=wrap)
    reader = _learned(first, session)
    data = _message(obs, reward, terminated, truncated, {"env": 5e-3, "server": 6e-3}, {n: 2.5 for n in obs}, wrap)
    got = reader.read(data, NOT_REPORTED)
    head, observations = _general(data, session)
    tensors, stamps = observations["observation"]
    assert got is not None
    assert got.executed is NOT_REPORTED and got.intervened.tolist() == [False]
    g_obs, g_reward, g_term, g_trunc, info = got.gym()  # one instance, as the Gymnasium edge gives it
    g_stamps, g_timing, g_success = info["timestamps"], info["timing"], info["success"]
    fault, fault_message = got.fault[0], got.fault_message[0]
    assert set(g_obs) == set(tensors)
    for name, arr in tensors.items():
        assert g_obs[name].dtype == arr.dtype and g_obs[name].shape == arr.shape
        assert g_obs[name].tobytes() == arr.tobytes() and not g_obs[name].flags.writeable
    assert g_stamps == {k: float(v) for k, v in stamps.items()}
    assert (g_reward, g_term, g_trunc, g_success) == (head.reward[0], head.terminated[0], head.truncated[0],
                                                      head.success[0])
    assert g_timing == dict(head.timing) and fault is None and fault_message == ""


def test_the_reader_refuses_messages_that_differ_outside_the_value_slots():
    obs = {"q": np.zeros(7, np.float32)}
    reader = _learned(_message(obs), True)
    assert reader.read(_message(obs), NOT_REPORTED) is not None
    assert reader.read(_message(obs, wrap=None), NOT_REPORTED) is None  # not inside SessionResponse.step
    assert reader.read(_message(obs, timing={"env": 1e-3, "serve": 1e-3}), NOT_REPORTED) is None  # another key
    assert reader.read(_message({"q": np.zeros(7, np.int32)}), NOT_REPORTED) is None  # same size, other dtype
    assert reader.read(_message({"q": np.zeros((1, 7), np.float32)}), NOT_REPORTED) is None  # other shape
    assert reader.read(_message(obs, fault=(FaultKind.REFLEX, "stopped")), NOT_REPORTED) is None
    flag = bytearray(_message(obs))
    at = flag.index(b"\x1a\x01\x00") + 2  # terminated = 2 is still "true" to protobuf: not read by layout
    flag[at] = 2
    assert reader.read(bytes(flag), NOT_REPORTED) is None
    assert reader.read(_message(obs)[:-1], NOT_REPORTED) is None
    error = pb.SessionResponse(error=pb.Error(code=3, message="x")).SerializeToString()
    assert reader.read(error, NOT_REPORTED) is None


def test_batched_and_final_observation_replies_have_no_layout():
    head = wire.encode_step_head([0.0, 1.0], [False, True], [False, False], [False, False], [None, None], ["", ""], {})
    data = wire.encode_with_observations(head, [(1, {"q": np.zeros((2, 7), np.float32)}, {})], 2)
    assert _learned(data, True)._layout is None


# ---------------------------------------------------------------------------------------------
# end to end


@pytest.mark.timeout(60)
@pytest.mark.parametrize("use_session", [True, False], ids=["session", "unary"])
def test_remote_env_steps_match_the_general_decoder_across_episode_ends_and_faults(serve, clients, use_session):
    env = FakeEnv(cameras=2, image_hw=(24, 32), episode_length=3)
    server = serve(env)
    fast = clients(RemoteEnv(server.address, use_session=use_session, session_secret="a" * 40,
                                 measurements_in_info=True))
    fast.reset()
    action = np.full(7, 0.5, np.float32)
    steps = []
    for i in range(7):
        if i == 5:
            env.fail_next = RobotFault(FaultKind.REFLEX, "joint 3 torque")
            with pytest.raises(Exception, match="reflex|joint 3"):
                fast.step(action)
            fast.reset()
            continue
        steps.append(fast.step(action))
        if steps[-1][3]:
            fast.reset()
    slow = clients(RemoteEnv(server.address, use_session=use_session, session_secret="a" * 40,
                                 measurements_in_info=True))
    slow._reader = None  # the general decoder only
    reference = slow.step(action)
    latest = fast.step(action)
    for got in (latest, reference):
        obs, reward, terminated, truncated, info = got
        assert set(obs) == {"joint_pos", "ee_pose", "gripper", "cam0", "cam1"}
        assert reward == pytest.approx(-3.5) and not terminated
        assert set(info) == {"timestamps", "timing", "success", "fault", "fault_message", "intervened",
                             "executed_action"}
        assert info["intervened"] is False and info["executed_action"].tolist() == action.tolist()
    np.testing.assert_array_equal(latest[0]["cam1"], reference[0]["cam1"])
    assert latest[4]["fault"] is None is reference[4]["fault"] and latest[4]["fault_message"] is None
    assert [s[3] for s in steps[:3]] == [False, False, True]  # truncated at episode_length, read by layout


@pytest.mark.timeout(60)
def test_bytes_that_are_not_a_request_get_invalid_argument_not_a_crash(serve):
    server = serve(FakeEnv())
    garbage = b"\x0a\xff\xff\xff\xff\x0f"  # a length running past the end
    with grpc.insecure_channel(server.address) as channel:
        with pytest.raises(grpc.RpcError) as err:
            channel.unary_unary("/rlhw.env.v1.Env/Step")(garbage, timeout=5)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details().startswith("request: is not a valid rlhw.env.v1.StepRequest")
        responses = list(channel.stream_stream("/rlhw.env.v1.Env/Session")(iter([garbage]), timeout=5))
    error = pb.SessionResponse.FromString(responses[0]).error
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0] and error.field == "request"
