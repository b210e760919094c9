"""`rlhw serve-env` as a process: prints where it listens, serves, and on SIGTERM/SIGINT stops the arm first."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from rlhw.env.client import RemoteEnv

REPO = Path(__file__).resolve().parents[2]


def _start(*args, env_vars=None, via_main=False):
    """serve-env as a child process (through the `rlhw` dispatcher when ``via_main``)."""
    env = dict(os.environ, **(env_vars or {}))
    env.pop("RLHW_ENV_TOKEN", None)
    command = ["rlhw.cli.main", "serve-env"] if via_main else ["rlhw.cli.serve_env"]
    return subprocess.Popen(
        [sys.executable, "-m", *command, *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _address(proc, timeout_s=90.0) -> str:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            line = proc.stdout.readline()
            if line.startswith("listening on "):
                return line.split()[2]
        if proc.poll() is not None:
            raise AssertionError(f"serve-env exited with {proc.returncode}: {proc.stderr.read()}")
    proc.kill()
    raise AssertionError("serve-env did not print its address in time")


def _finish(proc, sig, timeout_s=30.0):
    proc.send_signal(sig)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise
    return proc.returncode, out, err


@pytest.mark.timeout(180)
def test_serve_env_sim_reach_on_port_0_serves_mujoco_and_sigterm_stops_the_arm_first():
    proc = _start("configs/sim_reach.yaml", "--port", "0", via_main=True)  # `rlhw serve-env ...`
    try:
        address = _address(proc)
        host, port = address.rsplit(":", 1)
        assert host == "127.0.0.1" and int(port) > 0
        env = RemoteEnv(address)
        assert env.env_spec.robot.startswith("mujoco")
        obs, _ = env.reset(seed=0)
        _, reward, *_ = env.step(np.zeros(env.action_space.shape, np.float32))
        assert np.isfinite(reward) and set(obs) == set(env.env_spec.observations)
        env.close()
    finally:
        code, out, err = _finish(proc, signal.SIGTERM)
    assert code == 0, err
    lines = out.splitlines()
    assert lines[-2:] == ["shutting down: stopping the arm first", "stopped"]
    assert "stopping the arm (server shutting down)" in err
    assert "Traceback" not in err


@pytest.mark.timeout(120)
def test_sigint_mid_session_stops_the_arm_and_exits_cleanly():
    proc = _start(
        "configs/sim_reach.yaml",
        "--port",
        "0",
        "--env",
        "rlhw.env.fake_env:make_fake_env",
        env_vars={"RLHW_FAKE_ENV": "cameras=1"},
    )
    try:
        env = RemoteEnv(_address(proc), reconnect_s=0.5)
        env.reset()
        env.step(np.zeros(7, np.float32))  # the client still holds control when the signal comes
    finally:
        code, out, err = _finish(proc, signal.SIGINT)
    assert code == 0
    assert err.index("stopping the arm (server shutting down)") > 0 and "Traceback" not in err
    env.close()


@pytest.mark.timeout(120)
def test_binding_all_interfaces_without_a_token_exits_2_with_a_one_line_reason():
    proc = _start("configs/sim_reach.yaml", "--host", "0.0.0.0", "--port", "0")
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 2
    assert "config error: server.host:" in err and "needs a token" in err and "Traceback" not in err
    assert "listening" not in out


@pytest.mark.timeout(120)
def test_a_bad_server_override_is_a_config_error_naming_the_field():
    proc = _start("configs/sim_reach.yaml", "server.watchdog_s=-1")
    out, err = proc.communicate(timeout=90)
    assert proc.returncode == 2 and "server.watchdog_s" in err and "Traceback" not in err


@pytest.mark.timeout(120)
def test_a_busy_port_is_refused_before_any_env_is_built():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        # The fake env factory would print nothing; a refusal must come before it is even called.
        proc = _start("configs/sim_reach.yaml", "--port", str(port), "--env", "no.such.module:factory")
        out, err = proc.communicate(timeout=90)
    assert proc.returncode == 2
    assert f"config error: server.port: cannot listen on 127.0.0.1:{port}" in err and "another env server" in err
