"""A read-only check of an env server, for the smoke test and operators: nothing moves."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from rlhw.env import codec
from rlhw.env.auth import bearer
from rlhw.env.errors import error_from_rpc
from rlhw.env.grpc_channel import open_channel
from rlhw.env.v1 import env_pb2 as pb
from rlhw.env.v1 import env_pb2_grpc


def probe_env_server(
    address: str,
    token: str | None = None,
    *,
    tls_root_cert: str | Path | bytes | None = None,
    timeout_s: float = 3.0,
) -> dict[str, Any]:
    """Check an env server without moving anything: health, spec and status, with round-trip times.

    Returns ``{"address", "healthy", "health_status", "spec" (EnvSpec), "controller", "steps",
    "faults", "env_status" (dict), "rtt_ms"}``; raises an `EnvServiceError` subclass when the server
    cannot be reached or refuses (wrong token, ...). Takes no control and sends no Reset/Step.
    """
    metadata = (bearer(token),) if token else ()
    channel = open_channel(address, tls_root_cert=tls_root_cert)
    try:
        t0 = time.perf_counter()
        health = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="rlhw.env.v1.Env"), timeout=timeout_s, metadata=metadata
        )
        rtt_ms = (time.perf_counter() - t0) * 1e3
        stub = env_pb2_grpc.EnvStub(channel)
        spec = codec.env_spec_from_message(stub.GetSpec(pb.GetSpecRequest(), timeout=timeout_s, metadata=metadata).spec)
        status = stub.GetStatus(pb.GetStatusRequest(), timeout=timeout_s, metadata=metadata)
    except grpc.RpcError as e:
        raise error_from_rpc(address, e) from None
    finally:
        channel.close()
    return {
        "address": address,
        "healthy": health.status == health_pb2.HealthCheckResponse.SERVING,
        "health_status": health_pb2.HealthCheckResponse.ServingStatus.Name(health.status),
        "spec": spec,
        "controller": status.controller,
        "steps": status.steps,
        "faults": list(status.faults),
        "env_status": json.loads(status.env_status_json or "{}"),
        "rtt_ms": rtt_ms,
    }
