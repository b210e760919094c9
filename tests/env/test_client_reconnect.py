"""How RemoteEnv's repeatable calls (GetSpec, GetStatus, Reset, Stop) reach a server that is not up yet.

gRPC's retry policy (the channel's service config) retries them on UNAVAILABLE; beyond its few
attempts, the client waits up to ``reconnect_s`` for the channel to connect, then calls once more.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import pytest

from rlhw.config.server import ServerConfig
from rlhw.env.client import EnvServerUnavailable, RemoteEnv
from rlhw.env.fake_env import FakeEnv
from rlhw.env.grpc_channel import REPEATABLE_METHODS, SERVICE_CONFIG
from rlhw.env.server import EnvServer


def test_only_calls_that_are_safe_to_repeat_are_in_the_retry_policy():
    config = json.loads(SERVICE_CONFIG)["methodConfig"][0]
    assert {n["method"] for n in config["name"]} == set(REPEATABLE_METHODS) == {"GetSpec", "GetStatus", "Reset", "Stop"}
    assert config["retryPolicy"]["retryableStatusCodes"] == ["UNAVAILABLE"]


@pytest.mark.timeout(60)
def test_a_client_started_before_its_server_reaches_it_when_the_server_comes_up(clients):
    # A bare TCP listener holds the port first: the client's connection attempt arriving there
    # proves that it was refused before the server existed (no sleeping on a guess).
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(20)
    port = listener.getsockname()[1]
    made: dict = {}

    def connect():
        try:
            made["env"] = RemoteEnv(f"127.0.0.1:{port}", reconnect_s=30.0, timeout_s=2.0)
        except BaseException as e:  # re-raised below, in the test's thread
            made["error"] = e

    client = threading.Thread(target=connect)
    client.start()
    attempt, _ = listener.accept()
    attempt.close()
    listener.close()
    server = EnvServer(FakeEnv(), ServerConfig(port=port)).start()
    try:
        client.join(40)
        assert "error" not in made, made.get("error")
        env = clients(made["env"])
        assert env.env_spec.action.shape == (7,)
        assert env.status().steps == 0
    finally:
        server.stop(grace_s=0.2)


@pytest.mark.timeout(60)
def test_a_server_that_never_comes_up_is_given_up_on_after_reconnect_s():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: every connection is refused
        t0 = time.monotonic()
        with pytest.raises(EnvServerUnavailable, match=r"unreachable for 0\.5 s .*rlhw serve-env"):
            RemoteEnv(f"127.0.0.1:{port}", reconnect_s=0.5, timeout_s=1.0)
        waited = time.monotonic() - t0
    assert waited >= 0.5  # it did wait for the server
    assert waited < 15.0  # and gave up: reconnect_s plus two call deadlines, with room for a loaded machine
