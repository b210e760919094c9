"""The client's gRPC channel to an env server: options, TLS, and how repeatable calls wait and retry.

Why gRPC's own retry policy for unary calls: GetSpec, GetStatus, Reset and Stop are safe to repeat,
and the channel retries them on UNAVAILABLE (a restart, a dropped connection) with backoff and
within the call's deadline, without a hand-written loop. A Step is never in that list, because the
arm may already have moved; the Session stream cannot use it at all. gRPC caps a policy at 5
attempts (about 1 s of backoff), too few to wait for a server that is still starting, so a caller
whose repeatable call still fails UNAVAILABLE waits, bounded, with `wait_until_connected` and calls
once more (RemoteEnv._repeatable). Waiting only after a failure keeps the common call free of it.
"""

from __future__ import annotations

import json
from pathlib import Path

import grpc

SERVICE = "rlhw.env.v1.Env"
#: Unary methods that are safe to repeat; gRPC retries these, and only these, on UNAVAILABLE.
REPEATABLE_METHODS = ("GetSpec", "GetStatus", "Reset", "Stop")
RETRY_POLICY = {
    "maxAttempts": 5,
    "initialBackoff": "0.05s",
    "maxBackoff": "1s",
    "backoffMultiplier": 2,
    "retryableStatusCodes": ["UNAVAILABLE"],
}
SERVICE_CONFIG = json.dumps(
    {
        "methodConfig": [
            {"name": [{"service": SERVICE, "method": m} for m in REPEATABLE_METHODS], "retryPolicy": RETRY_POLICY}
        ],
    }
)


def open_channel(
    address: str,
    *,
    tls_root_cert: str | Path | bytes | None = None,
    tls_server_name: str | None = None,
    max_message_mb: int | None = None,
) -> grpc.Channel:
    """A channel to ``address`` (``host:port`` or ``unix:/path``), over TLS when ``tls_root_cert``
    (PEM bytes or a path) is given, that retries the `REPEATABLE_METHODS` and reconnects within 1 s."""
    options: list[tuple[str, object]] = [
        ("grpc.service_config", SERVICE_CONFIG),
        ("grpc.enable_retries", 1),
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.min_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1000),
    ]
    if max_message_mb is not None:
        options += [
            ("grpc.max_receive_message_length", max_message_mb * 1024 * 1024),
            ("grpc.max_send_message_length", max_message_mb * 1024 * 1024),
        ]
    if tls_root_cert is None:
        return grpc.insecure_channel(address, options)
    pem = tls_root_cert if isinstance(tls_root_cert, bytes) else Path(tls_root_cert).read_bytes()
    if tls_server_name:
        options.append(("grpc.ssl_target_name_override", tls_server_name))
    return grpc.secure_channel(address, grpc.ssl_channel_credentials(root_certificates=pem), options)


def wait_until_connected(channel: grpc.Channel, timeout_s: float) -> bool:
    """True once ``channel`` is connected, False if it is not within ``timeout_s`` (nothing raised)."""
    ready = grpc.channel_ready_future(channel)
    try:
        ready.result(timeout=timeout_s)
        return True
    except grpc.FutureTimeoutError:
        return False
    finally:
        ready.cancel()  # unsubscribes from the channel's connectivity updates
