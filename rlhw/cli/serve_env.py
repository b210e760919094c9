"""`rlhw serve-env CONFIG [key=value ...]`: serve one arm (or simulator) over gRPC until SIGTERM/SIGINT.

It prints ``listening on HOST:PORT`` (the real port when --port 0) as its first stdout line, for people
and logs. A parent process passes ``--address-fd FD`` (an inherited pipe) instead, and reads one JSON line
``{"address": "HOST:PORT"}`` from it when the server listens: where to connect never depends on log text.

On SIGTERM or SIGINT it stops the arm before anything else, drains calls in flight, then closes the drivers.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import signal
import sys
import threading

from rlhw.cli.common import add_config_arguments
from rlhw.config.root import Config
from rlhw.errors import ConfigError

DEFAULT_FACTORY = "rlhw.robot.factory:make_env"
BATCHED_FACTORY = "rlhw.robot.factory:make_batched_env"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_config_arguments(parser)
    parser.add_argument("--host", help="address to bind (default: server.host, 127.0.0.1); non-loopback needs a token")
    parser.add_argument("--port", type=int, help="TCP port (default: server.port); 0 picks a free one")
    parser.add_argument("--unix", metavar="PATH", help="also listen on this unix socket")
    parser.add_argument("--robot", type=int, default=0, metavar="R", help="Franka hardware rank to serve (default 0)")
    parser.add_argument(
        "--env",
        metavar="MODULE:FUNCTION",
        help="env factory called as f(config, robot_rank) (default: make_env, or make_batched_env when "
        "env.num_envs > 1); e.g. rlhw.env.fake_env:make_fake_env for a hardware-free service test",
    )
    parser.add_argument("--no-dm-env-rpc", action="store_true", help="do not serve the dm_env_rpc Environment service")
    parser.add_argument("--grace", type=float, default=2.0, help="seconds to let calls in flight finish at shutdown")
    parser.add_argument(
        "--isolate-node",
        type=int,
        metavar="N",
        help="apply node N's robot-loop isolation (cluster.node_groups[].env_configs[]: loop_cpus, "
        "loop_priority) to this whole server; the training env worker passes its node",
    )
    parser.add_argument(
        "--address-fd",
        type=int,
        metavar="FD",
        help='inherited file descriptor (a pipe) to write {"address": "HOST:PORT"} and a newline to '
        "once listening, then close; for a parent process that starts this server",
    )
    parser.add_argument(
        "--operator-fd",
        type=int,
        metavar="FD",
        help="inherited file descriptor (a pipe) for the lines meant for the person at the operator's device (a "
        "verdict's question), which the parent shows on its console; without it they go to stderr",
    )


def _factory(spec: str):
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ConfigError("--env", f"{spec!r} is not MODULE:FUNCTION, e.g. rlhw.env.fake_env:make_fake_env")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as e:
        raise ConfigError("--env", f"cannot load {spec!r}: {e}") from None


def _check_port_free(host: str, port: int) -> None:
    """Fail fast on a busy port, before connecting to an arm that would then be released again."""
    import socket

    if port == 0:
        return
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except OSError as e:
        raise ConfigError("server.host", f"cannot resolve {host!r}: {e}") from None
    family, _, _, _, sockaddr = infos[0]
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(sockaddr)
        except OSError as e:
            raise ConfigError(
                "server.port",
                f"cannot listen on {host}:{port} ({e.strerror}); another env server? pick another port (0 = any free)",
            ) from None


def _check_inherited_fd(flag: str, fd: int | None) -> int | None:
    """Refuse a bad --address-fd or --operator-fd before touching any hardware."""
    if fd is None:
        return None
    try:
        os.fstat(fd)
    except OSError as e:
        raise ConfigError(
            flag,
            f"{fd} is not an open file descriptor ({e.strerror}); the parent passes the write end of a pipe it created",
        ) from None
    return fd


def _isolate(config: Config, node_rank: int) -> dict:
    """Node ``node_rank``'s robot-loop isolation (loop_cpus, loop_priority) on this process's main thread, before
    any other thread or driver child starts, so all of them inherit it: the whole server is the robot loop."""
    from rlhw.runtime.isolation import apply_loop_isolation

    if not 0 <= node_rank < config.cluster.num_nodes:
        raise ConfigError(
            "--isolate-node", f"must be a node rank of the cluster (0..{config.cluster.num_nodes - 1}), got {node_rank}"
        )
    record = apply_loop_isolation(config.cluster.node_env(node_rank).isolation)
    print(f"robot loop isolation of node {node_rank}: {json.dumps(record)}", flush=True)
    return record


def report_address(fd: int, address: str, loop_isolation: dict | None = None) -> None:
    """One JSON line on the parent's pipe, in a single write (atomic for a pipe: far below PIPE_BUF), then close
    it: the parent reads until the newline, and EOF without one means the server died first."""
    report = {"address": address} if loop_isolation is None else {"address": address, "loop_isolation": loop_isolation}
    try:
        os.write(fd, (json.dumps(report) + "\n").encode())
    finally:
        os.close(fd)


def run(args: argparse.Namespace) -> int:
    from rlhw.config import load_config

    overrides = list(args.overrides or [])
    if args.host is not None:
        overrides.append(f"server.host={args.host}")
    if args.port is not None:
        overrides.append(f"server.port={args.port}")
    if args.unix is not None:
        overrides.append(f"server.unix_socket={args.unix}")
    if args.robot < 0:
        raise ConfigError("--robot", f"must be >= 0, got {args.robot}")
    config = load_config(args.config, overrides)
    address_fd = _check_inherited_fd("--address-fd", args.address_fd)
    operator_fd = _check_inherited_fd("--operator-fd", args.operator_fd)
    isolation = _isolate(config, args.isolate_node) if args.isolate_node is not None else None

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(levelname)s: %(message)s", stream=sys.stderr)
    if operator_fd is not None:
        from rlhw.robot.teleop import send_operator_lines_to

        send_operator_lines_to(os.fdopen(operator_fd, "w", buffering=1))

    from rlhw.env.server import EnvServer, check_exposure

    # Refuse an exposed bind, or a busy port, before touching any hardware.
    check_exposure(config.server, config.server.resolve_token())
    _check_port_free(config.server.host, config.server.port)
    num_envs = config.env.num_envs
    factory = _factory(args.env or (BATCHED_FACTORY if num_envs > 1 else DEFAULT_FACTORY))
    env = factory(config, args.robot)
    try:
        server = EnvServer(env, config.server, dm_env_rpc=not args.no_dm_env_rpc)
        server.start()
    except BaseException:
        env.close()
        raise

    stop = threading.Event()

    def on_signal(signum, frame):
        stop.set()

    previous = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    protocols = "rlhw.env.v1" + ("" if args.no_dm_env_rpc else " + dm_env_rpc")
    extra = f" and unix:{server.unix_path}" if server.unix_path else ""
    tls = ", TLS" if config.server.tls_enabled else ""
    auth = ", token required" if server.token else ""
    print(f"listening on {server.address}{extra} ({protocols}; health, reflection{tls}{auth})", flush=True)
    if address_fd is not None:
        report_address(address_fd, server.address, isolation)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        print("shutting down: stopping the arm first", flush=True)
        server.stop(args.grace)
        for s, handler in previous.items():
            signal.signal(s, handler)
        print("stopped", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    """``python -m rlhw.cli.serve_env ...``: the same as ``rlhw serve-env ...``."""
    from rlhw.cli.main import main as rlhw_main

    return rlhw_main(["serve-env", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    sys.exit(main())
