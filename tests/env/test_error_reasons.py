"""Fault kinds and error reasons are typed contracts: one-to-one with the proto, sent with every
error, and the client chooses its exception from them and the status code, never from the text."""

from __future__ import annotations

import pickle
from dataclasses import replace

import grpc
import numpy as np
import pytest
from dm_env_rpc.v1 import dm_env_rpc_pb2 as dm
from dm_env_rpc.v1 import dm_env_rpc_pb2_grpc
from google.rpc import error_details_pb2

from rlhw.env import codec, control
from rlhw.env.auth import SESSION_METADATA_KEY, new_session_secret
from rlhw.env.client import (
    ControlConflictError,
    EnvServiceError,
    EpisodeEnded,
    InvalidAction,
    RemoteEnv,
    SafetyLocked,
)
from rlhw.env.errors import error_from_message
from rlhw.env.fake_env import FakeEnv
from rlhw.env.v1 import env_pb2 as pb
from rlhw.env.v1 import env_pb2_grpc
from rlhw.errors import ErrorReason, FaultKind, RobotFault, SafetyViolation
from rlhw.robot.step import Step

GOOD = np.zeros(7, np.float32)


def test_every_fault_kind_and_error_reason_has_exactly_one_proto_twin_by_name():
    assert {f"FAULT_KIND_{k.name}" for k in FaultKind} | {"FAULT_KIND_UNSPECIFIED"} == set(pb.FaultKind.keys())
    assert {f"ERROR_REASON_{r.name}" for r in ErrorReason} | {"ERROR_REASON_UNSPECIFIED"} == set(pb.ErrorReason.keys())
    assert all(codec.fault_from_wire(codec.fault_to_wire(k)) is k for k in FaultKind)
    assert codec.fault_from_wire(pb.FAULT_KIND_UNSPECIFIED) is None
    assert all(codec.reason_from_wire(codec.REASON_TO_WIRE[r]) is r for r in ErrorReason)
    assert all(codec.reason_from_wire(codec.reason_to_metadata(r)[1]) is r for r in ErrorReason)


def test_fault_kinds_read_and_compare_as_their_lower_case_names():
    assert FaultKind.CAMERA_STALL == "camera_stall" and f"{FaultKind.REFLEX}" == "reflex"
    assert str(RobotFault(FaultKind.HANG, "no answer")) == "hang: no answer"


def test_robot_faults_and_safety_violations_survive_pickling_with_their_types():
    fault = pickle.loads(pickle.dumps(RobotFault(FaultKind.NETWORK, "link lost")))
    assert fault.kind is FaultKind.NETWORK and str(fault) == "network: link lost"
    refused = pickle.loads(pickle.dumps(SafetyViolation("locked", ErrorReason.SAFETY_LOCKED)))
    assert refused.reason is ErrorReason.SAFETY_LOCKED and str(refused) == "locked"


def test_a_robot_fault_takes_only_a_fault_kind():
    with pytest.raises(TypeError, match="FaultKind"):
        RobotFault("reflex", "a plain string is no longer a kind")


def test_an_unknown_fault_value_from_a_newer_server_is_not_taken_for_no_fault():
    with pytest.raises(ValueError, match="FaultKind value 99"):
        codec.fault_from_wire(99)


def _error(address, code: grpc.StatusCode, message: str, field: str = "", reason: ErrorReason | None = None):
    """The client's exception for an in-band Session ``Error`` with these fields."""
    wire = pb.Error(
        code=code.value[0], message=message, field=field, reason=codec.REASON_TO_WIRE[reason] if reason else 0
    )
    return error_from_message(address, wire)


def test_the_client_picks_the_class_from_code_and_reason_not_from_the_message():
    fp = grpc.StatusCode.FAILED_PRECONDITION
    assert (
        type(_error("a", fp, "safety: looks like a lock", reason=ErrorReason.CONTROLLED_BY_OTHER))
        is ControlConflictError
    )
    assert type(_error("a", fp, "arm is controlled by session x", reason=ErrorReason.SAFETY_LOCKED)) is SafetyLocked
    assert type(_error("a", fp, "anything", reason=ErrorReason.EPISODE_ENDED)) is EpisodeEnded
    assert type(_error("a", fp, "arm is controlled by session x")) is EnvServiceError  # no reason: code only
    bad = _error("a", grpc.StatusCode.INVALID_ARGUMENT, "action.data: NaN", "action.data", ErrorReason.INVALID_REQUEST)
    assert isinstance(bad, InvalidAction) and bad.field == "action.data" and bad.reason is ErrorReason.INVALID_REQUEST


@pytest.mark.timeout(60)
@pytest.mark.parametrize("use_session", [True, False])
def test_a_reworded_control_conflict_is_still_a_control_conflict(serve, clients, monkeypatch, use_session):
    reworded = lambda self, s, now: control.ControlConflict("someone else has the arm right now")  # noqa: E731
    monkeypatch.setattr(control.ControlLease, "_conflict", reworded)
    server = serve(FakeEnv())
    clients(RemoteEnv(server.address)).reset()
    other = clients(RemoteEnv(server.address, use_session=use_session))
    with pytest.raises(ControlConflictError, match="someone else has the arm right now") as err:
        other.reset()
    assert err.value.reason is ErrorReason.CONTROLLED_BY_OTHER and err.value.code == "FAILED_PRECONDITION"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("use_session", [True, False])
def test_a_step_without_an_episode_is_episode_ended_and_a_lock_is_safety_locked(serve, clients, use_session):
    env = FakeEnv()
    remote = clients(RemoteEnv(serve(env).address, use_session=use_session))
    remote.reset()
    env.fail_next = SafetyViolation("no active episode", ErrorReason.EPISODE_ENDED)
    with pytest.raises(EpisodeEnded) as err:
        remote.step(GOOD)
    assert err.value.reason is ErrorReason.EPISODE_ENDED
    env.fail_next = SafetyViolation("locked after 3 faults", ErrorReason.SAFETY_LOCKED)
    with pytest.raises(SafetyLocked) as err:
        remote.step(GOOD)
    assert type(err.value) is SafetyLocked and err.value.reason is ErrorReason.SAFETY_LOCKED


@pytest.mark.timeout(60)
def test_a_unary_error_carries_its_reason_and_field_in_the_trailing_metadata(serve, clients):
    server = serve(FakeEnv())
    secret = new_session_secret()
    with grpc.insecure_channel(server.address) as channel:
        stub = env_pb2_grpc.EnvStub(channel)
        bad = pb.StepRequest(action=codec.to_tensor(np.full(7, np.nan, np.float32)))
        with pytest.raises(grpc.RpcError) as err:
            stub.Step(bad, timeout=10, metadata=[(SESSION_METADATA_KEY, secret)])
    trailing = dict(err.value.trailing_metadata())
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert trailing[codec.REASON_METADATA_KEY] == "ERROR_REASON_INVALID_REQUEST"
    assert trailing[codec.FIELD_METADATA_KEY].startswith("action")
    remote = clients(RemoteEnv(server.address, use_session=False, session_secret=secret))
    remote.reset()
    with pytest.raises(InvalidAction) as err:
        remote.step(np.full(7, np.nan, np.float32))
    assert err.value.field == trailing[codec.FIELD_METADATA_KEY] and err.value.reason is ErrorReason.INVALID_REQUEST


@pytest.mark.timeout(60)
def test_an_in_band_session_error_carries_its_reason(serve):
    server = serve(FakeEnv())
    with grpc.insecure_channel(server.address) as channel:
        responses = list(env_pb2_grpc.EnvStub(channel).Session(iter([pb.SessionRequest()]), timeout=10))
    assert responses[0].error.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert responses[0].error.reason == pb.ERROR_REASON_INVALID_REQUEST and responses[0].error.field == "kind"


@pytest.mark.timeout(60)
def test_dm_env_rpc_errors_carry_the_reason_as_an_error_info_detail(serve):
    server = serve(FakeEnv())
    with grpc.insecure_channel(server.address) as channel:
        stub = dm_env_rpc_pb2_grpc.EnvironmentStub(channel)
        request = dm.EnvironmentRequest(join_world=dm.JoinWorldRequest(world_name="nowhere"))
        response = next(iter(stub.Process(iter([request]), timeout=10)))
    info = error_details_pb2.ErrorInfo()
    assert response.error.code == grpc.StatusCode.NOT_FOUND.value[0] and response.error.details[0].Unpack(info)
    assert (info.reason, info.domain) == ("ERROR_REASON_UNKNOWN_WORLD", "rlhw.env.v1")


class _ContactEveryStep(FakeEnv):
    """A FakeEnv whose every step ends in a contact fault, as RobotEnv reports one."""

    def step(self, action) -> Step:
        return replace(
            super().step(action),
            truncated=np.array([True]),
            fault=(FaultKind.CONTACT,),
            fault_message=("over the bound",),
        )


@pytest.mark.timeout(60)
@pytest.mark.parametrize("use_session", [True, False])
def test_a_step_fault_reaches_the_client_as_its_fault_kind(serve, clients, use_session):
    remote = clients(RemoteEnv(serve(_ContactEveryStep()).address, use_session=use_session))
    remote.reset()
    *_, truncated, info = remote.step(GOOD)
    assert truncated and type(info["fault"]) is FaultKind and info["fault"] is FaultKind.CONTACT
    assert info["fault_message"] == "over the bound"
    assert any(f.endswith("contact: over the bound") for f in remote.status().faults)
