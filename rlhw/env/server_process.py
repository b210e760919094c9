"""Start `rlhw serve-env` as a child process of an env worker or `rlhw eval` and wait until it serves.

The child reports where it listens on a dedicated pipe (``--address-fd``: one JSON line
``{"address": "HOST:PORT"}``, read by `rlhw.env.server_child`, as the smoke test does), never in its log
output, which goes to the log file unread. The wait is bounded (``train.env_start_timeout_s``); a child that
exits, or closes the pipe, before reporting fails it at once with its exit code and last output.

What the child has to say to the person at the arm's operator device (a verdict's question) comes on a second
pipe (``--operator-fd``) and goes to this process's stderr as well as the log: an env worker's stderr is the
`rlhw train` console (Ray forwards it), `rlhw eval`'s is its own.

Why a child process: franky can block forever when the robot link dies and a driver can crash; the env
worker (and the whole run) must survive that and be able to kill and restart the server. The child gets
the node's interpreter (the worker's own ``sys.executable``, set by the node's env_configs) and the
worker's environment, and dies with its parent (PR_SET_PDEATHSIG), so a killed worker never leaves a
server holding an arm.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from rlhw.config.root import Config
from rlhw.env import server_child
from rlhw.errors import RlhwError


class EnvServerError(RlhwError):
    """The env server child did not start, or died."""


def _die_with_parent() -> None:  # runs in the child between fork and exec
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


def config_to_yaml(config: Config, path: Path) -> Path:
    """The resolved config as YAML for the child (the token travels in the environment, not on disk)."""
    data = config.model_dump(mode="json")
    data.get("server", {}).pop("token", None)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


class EnvServerProcess:
    """One `rlhw serve-env` child: ``start()`` returns its address; ``stop()`` is SIGTERM then SIGKILL."""

    def __init__(self, config: Config, robot_rank: int, log_path: Path | None = None, start_timeout_s: float = 90.0):
        self.config = config
        self.robot_rank = robot_rank
        self.start_timeout_s = start_timeout_s
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        self.address: str | None = None
        self.loop_isolation: dict | None = None  # what took effect in the child (its report says)
        self._tmp = tempfile.TemporaryDirectory(prefix="rlhw-env-")
        self._tail: list[str] = []
        self._pump_thread: threading.Thread | None = None
        self._echo_thread: threading.Thread | None = None

    def simulated(self) -> bool:
        from rlhw.robot.factory import plan_env

        return plan_env(self.config, self.robot_rank).simulated

    def start(self) -> str:
        config = self.config
        if self.simulated():
            # A simulated arm does not move between steps (its time only advances when stepped), so a
            # stall of the training processes is harmless there: relax the server's silence watchdog to
            # the step timeout. A real arm keeps server.watchdog_s.
            watchdog = max(config.server.watchdog_s, config.train.step_timeout_s)
            config = config.model_copy(update={"server": config.server.model_copy(update={"watchdog_s": watchdog})})
        cfg_path = config_to_yaml(config, Path(self._tmp.name) / "config.yaml")
        cmd = [
            sys.executable,
            "-m",
            "rlhw.cli.serve_env",
            str(cfg_path),
            "--port",
            "0",
            "--robot",
            str(self.robot_rank),
            "--no-dm-env-rpc",
            # the server is the robot-side half of the loop: it gets the node's loop isolation too
            "--isolate-node",
            os.environ.get("RLHW_NODE_RANK", "0"),
        ]
        env = dict(os.environ)
        token = self.config.server.token
        if token is not None:
            env[self.config.server.token_env] = token.get_secret_value()
        env.setdefault("PYTHONUNBUFFERED", "1")
        return self.launch(cmd, env)

    def launch(self, cmd: list[str], env: dict[str, str]) -> str:
        """Start ``cmd`` (a command that takes ``--address-fd FD`` and ``--operator-fd FD``, as serve-env does) and
        return the address it reports, within ``start_timeout_s``; its output goes to the log file, its lines for
        the operator to this process's stderr as well."""
        operator_read, operator_write = os.pipe()
        try:
            self.proc, read_fd = server_child.spawn(
                [*cmd, "--operator-fd", str(operator_write)],
                pass_fds=(operator_write,),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
                env=env,
                preexec_fn=_die_with_parent,
                start_new_session=True,
            )
        except BaseException:
            os.close(operator_read)
            raise
        finally:
            os.close(operator_write)  # the child holds the only write end: the echo ends when the child does
        self._pump_thread = threading.Thread(target=self._pump, daemon=True, name="env-server-log")
        self._pump_thread.start()
        self._echo_thread = threading.Thread(
            target=self._echo_operator_lines, args=(operator_read,), daemon=True, name="env-operator"
        )
        self._echo_thread.start()
        try:
            self.address = self._await_address(read_fd)
        except BaseException:
            self.stop()  # never leave a child that did not report properly holding an arm
            raise
        finally:
            os.close(read_fd)
        return self.address

    def _await_address(self, fd: int) -> str:
        """The address in the child's report; `EnvServerError` when it dies, closes the pipe or stays silent."""
        what = f"env server for robot {self.robot_rank}"
        try:
            report = server_child.await_report(self.proc, fd, self.start_timeout_s)
            self.loop_isolation = report.loop_isolation
            return report.address
        except server_child.ServerExited as e:
            if self._pump_thread is not None:
                self._pump_thread.join(timeout=2.0)  # its last lines are the likely reason: read them to the end
            raise EnvServerError(f"{what} exited with code {e.code} before serving: {self.tail()}") from None
        except server_child.AddressTimeout as e:
            self.stop()  # the log then holds its last words
            raise EnvServerError(f"{what} {e} (train.env_start_timeout_s); last output: {self.tail()}") from None
        except server_child.AddressPipeClosed as e:
            self.stop()
            raise EnvServerError(f"{what} {e}; last output: {self.tail()}") from None
        except server_child.BadAddressReport as e:
            raise EnvServerError(f"{what} {e}") from None

    def _pump(self) -> None:
        """The child's output into the log file; its last lines kept for an error's message (`tail`)."""
        self._log_lines(self.proc.stdout, self._keep_tail)

    def _keep_tail(self, line: str) -> None:
        self._tail = (self._tail + [line.rstrip()])[-20:]

    def _echo_operator_lines(self, fd: int) -> None:
        """The child's lines for the person at the operator's device, on this process's stderr and in the log."""
        with os.fdopen(fd, encoding="utf-8", errors="replace") as lines:
            said = (f"env {self.robot_rank} operator: {line.rstrip()}\n" for line in lines)
            self._log_lines(said, _to_stderr)

    def _log_lines(self, lines, each: Callable[[str], None]) -> None:
        """Each of ``lines`` (until the child closes them) to ``each`` and appended to the log file: the output
        pump and the operator's echo each hold a handle of their own, and a line is one flushed append."""
        log = open(self.log_path, "a") if self.log_path else None
        try:
            for line in lines:
                each(line)
                if log:
                    log.write(line)
                    log.flush()
        finally:
            if log:
                log.close()

    def tail(self) -> str:
        return " | ".join(self._tail[-6:]) or "(no output)"

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout_s: float = 10.0) -> None:
        """SIGTERM (the server stops the arm first), then SIGKILL if it does not exit in time."""
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None
        for thread in (self._pump_thread, self._echo_thread):
            if thread is not None:
                thread.join(timeout=2.0)  # the log file and the console then hold the child's last words


def _to_stderr(line: str) -> None:
    sys.stderr.write(line)
    sys.stderr.flush()


def open_remote_env(
    config: Config, robot_rank: int, log_path: Path, session_id: str, make_client: Callable[[Callable], Any]
):
    """A `rlhw serve-env` child for arm ``robot_rank`` and a `RemoteEnv` session to it, with the run's step
    timeouts: how an env worker (and `rlhw eval`) reaches a real arm. Returns (server, env); a server whose
    instance count differs from ``env.num_envs`` is stopped and refused. The child is started on the calling
    thread (it dies with that thread); ``make_client`` runs the client's construction (an env worker and `rlhw
    eval` run it under the robot loop's scheduling, rlhw/rl/env_transport.py)."""
    from rlhw.env.client import RemoteEnv

    cfg = config.train
    log_path.parent.mkdir(parents=True, exist_ok=True)
    server = EnvServerProcess(config, robot_rank, log_path, cfg.env_start_timeout_s)
    address = server.start()
    try:
        token = config.server.resolve_token()
        env = make_client(
            lambda: RemoteEnv(
                address,
                token=token,
                timeout_s=cfg.step_timeout_s,
                reset_timeout_s=max(cfg.step_timeout_s, config.server.reset_deadline_s),
                reconnect_s=5.0,
                session_id=session_id,
                measurements_in_info=True,
            )  # the loop health reads info["timing"] per step
        )
        if env.num_envs != config.env.num_envs:
            env.close()
            raise EnvServerError(
                f"env server at {address} serves {env.num_envs} env instance(s), but env.num_envs "
                f"is {config.env.num_envs}: the server must be started from the same config"
            )
    except BaseException:
        server.stop()
        raise
    return server, env
