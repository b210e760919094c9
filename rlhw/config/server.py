"""The `server` section: how `rlhw serve-env` listens, who may talk to it, and how long calls may take.

Loopback is the default because an env server moves a robot: anything wider needs a token (and
should use TLS). Validation happens here, once, so the server code can trust these values.
"""

from __future__ import annotations

import ipaddress
import os
import socket
from pathlib import Path

from pydantic import Field, SecretStr, field_validator, model_validator

from rlhw.config.base import StrictModel


def is_loopback_host(host: str) -> bool:
    """True when every address ``host`` names is a loopback address (127.0.0.0/8, ::1).

    An unresolvable name counts as not loopback, so a typo can never widen exposure silently.
    """
    host = host.strip("[]")
    if host in ("localhost", "ip6-localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(ipaddress.ip_address(info[4][0]).is_loopback for info in infos)


class ServerConfig(StrictModel):
    """Where and how the env server listens (`server:` in the YAML)."""

    host: str = Field("127.0.0.1", description="address to bind; anything but loopback needs a token")
    port: int = Field(50051, ge=0, le=65535, description="TCP port; 0 picks a free one (printed at start)")
    unix_socket: str | None = Field(None, description="also listen on this unix socket path")
    token: SecretStr | None = Field(
        None, description="shared secret clients send as 'authorization: Bearer <token>'; prefer token_env"
    )
    token_env: str = Field("RLHW_ENV_TOKEN", description="environment variable holding the token")
    tls_cert: Path | None = Field(None, description="PEM certificate chain; with tls_key enables TLS")
    tls_key: Path | None = Field(None, description="PEM private key for tls_cert")
    watchdog_s: float = Field(
        2.0, gt=0, le=600, description="stop the arm and release control when the controller is silent this long"
    )
    max_message_mb: int = Field(64, ge=1, le=1024, description="largest request/response in MiB (images!)")
    step_deadline_s: float = Field(
        5.0, gt=0, le=600, description="client deadline for one Step; a Step still running after this stops the arm"
    )
    reset_deadline_s: float = Field(
        60.0, gt=0, le=3600, description="client deadline for one Reset (moves home); longer stops the arm"
    )
    max_workers: int = Field(
        16,
        ge=4,
        le=256,
        description="gRPC handler threads shared by all calls but Stop and GetStatus (they have their own)",
    )
    max_streams: int = Field(
        8,
        ge=1,
        le=254,
        description="Session (and dm_env_rpc) streams open at once; each holds a handler thread, so keep it below max_workers",
    )
    max_streams_per_peer: int = Field(4, ge=1, le=64, description="Session streams one connection may hold open")
    max_calls_per_connection: int = Field(
        16, ge=2, le=1024, description="calls in flight on one connection (HTTP/2 streams); more wait at the client"
    )

    @field_validator("host")
    @classmethod
    def _host_not_empty(cls, v: str) -> str:
        v = v.strip()
        if not v:
            raise ValueError("must not be empty; use 127.0.0.1 for loopback or 0.0.0.0 for all interfaces")
        return v

    @model_validator(mode="after")
    def _tls_pair(self) -> ServerConfig:
        if (self.tls_cert is None) != (self.tls_key is None):
            missing = "tls_key" if self.tls_key is None else "tls_cert"
            raise ValueError(f"TLS needs both tls_cert and tls_key; set server.{missing} too (or neither)")
        return self

    @model_validator(mode="after")
    def _threads_left_for_calls(self) -> ServerConfig:
        if self.max_streams > self.max_workers - 2:
            raise ValueError(
                f"max_streams ({self.max_streams}) must leave at least 2 of max_workers ({self.max_workers}) "
                f"handler threads for unary calls; raise server.max_workers or lower server.max_streams"
            )
        return self

    @property
    def tls_enabled(self) -> bool:
        return self.tls_cert is not None

    @property
    def loopback(self) -> bool:
        return is_loopback_host(self.host)

    def resolve_token(self) -> str | None:
        """The token from ``token`` or else the ``token_env`` variable; None when neither is set."""
        if self.token is not None and self.token.get_secret_value():
            return self.token.get_secret_value()
        value = os.environ.get(self.token_env, "")
        return value or None

    @property
    def max_message_bytes(self) -> int:
        return self.max_message_mb * 1024 * 1024
