"""Fixtures: real gRPC env servers on loopback ephemeral ports, in this process."""

from __future__ import annotations

import contextlib

import pytest

from rlhw.config.server import ServerConfig
from rlhw.env.fake_env import FakeEnv
from rlhw.env.server import EnvServer


@contextlib.contextmanager
def running_server(env=None, **config):
    """An EnvServer for ``env`` (a FakeEnv by default) on 127.0.0.1:<free port>, stopped on exit."""
    env = env if env is not None else FakeEnv()
    config.setdefault("port", 0)
    server = EnvServer(env, ServerConfig(**config)).start()
    try:
        yield server
    finally:
        server.stop(grace_s=0.5)


@pytest.fixture
def serve():
    """``serve(env=None, **server_config)`` -> started EnvServer; all stopped after the test."""
    stack = contextlib.ExitStack()

    def start(env=None, **config):
        return stack.enter_context(running_server(env, **config))

    with stack:
        yield start


@pytest.fixture
def clients():
    """``clients(RemoteEnv(...))`` registers a client to close after the test."""
    made = []

    def keep(client):
        made.append(client)
        return client

    yield keep
    for c in made:
        c.close()
