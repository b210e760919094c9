"""What the server guarantees when clients misbehave: a stop always gets through, the lease cannot
be claimed by naming it, refusals come back promptly, with the right code and bounded text."""

from __future__ import annotations

import queue

import grpc
import numpy as np
import pytest

from rlhw.env.auth import SESSION_METADATA_KEY, session_of
from rlhw.env.client import ControlConflictError, RemoteEnv
from rlhw.env.fake_env import FakeEnv
from rlhw.env.v1 import env_pb2 as pb
from rlhw.env.v1 import env_pb2_grpc
from tests.waiting import wait_until

GOOD = np.zeros(7, np.float32)
SECRET = "s" * 40


class _HeldStream:
    """A raw Session stream whose requests come from a queue: it stays open until `close`."""

    def __init__(self, channel, metadata=(), first: bytes | None = None):
        self.requests: queue.SimpleQueue = queue.SimpleQueue()
        if first is not None:
            self.requests.put(first)
        self.call = channel.stream_stream("/rlhw.env.v1.Env/Session")(iter(self.requests.get, None), metadata=metadata)

    def close(self):
        self.requests.put(None)
        self.call.cancel()


def _reset_request() -> bytes:
    return pb.SessionRequest(reset=pb.ResetRequest()).SerializeToString()


@pytest.mark.timeout(60)
def test_stop_and_status_answer_while_refused_controllers_hold_their_streams_open(serve, clients):
    env = FakeEnv()
    server = serve(env, watchdog_s=30)
    controller = clients(RemoteEnv(server.address))
    controller.reset()
    channel = grpc.insecure_channel(server.address)
    held = [_HeldStream(channel, [(SESSION_METADATA_KEY, f"{i:02d}" + "x" * 40)], _reset_request()) for i in range(7)]
    try:
        for stream in held:  # each would-be controller is refused and its stream closed by the server
            with pytest.raises(grpc.RpcError) as err:
                for _ in stream.call:
                    pass
            assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert "arm is controlled by session key:" in err.value.details()
        stub = env_pb2_grpc.EnvStub(channel)
        reply = stub.Stop(pb.StopRequest(), timeout=1.0)
        assert reply.stopped and env.stops >= 1
        assert stub.GetStatus(pb.GetStatusRequest(), timeout=1.0).controller == controller.session_fingerprint
        controller.step(GOOD)  # the controller is unaffected
    finally:
        for stream in held:
            stream.close()
        channel.close()


@pytest.mark.timeout(60)
def test_stop_is_served_even_when_idle_streams_fill_the_handler_pool(serve):
    env = FakeEnv()
    server = serve(env, max_workers=4, max_streams=2, max_streams_per_peer=2)
    channels = [grpc.insecure_channel(server.address) for _ in range(3)]
    held = [_HeldStream(ch) for ch in channels for _ in range(2)]  # no request: nobody controls
    try:
        refused = [s for s in held if wait_until(lambda s=s: s.call.done(), 0.5)]
        assert len(refused) == 4  # two admitted in all; the rest refused at once
        for s in refused:
            assert s.call.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "server.max_stream" in s.call.details()
        stub = env_pb2_grpc.EnvStub(channels[0])
        # A pool held by idle streams would keep these waiting for ever: their deadlines are the bound.
        assert stub.Stop(pb.StopRequest(), timeout=5.0).stopped
        assert stub.GetStatus(pb.GetStatusRequest(), timeout=5.0).stopped
    finally:
        for s in held:
            s.close()
        for ch in channels:
            ch.close()


@pytest.mark.timeout(60)
def test_streams_others_hold_open_cannot_lock_out_a_controller(serve, clients):
    server = serve(FakeEnv(), max_workers=4, max_streams=2, max_streams_per_peer=2)
    channel = grpc.insecure_channel(server.address)
    held = [_HeldStream(channel) for _ in range(2)]  # idle: the server-wide cap is reached
    try:
        assert wait_until(lambda: server.native.gate.open_streams == 2, 2.0)
        owner = clients(RemoteEnv(server.address, use_session=False))
        owner.reset()  # a unary Reset takes control ...
        owner.use_session = True
        owner.step(GOOD)  # ... and the controller's stream is admitted beyond the cap
        assert server.native.gate.open_streams == 3
    finally:
        for s in held:
            s.close()
        channel.close()


@pytest.mark.timeout(60)
def test_one_connection_may_hold_only_a_few_session_streams(serve):
    server = serve(FakeEnv(), max_streams_per_peer=2)
    channel = grpc.insecure_channel(server.address)
    held = [_HeldStream(channel) for _ in range(3)]
    try:
        assert wait_until(lambda: any(s.call.done() for s in held), 2.0)
        refused = [s for s in held if s.call.done()]
        assert len(refused) == 1  # whichever arrived third
        assert refused[0].call.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "server.max_streams_per_peer" in refused[0].call.details()
    finally:
        for s in held:
            s.close()
        channel.close()


@pytest.mark.timeout(60)
def test_naming_the_controller_shown_by_get_status_does_not_take_over_the_lease(serve, clients):
    server = serve(FakeEnv(), watchdog_s=30)
    owner = clients(RemoteEnv(server.address, session_secret=SECRET))
    owner.reset()
    shown = owner.status().controller
    assert shown == owner.session_fingerprint and SECRET not in shown and shown.startswith("key:")
    for claim in (shown, shown + "0" * 40, f"peer:{shown}" + "0" * 40):
        channel = grpc.insecure_channel(server.address)
        try:
            with pytest.raises(grpc.RpcError) as err:
                channel.unary_unary("/rlhw.env.v1.Env/Step")(
                    pb.StepRequest(
                        action=pb.Tensor(dtype=pb.FLOAT32, shape=[7], data=GOOD.tobytes())
                    ).SerializeToString(),
                    timeout=2.0,
                    metadata=[(SESSION_METADATA_KEY, claim)],
                )
            assert err.value.code() in (grpc.StatusCode.FAILED_PRECONDITION, grpc.StatusCode.INVALID_ARGUMENT)
        finally:
            channel.close()
    assert server.env_host.control.controller == shown
    owner.step(GOOD)


def test_metadata_sessions_and_peer_sessions_live_in_different_namespaces():
    peer = "ipv4:127.0.0.1:5000"
    assert session_of((), peer) == f"peer:{peer}"
    spoof = f"peer:{peer}".ljust(40, "x")
    assert session_of([(SESSION_METADATA_KEY, spoof)], peer).startswith("key:")
    assert session_of([(SESSION_METADATA_KEY, SECRET)], peer) == session_of(
        [(SESSION_METADATA_KEY, SECRET)], "ipv6:[::1]:9"
    )


@pytest.mark.timeout(60)
def test_a_session_secret_too_short_to_be_unguessable_is_refused_naming_the_metadata(serve):
    server = serve(FakeEnv())
    channel = grpc.insecure_channel(server.address)
    try:
        with pytest.raises(grpc.RpcError) as err:
            channel.unary_unary("/rlhw.env.v1.Env/Reset")(b"", timeout=2.0, metadata=[(SESSION_METADATA_KEY, "alice")])
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "metadata.rlhw-session: is 5 characters" in err.value.details()
        assert "secrets.token_urlsafe(32)" in err.value.details()
        assert server.env_host.control.controller == ""
    finally:
        channel.close()


@pytest.mark.timeout(60)
def test_a_session_whose_only_request_fails_releases_control_when_the_stream_ends(serve):
    env = FakeEnv()
    server = serve(env, watchdog_s=30)
    channel = grpc.insecure_channel(server.address)
    bad = pb.SessionRequest(step=pb.StepRequest(action=pb.Tensor(dtype=pb.FLOAT64, shape=[7], data=bytes(56))))
    stream = _HeldStream(channel, [(SESSION_METADATA_KEY, SECRET)], bad.SerializeToString())
    try:
        reply = pb.SessionResponse.FromString(next(stream.call))
        assert reply.error.field == "action.dtype"
        stops = env.stops
        stream.close()
        assert wait_until(lambda: server.env_host.control.controller == "", 1.0)  # not the 30 s watchdog
        assert env.stops > stops  # releasing control stops the arm
    finally:
        channel.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("method", ["Reset", "Step", "Stop", "GetStatus", "GetSpec"])
def test_unparsable_request_bytes_are_invalid_argument_on_every_unary_call(serve, method):
    server = serve(FakeEnv())
    channel = grpc.insecure_channel(server.address)
    try:
        with pytest.raises(grpc.RpcError) as err:
            channel.unary_unary(f"/rlhw.env.v1.Env/{method}")(b"\xff\xff\xff", timeout=2.0)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value.details()
        assert err.value.details().startswith("request: is not a valid rlhw.env.v1.")
    finally:
        channel.close()


@pytest.mark.timeout(60)
def test_an_absurd_shape_gets_a_short_error_not_resource_exhausted(serve):
    server = serve(FakeEnv())
    huge = pb.StepRequest(action=pb.Tensor(dtype=pb.FLOAT32, shape=[1] * 100_000, data=GOOD.tobytes()))
    channel = grpc.insecure_channel(server.address)
    try:
        with pytest.raises(grpc.RpcError) as err:
            channel.unary_unary("/rlhw.env.v1.Env/Step")(huge.SerializeToString(), timeout=5.0)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        details = err.value.details()
        assert details.startswith("action.shape: expected [7], got [1, 1,") and len(details) <= 1000
        assert "(100000 dimensions)" in details
        stream = _HeldStream(channel, first=pb.SessionRequest(step=huge).SerializeToString())
        reply = pb.SessionResponse.FromString(next(stream.call))
        assert reply.error.field == "action.shape" and len(reply.error.message) <= 1000
        stream.close()
    finally:
        channel.close()


@pytest.mark.timeout(60)
def test_a_refused_controller_on_the_python_client_sees_a_control_conflict_every_time(serve, clients):
    server = serve(FakeEnv())
    owner = clients(RemoteEnv(server.address))
    owner.reset()
    other = clients(RemoteEnv(server.address))
    for call in (other.reset, lambda: other.step(GOOD), lambda: other.step(GOOD)):
        with pytest.raises(ControlConflictError):
            call()


def test_a_stream_cap_that_leaves_no_threads_for_calls_is_refused_naming_both_settings():
    from pydantic import ValidationError

    from rlhw.config.server import ServerConfig

    with pytest.raises(ValidationError, match=r"max_streams \(8\) must leave at least 2 of max_workers \(8\)"):
        ServerConfig(max_workers=8, max_streams=8)
