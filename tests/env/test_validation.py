"""Every field of a Step is checked against the spec; a bad one gets INVALID_ARGUMENT naming it,
on the unary call and in-band on the Session stream, and the server keeps serving."""

from __future__ import annotations

import grpc
import numpy as np
import pytest

from rlhw.env import codec
from rlhw.env.client import InvalidAction, RemoteEnv
from rlhw.env.fake_env import FakeEnv
from rlhw.env.v1 import env_pb2 as pb
from rlhw.env.v1 import env_pb2_grpc

GOOD = np.zeros(7, np.float32)


def _tensor(arr, dtype=None, shape=None, data=None):
    t = codec.to_tensor(arr)
    if dtype is not None:
        t.dtype = dtype
    if shape is not None:
        del t.shape[:]
        t.shape.extend(shape)
    if data is not None:
        t.data = data
    return t


def _with(i, value):
    a = GOOD.copy()
    a[i] = value
    return a


BAD_ACTIONS = [
    # (tensor, field named in the error, words in the message)
    (_tensor(np.zeros(7, np.float64)), "action.dtype", "expected float32, got float64"),
    (_tensor(np.zeros(7, np.int32)), "action.dtype", "expected float32, got int32"),
    (_tensor(GOOD, dtype=99), "action.dtype", "unknown dtype 99"),
    (_tensor(np.zeros(6, np.float32)), "action.shape", "expected [7], got [6]"),
    (_tensor(np.zeros((1, 7), np.float32)), "action.shape", "expected [7], got [1, 7]"),
    (_tensor(GOOD, data=b"\0" * 27), "action.data", "has 27 bytes"),
    (_tensor(_with(3, np.nan)), "action[3]", "is nan; actions must be finite"),
    (_tensor(_with(0, np.inf)), "action[0]", "is inf; actions must be finite"),
    (_tensor(_with(6, -1.5)), "action[6]", "below the spec's low bound -1"),
    (_tensor(_with(2, 1.0001)), "action[2]", "above the spec's high bound 1"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("tensor,field,words", BAD_ACTIONS, ids=[b[1] + ":" + b[2][:18] for b in BAD_ACTIONS])
def test_unary_step_rejects_a_bad_action_naming_the_field(serve, tensor, field, words):
    env = FakeEnv()
    server = serve(env)
    with grpc.insecure_channel(server.address) as channel:
        stub = env_pb2_grpc.EnvStub(channel)
        stub.Reset(pb.ResetRequest(), timeout=5)
        with pytest.raises(grpc.RpcError) as err:
            stub.Step(pb.StepRequest(action=tensor), timeout=5)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details().startswith(field + ":") and words in err.value.details()
        stub.Step(pb.StepRequest(action=codec.to_tensor(GOOD)), timeout=5)  # still serving
    assert env.steps == 1  # the bad action never reached the env


@pytest.mark.timeout(60)
def test_session_stream_reports_bad_actions_in_band_and_stays_open(serve):
    env = FakeEnv()
    server = serve(env)
    requests = [pb.SessionRequest(reset=pb.ResetRequest())]
    requests += [pb.SessionRequest(step=pb.StepRequest(action=t)) for t, _, _ in BAD_ACTIONS]
    requests += [
        pb.SessionRequest(),
        pb.SessionRequest(step=pb.StepRequest()),
        pb.SessionRequest(step=pb.StepRequest(action=codec.to_tensor(GOOD))),
    ]
    with grpc.insecure_channel(server.address) as channel:
        responses = list(env_pb2_grpc.EnvStub(channel).Session(iter(requests), timeout=20))
    kinds = [r.WhichOneof("kind") for r in responses]
    assert kinds == ["reset"] + ["error"] * (len(BAD_ACTIONS) + 2) + ["step"]
    for (_, field, words), r in zip(BAD_ACTIONS, responses[1:]):
        assert r.error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
        assert r.error.field == field and words in r.error.message
    assert responses[-3].error.field == "kind" and "set reset or step" in responses[-3].error.message
    assert responses[-2].error.field == "action" and "missing" in responses[-2].error.message
    assert env.steps == 1


@pytest.mark.timeout(60)
def test_remote_env_raises_invalid_action_with_the_field(serve, clients):
    server = serve(FakeEnv())
    env = clients(RemoteEnv(server.address))
    env.reset()
    with pytest.raises(InvalidAction) as err:
        env.step(_with(4, 3.0))
    assert err.value.field == "action[4]" and "above the spec's high bound" in str(err.value)
    obs, reward, terminated, truncated, info = env.step(GOOD)  # the session survives
    assert obs["joint_pos"].shape == (7,) and not terminated


@pytest.mark.timeout(60)
def test_batched_actions_need_the_batch_dimension_and_errors_name_the_instance(serve):
    server = serve(FakeEnv(num_envs=3))
    with grpc.insecure_channel(server.address) as channel:
        stub = env_pb2_grpc.EnvStub(channel)
        stub.Reset(pb.ResetRequest(), timeout=5)
        with pytest.raises(grpc.RpcError) as err:
            stub.Step(pb.StepRequest(action=codec.to_tensor(GOOD)), timeout=5)
        assert "expected [3, 7], got [7]" in err.value.details()
        bad = np.zeros((3, 7), np.float32)
        bad[2, 5] = -7
        with pytest.raises(grpc.RpcError) as err:
            stub.Step(pb.StepRequest(action=codec.to_tensor(bad)), timeout=5)
        assert err.value.details().startswith("action[2, 5]:")


@pytest.mark.timeout(60)
def test_a_negative_reset_seed_is_rejected_naming_the_field(serve):
    env = FakeEnv()
    server = serve(env)
    with grpc.insecure_channel(server.address) as channel:
        with pytest.raises(grpc.RpcError) as err:
            env_pb2_grpc.EnvStub(channel).Reset(pb.ResetRequest(seed=-5), timeout=5)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.details().startswith("seed: must be between 0 and 2**63-1, got -5")
    assert env.resets == 0


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
