"""The server's plumbing: health, reflection, shutdown order, restarts, deadlines, unix sockets."""

from __future__ import annotations

import socket
import time

import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from rlhw.config.server import ServerConfig
from rlhw.env.client import EnvServerUnavailable, EnvTimeout, RemoteEnv
from rlhw.env.fake_env import FakeEnv
from rlhw.env.server import EnvServer
from rlhw.errors import ConfigError

GOOD = np.zeros(7, np.float32)


@pytest.mark.timeout(60)
def test_health_reports_serving_for_every_service_and_not_serving_after_stop(serve):
    server = serve(FakeEnv())
    with grpc.insecure_channel(server.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        for name in ("", "rlhw.env.v1.Env", "dm_env_rpc.v1.Environment"):
            reply = stub.Check(health_pb2.HealthCheckRequest(service=name), timeout=5)
            assert reply.status == health_pb2.HealthCheckResponse.SERVING
        server.health.set("", health_pb2.HealthCheckResponse.NOT_SERVING)
        assert (
            stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status == health_pb2.HealthCheckResponse.NOT_SERVING
        )


@pytest.mark.timeout(60)
def test_reflection_lists_both_protocols_and_serves_the_proto(serve):
    server = serve(FakeEnv())
    with grpc.insecure_channel(server.address) as channel:
        stub = reflection_pb2_grpc.ServerReflectionStub(channel)
        replies = list(
            stub.ServerReflectionInfo(
                iter(
                    [
                        reflection_pb2.ServerReflectionRequest(list_services=""),
                        reflection_pb2.ServerReflectionRequest(file_containing_symbol="rlhw.env.v1.Env"),
                    ]
                ),
                timeout=5,
            )
        )
    names = {s.name for s in replies[0].list_services_response.service}
    assert {"rlhw.env.v1.Env", "dm_env_rpc.v1.Environment", "grpc.health.v1.Health"} <= names
    assert replies[1].file_descriptor_response.file_descriptor_proto  # a client can build stubs from it


@pytest.mark.timeout(60)
def test_shutdown_stops_the_arm_before_closing_and_refuses_new_motion(clients):
    env = FakeEnv()
    server = EnvServer(env, ServerConfig(port=0)).start()
    remote = RemoteEnv(server.address, use_session=False, reconnect_s=0.3)
    remote.reset()
    remote.step(GOOD)
    server.native.shutting_down = True  # the first thing stop() does
    with pytest.raises(EnvServerUnavailable, match="shutting down"):
        remote.step(GOOD)
    server.stop(grace_s=0.5)
    events = env.events
    assert events[-1] == "close" and "stop" in events
    assert events.index("stop", len(events) - 3) < events.index("close")
    assert env.steps == 1
    remote.close()


@pytest.mark.timeout(60)
def test_client_reconnects_with_backoff_after_a_server_restart(clients):
    env = FakeEnv()
    server = EnvServer(env, ServerConfig(port=0)).start()
    port = server.port
    remote = clients(RemoteEnv(server.address, reconnect_s=15.0))
    remote.reset()
    remote.step(GOOD)
    server.stop(grace_s=0.2)
    with pytest.raises(EnvServerUnavailable):
        remote.step(GOOD)  # a step is never retried behind the caller's back
    restarted = EnvServer(FakeEnv(), ServerConfig(port=port)).start()
    try:
        obs, _ = remote.reset()  # retried until the new server answers
        assert obs["joint_pos"].shape == (7,)
        remote.step(GOOD)
        assert restarted.env_host.steps == 1
    finally:
        restarted.stop(grace_s=0.2)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("use_session", [True, False], ids=["session", "unary"])
def test_a_step_slower_than_the_deadline_raises_env_timeout(serve, clients, use_session):
    env = FakeEnv(step_delay_s=1.5)
    server = serve(env)
    remote = clients(RemoteEnv(server.address, timeout_s=0.3, use_session=use_session))
    remote.reset()
    with pytest.raises(EnvTimeout):  # at the 0.3 s deadline: waiting out the 1.5 s step would have answered
        remote.step(GOOD)


@pytest.mark.timeout(60)
def test_the_server_also_listens_on_a_unix_socket(serve, clients, tmp_path):
    path = tmp_path / "env.sock"
    server = serve(FakeEnv(), unix_socket=str(path))
    assert server.unix_path == str(path)
    remote = clients(RemoteEnv(f"unix:{path}"))
    remote.reset()
    remote.step(GOOD)


@pytest.mark.timeout(60)
def test_a_port_in_use_is_a_config_error_naming_the_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        with pytest.raises(ConfigError) as err:
            EnvServer(FakeEnv(), ServerConfig(port=port)).start()
    assert err.value.path == "server.port" and str(port) in str(err.value)


@pytest.mark.timeout(60)
def test_an_env_that_raises_gets_internal_and_the_server_keeps_serving(serve, clients):
    env = FakeEnv()
    server = serve(env)
    remote = clients(RemoteEnv(server.address))
    remote.reset()
    env.fail_next = RuntimeError("driver bug")
    from rlhw.env.client import EnvServiceError

    with pytest.raises(EnvServiceError, match="env raised RuntimeError: driver bug") as err:
        remote.step(GOOD)
    assert err.value.code == "INTERNAL"
    remote.step(GOOD)


@pytest.mark.timeout(60)
def test_responses_carry_capture_timestamps_and_a_timing_breakdown(serve, clients):
    server = serve(FakeEnv(cameras=2))
    remote = clients(RemoteEnv(server.address))
    before = time.time()
    remote.reset()
    obs, _, _, _, info = remote.step(GOOD)
    measured = remote.last_measurements  # by default apart from info, which holds the transition's facts
    assert "timestamps" not in info and "timing" not in info
    assert set(measured["timestamps"]) == set(obs)
    assert all(before <= t <= time.time() for t in measured["timestamps"].values())
    assert {"validate", "env", "server"} <= set(measured["timing"])
    assert measured["timing"]["server"] >= measured["timing"]["env"]


@pytest.mark.timeout(60)
def test_multi_camera_640x480_frames_fit_the_message_limits(serve, clients):
    server = serve(FakeEnv(cameras=4, image_hw=(480, 640)))
    remote = clients(RemoteEnv(server.address))
    obs, _ = remote.reset()
    assert [obs[f"cam{i}"].shape for i in range(4)] == [(480, 640, 3)] * 4


@pytest.mark.timeout(60)
def test_a_safety_lock_in_the_env_is_reported_as_such_not_as_a_control_conflict(serve, clients):
    from rlhw.env.client import SafetyLocked
    from rlhw.errors import SafetyViolation

    env = FakeEnv()
    server = serve(env)
    remote = clients(RemoteEnv(server.address))
    remote.reset()
    env.fail_next = SafetyViolation("env locked after 3 reflex faults; call recover()")
    with pytest.raises(SafetyLocked, match="safety: env locked after 3 reflex faults"):
        remote.step(GOOD)


@pytest.mark.timeout(60)
def test_probe_reports_health_spec_and_status_without_taking_control(serve):
    from rlhw.env import probe_env_server
    from rlhw.env.client import EnvServerUnavailable, Unauthenticated

    env = FakeEnv(cameras=1)
    server = serve(env, token="tk")
    report = probe_env_server(server.address, token="tk")
    assert report["healthy"] and report["health_status"] == "SERVING"
    assert report["spec"].cameras == ("cam0",) and report["controller"] == "" and report["rtt_ms"] > 0
    assert report["env_status"]["steps"] == 0 and env.events == []  # nothing moved, nothing stopped
    with pytest.raises(Unauthenticated):
        probe_env_server(server.address)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        free = s.getsockname()[1]
    with pytest.raises(EnvServerUnavailable):
        probe_env_server(f"127.0.0.1:{free}", timeout_s=1.0)


def test_get_status_says_which_observations_went_as_declared_tensors_and_how_often(serve, clients):
    server = serve(FakeEnv(cameras=1, image_hw=(6, 5), episode_length=100))
    env = clients(RemoteEnv(server.address, use_session=True))
    env.reset()
    for _ in range(4):
        env.step(np.zeros(7, np.float32))
    status = env.status()
    assert list(status.declared_observations) == ["joint_pos", "ee_pose", "gripper", "cam0"]
    assert (status.declared_written, status.declared_filled) == (16, 0)
