"""`EnvServer`: one gRPC server in front of one env, speaking rlhw.env.v1 and dm_env_rpc on one port,
with health, reflection, token auth, TLS and a shutdown that stops the arm before anything else.
"""

from __future__ import annotations

import logging
import os
import stat
import sys
import threading
from concurrent import futures

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from rlhw.config.server import ServerConfig
from rlhw.env.auth import TokenAuthInterceptor
from rlhw.env.host import EnvHost
from rlhw.env.limits import StreamGate
from rlhw.env.service import SERVICE_NAME, EnvService
from rlhw.errors import ConfigError

log = logging.getLogger("rlhw.env")

GIL_SWITCH_INTERVAL_S = 0.001


def _bind_address(ip: str, port: int) -> str:
    """``ip:port`` for gRPC (an IPv6 address in brackets); ``ip`` is the config's ``server.host``."""
    if ":" in ip and not ip.startswith("["):
        ip = f"[{ip}]"
    return f"{ip}:{port}"


def check_exposure(config: ServerConfig, token: str | None) -> None:
    """Refuse to listen beyond loopback without a token: an open port would let anyone move the arm."""
    if not config.loopback and not token:
        raise ConfigError(
            "server.host",
            f"binding {config.host!r} exposes the arm beyond this machine, which needs a token: "
            f"export {config.token_env}=<secret> (server.token_env) or set server.token, and give clients the "
            f"same token (they send 'authorization: Bearer <token>'); or bind 127.0.0.1",
        )


class EnvServer:
    """Serve ``env`` (a RobotEnv, or anything with its contract) as configured by ``config``.

    ``start()`` binds and returns self; ``address`` is then ``ip:port`` with the real port (port
    0 picks a free one). ``stop()`` stops the arm, stops serving, and closes the env. ``env_host``
    is the `EnvHost` (the env behind the single-controller rule) that both services share.
    """

    def __init__(self, env, config: ServerConfig | None = None, *, dm_env_rpc: bool = True, close_env: bool = True):
        self.config = config = config or ServerConfig()
        self.token = config.resolve_token()
        check_exposure(config, self.token)
        self.env_host = EnvHost(env, watchdog_s=config.watchdog_s)
        gate = StreamGate(config.max_streams, config.max_streams_per_peer)
        self.native = EnvService(
            self.env_host, config.watchdog_s, config.step_deadline_s, config.reset_deadline_s, gate
        )
        self.close_env = close_env
        interceptors = [TokenAuthInterceptor(self.token)] if self.token else []
        max_bytes = config.max_message_bytes
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=config.max_workers, thread_name_prefix="rlhw-env"),
            interceptors=interceptors,
            options=[
                ("grpc.max_receive_message_length", max_bytes),
                ("grpc.max_send_message_length", max_bytes),
                ("grpc.so_reuseport", 0),  # a second server on a busy port must fail, not share it
                # Per connection: calls beyond this wait at the client, holding nothing here.
                ("grpc.max_concurrent_streams", config.max_calls_per_connection),
            ],
            # No server-wide cap: grpc would refuse every new call past it, a Stop included.
            # Session streams are capped by the StreamGate, calls per connection by the option above.
            maximum_concurrent_rpcs=None,
        )
        handlers = [self.native.handler()]
        names = [SERVICE_NAME]
        self.dm = None
        if dm_env_rpc:
            from rlhw.env.dm_bridge import SERVICE_NAME as DM_NAME
            from rlhw.env.dm_bridge import DmEnvRpcService

            self.dm = DmEnvRpcService(self.env_host, self.native)
            handlers.append(self.dm.handler())
            names.append(DM_NAME)
        self.server.add_generic_rpc_handlers(tuple(handlers))
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        reflection.enable_server_reflection((*names, health.SERVICE_NAME, reflection.SERVICE_NAME), self.server)
        self._service_names = names
        self.port: int | None = None
        self.unix_path: str | None = None
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()

    @property
    def address(self) -> str:
        """``ip:port`` clients dial (the bound port, after start)."""
        return _bind_address(self.config.host, self.port if self.port is not None else self.config.port)

    def start(self) -> EnvServer:
        cfg = self.config
        # Every handler thread of this process takes turns at the GIL; a thread that waits gets it
        # after at most about one switch interval per runnable thread. CPython's default (5 ms)
        # let a busy pool keep a Stop waiting for tens of milliseconds; 1 ms bounds that wait.
        if sys.getswitchinterval() > GIL_SWITCH_INTERVAL_S:
            sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
        addr = _bind_address(cfg.host, cfg.port)
        try:
            if cfg.tls_enabled:
                creds = grpc.ssl_server_credentials([(cfg.tls_key.read_bytes(), cfg.tls_cert.read_bytes())])
                port = self.server.add_secure_port(addr, creds)
            else:
                port = self.server.add_insecure_port(addr)
        except OSError as e:
            raise ConfigError("server.tls_cert", f"cannot read TLS files: {e}") from None
        except RuntimeError as e:
            raise ConfigError(
                "server.port", f"cannot listen on {addr}: {e}; pick another port (0 = any free)"
            ) from None
        if not port:
            raise ConfigError("server.port", f"cannot listen on {addr} (in use?); pick another port (0 = any free)")
        self.port = port
        if cfg.unix_socket:
            self.unix_path = self._bind_unix(cfg.unix_socket)
        self.server.start()
        for name in ("", *self._service_names):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info("env server listening on %s%s", self.address, f" and unix:{self.unix_path}" if self.unix_path else "")
        return self

    def _bind_unix(self, path: str) -> str:
        if os.path.exists(path):
            if not stat.S_ISSOCK(os.stat(path).st_mode):
                raise ConfigError("server.unix_socket", f"{path} exists and is not a socket; choose another path")
            os.unlink(path)  # a stale socket from a previous run
        try:
            ok = self.server.add_insecure_port(f"unix:{path}")
        except RuntimeError as e:
            raise ConfigError("server.unix_socket", f"cannot listen on unix:{path}: {e}") from None
        if not ok:
            raise ConfigError("server.unix_socket", f"cannot listen on unix:{path}")
        return path

    def stop(self, grace_s: float = 2.0) -> None:
        """Graceful shutdown: refuse new motion, stop the arm, drain calls, stop again, close the env."""
        with self._stop_lock:
            if self._stopped.is_set():
                return
            self.native.shutting_down = True
            try:
                self.env_host.stop_arm("server shutting down")
            except Exception:
                log.exception("stopping the arm at shutdown failed")
            for name in ("", *self._service_names):
                self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
            self.server.stop(grace_s).wait(grace_s + 1.0)
            self.native.close()
            if self.close_env:
                self.env_host.close()
            else:
                self.env_host.control.close()
            if self.unix_path and os.path.exists(self.unix_path):
                try:
                    os.unlink(self.unix_path)
                except OSError:
                    pass
            self._stopped.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until `stop` has finished (or ``timeout``); True when stopped."""
        return self._stopped.wait(timeout)

    def __enter__(self) -> EnvServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
