"""Checks of the env server in front of one arm: it starts, reports healthy, serves its spec, and
answers a reset and a few steps, with their latency; then it shuts down cleanly.

By default the check starts ``rlhw serve-env CONFIG --robot R --port 0`` on loopback as a child
process of the node that owns the arm (the way the RL pipeline runs it, learning its address from the
same ``--address-fd`` pipe through `rlhw.env.server_child`) and stops it afterwards;
``--env-server HOST:PORT`` checks a running server instead. A reset moves the arm home and a step
moves it: against a real arm both need ``--allow-motion``; against a simulator they always run
(the table says so). Steps send a zero action: hold still.
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

import numpy as np

from rlhw.config.root import Config
from rlhw.env import server_child
from rlhw.smoke.bounded import Outcome, TargetRun, call_bounded, failed, passed, skipped
from rlhw.smoke.options import SmokeOptions
from rlhw.smoke.targets import EnvServerTarget

STEPS = 5


class ServerProcess:
    """`rlhw serve-env` as a child process: the address it reports on its pipe, and a bounded stop."""

    def __init__(self, config_path: str, overrides: tuple[str, ...], robot_rank: int):
        self._log = tempfile.TemporaryFile(mode="w+")
        cmd = [
            sys.executable,
            "-m",
            "rlhw.cli.serve_env",
            os.path.abspath(config_path),
            *overrides,
            "--robot",
            str(robot_rank),
            "--host",
            "127.0.0.1",
            "--port",
            "0",
        ]
        self.proc, self._address_fd = server_child.spawn(
            cmd, stdin=subprocess.DEVNULL, stdout=self._log, stderr=self._log, text=True
        )
        self.address: str | None = None

    def wait_listening(self, timeout_s: float) -> str:
        """The address serve-env reports on its pipe once it listens, within ``timeout_s``."""
        try:
            self.address = server_child.await_address(self.proc, self._address_fd, timeout_s)
        except server_child.ServerExited as e:
            raise RuntimeError(
                f"rlhw serve-env exited with code {e.code} before listening: {self.log_tail()}"
            ) from None
        except server_child.AddressTimeout:
            raise TimeoutError(f"rlhw serve-env did not listen within {timeout_s:g} s: {self.log_tail()}") from None
        except server_child.AddressNotReported as e:
            raise RuntimeError(f"rlhw serve-env {e}: {self.log_tail()}") from None
        finally:
            os.close(self._address_fd)  # read once: the child reports once, then closes its end
        return self.address

    def log_tail(self, lines: int = 3) -> str:
        try:
            self._log.seek(0)
            text = [ln for ln in self._log.read().strip().splitlines() if ln.strip()]
        except (OSError, ValueError):
            return ""
        return " | ".join(text[-lines:]) or "(no output)"

    def stop(self, timeout_s: float) -> tuple[int | None, float]:
        """SIGTERM (serve-env stops the arm first), SIGKILL after ``timeout_s``; (exit code, seconds)."""
        t = time.perf_counter()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
                return None, time.perf_counter() - t
        return self.proc.returncode, time.perf_counter() - t

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass


def check_env_server(run: TargetRun, target: EnvServerTarget, options: SmokeOptions, config: Config) -> None:
    timeout = options.timeout_s
    robot = target.robot
    simulated = robot is not None and robot.simulated
    server: ServerProcess | None = None
    address = target.address

    if address is None:
        if not options.config_path:
            run.note(
                "start",
                skipped("no config file to start `rlhw serve-env` from; pass --env-server HOST:PORT"),
                required=False,
            )
            return

        def start():
            nonlocal server
            t = time.perf_counter()
            server = ServerProcess(options.config_path, options.overrides, robot.rank if robot else 0)
            addr = server.wait_listening(options.server_start_s)
            dt = time.perf_counter() - t
            return passed(
                f"{dt:.1f} s",
                f"`rlhw serve-env --robot {robot.rank if robot else 0}` listening on {addr}",
                address=addr,
                start_s=round(dt, 3),
                data=addr,
            )

        out = run.run("start", start, timeout_s=options.server_start_s + 5)
        address = out.data
    try:
        _talk(run, address, options, simulated, config)
    finally:
        if server is not None:

            def stop():
                code, dt = server.stop(timeout_s=max(5.0, timeout))
                if code == 0:
                    return passed(f"{dt:.2f} s", "SIGTERM: stopped the arm, drained calls, exited 0")
                if code is None:
                    return failed(f"did not exit within {max(5.0, timeout):g} s of SIGTERM; killed", "killed")
                return failed(f"exited with code {code} after SIGTERM: {server.log_tail()}", f"exit {code}")

            run.run("shutdown", stop, needs_ok=False, timeout_s=max(5.0, timeout) + 10)
            server.kill()


def _talk(run: TargetRun, address: str | None, options: SmokeOptions, simulated: bool, config: Config) -> None:
    timeout = options.timeout_s
    token = config.server.resolve_token()
    run.run("health", lambda: _health_check(address, timeout))
    holder: dict[str, Any] = {}
    run.run("spec", lambda: _spec_check(holder, address, token, timeout))
    env = holder.get("env")
    try:
        if simulated or options.motion_allowed:
            why_ok = "simulated arm: moving it is harmless" if simulated else "--allow-motion given"
            run.run("reset", lambda: _reset_check(env, why_ok), timeout_s=max(timeout, 30.0) + 5)
            run.run("step", lambda: _step_check(env, why_ok), timeout_s=STEPS * timeout + 5)
        else:
            reason = "moves the real arm: " + options.motion_refusal()
            run.note("reset", skipped(reason))
            run.note("step", skipped(reason))
    finally:
        if env is not None:
            try:
                call_bounded(env.close, 5.0, "remote-env-close")
            except Exception:
                pass


def _health_check(address: str | None, timeout: float) -> Outcome:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        t = time.perf_counter()
        reply = stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=timeout)
        dt = time.perf_counter() - t
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    if status != "SERVING":
        return failed(f"health status {status}", status)
    return passed(f"SERVING, {dt * 1e3:.1f} ms", f"grpc.health.v1 at {address}", health_ms=round(dt * 1e3, 3))


def _spec_check(holder: dict[str, Any], address: str | None, token, timeout: float) -> Outcome:
    """Connect a `RemoteEnv` (kept in ``holder["env"]`` for the reset and step checks) and read its spec."""
    from rlhw.env.client import RemoteEnv

    t = time.perf_counter()
    env = RemoteEnv(
        address, token, timeout_s=timeout, reset_timeout_s=max(timeout, 30.0), reconnect_s=min(timeout, 5.0)
    )
    holder["env"] = env
    dt = time.perf_counter() - t
    s = env.env_spec
    obs = ", ".join(f"{k}{tuple(v.shape)}" for k, v in s.observations.items())
    return passed(
        f"action {tuple(s.action.shape)}, {len(s.observations)} obs, {s.control_hz:g} Hz",
        f"robot {s.robot}: {obs}; {dt * 1e3:.1f} ms",
        robot=s.robot,
        control_hz=s.control_hz,
        observations=sorted(s.observations),
        spec_ms=round(dt * 1e3, 3),
    )


def _reset_check(env, why_ok: str) -> Outcome:
    t = time.perf_counter()
    env.reset(seed=0)
    dt = time.perf_counter() - t
    return passed(f"{dt:.2f} s", f"reset round trip (moves the arm home; {why_ok})", reset_s=round(dt, 4))


def _step_check(env, why_ok: str) -> Outcome:
    """``STEPS`` zero-action steps (hold still), resetting after a truncation; a fault fails the check."""
    lat = []
    action = np.zeros(env.action_space.shape, dtype=env.action_space.dtype)
    for _ in range(STEPS):
        t = time.perf_counter()
        _, _, _, truncated, info = env.step(action)
        lat.append(time.perf_counter() - t)
        if info.get("fault"):
            return failed(f"step truncated by fault {info['fault']}: {info.get('fault_message', '')}", info["fault"])
        if truncated:
            env.reset(seed=0)
    p50 = statistics.median(lat) * 1e3
    period_ms = 1e3 / env.env_spec.control_hz
    return passed(
        f"p50 {p50:.1f} ms, max {max(lat) * 1e3:.1f} ms",
        f"{STEPS} zero-action steps (control period {period_ms:.0f} ms; {why_ok})",
        p50_ms=round(p50, 3),
        max_ms=round(max(lat) * 1e3, 3),
        steps=STEPS,
    )
