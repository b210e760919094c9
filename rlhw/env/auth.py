"""Who may call (a bearer token, checked by a server interceptor) and who controls the arm (a
session secret the client generated; the server names the session by its fingerprint).

The token travels as ``authorization: Bearer <token>`` metadata (the usual gRPC convention, which
grpcurl and other languages' clients can send). Comparison is constant-time.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

import grpc

from rlhw.env.codec import reason_to_metadata
from rlhw.errors import ErrorReason

METADATA_KEY = "authorization"


def bearer(token: str) -> tuple[str, str]:
    """The metadata pair a client sends."""
    return (METADATA_KEY, f"Bearer {token}")


class TokenAuthInterceptor(grpc.ServerInterceptor):
    """Rejects calls without the right token with UNAUTHENTICATED before any handler runs."""

    def __init__(self, token: str):
        if not token:
            raise ValueError("token must not be empty")
        self._expected = f"Bearer {token}".encode()

    def _authorized(self, details: grpc.HandlerCallDetails) -> tuple[bool, str]:
        for key, value in details.invocation_metadata or ():
            if key == METADATA_KEY:
                got = value.encode() if isinstance(value, str) else bytes(value)
                if hmac.compare_digest(got, self._expected):
                    return True, ""
                return False, "wrong token in 'authorization' metadata"
        return False, "missing 'authorization: Bearer <token>' metadata; this server requires a token"

    def intercept_service(self, continuation, handler_call_details):
        ok, why = self._authorized(handler_call_details)
        handler = continuation(handler_call_details)
        if ok or handler is None:
            return handler

        def deny(request_or_iterator, context):
            context.set_trailing_metadata((reason_to_metadata(ErrorReason.UNAUTHENTICATED),))
            context.abort(grpc.StatusCode.UNAUTHENTICATED, why)

        def deny_stream(request_or_iterator, context):
            deny(request_or_iterator, context)
            yield  # pragma: no cover - abort raises

        kw = dict(request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer)
        if handler.request_streaming and handler.response_streaming:
            return grpc.stream_stream_rpc_method_handler(deny_stream, **kw)
        if handler.request_streaming:
            return grpc.stream_unary_rpc_method_handler(deny, **kw)
        if handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(deny_stream, **kw)
        return grpc.unary_unary_rpc_method_handler(deny, **kw)


# ---------------------------------------------------------------------------------------------
# Session identity: who controls the arm


SESSION_METADATA_KEY = "rlhw-session"
#: A session secret must be at least this long: 32 characters of a random string (e.g.
#: ``secrets.token_urlsafe(32)``, 43 characters) cannot be guessed during a lease.
MIN_SECRET_CHARS = 32
MAX_SECRET_CHARS = 256
#: Hex digits of the secret's SHA-256 kept as the session's name: 64 bits, shown by GetStatus.
FINGERPRINT_HEX = 16


class SessionSecretRefused(ValueError):
    """The ``rlhw-session`` metadata is not an acceptable secret (too short or too long)."""

    field = "metadata.rlhw-session"


def new_session_secret() -> str:
    """A fresh random session secret (43 URL-safe characters, 256 bits)."""
    return secrets.token_urlsafe(32)


def check_session_secret(secret: str) -> str:
    """``secret`` if it is acceptable, else SessionSecretRefused saying how to make one."""
    if not MIN_SECRET_CHARS <= len(secret) <= MAX_SECRET_CHARS:
        raise SessionSecretRefused(
            f"{SessionSecretRefused.field}: is {len(secret)} characters; a session secret must be "
            f"{MIN_SECRET_CHARS} to {MAX_SECRET_CHARS} characters of a random string the client generated "
            f"(Python: secrets.token_urlsafe(32)). It proves which client controls the arm, so it must be "
            f"unguessable; the server only ever shows its fingerprint"
        )
    return secret


def session_fingerprint(secret: str) -> str:
    """The public name of the session that holds ``secret``: ``key:`` + 16 hex digits of its SHA-256.

    Knowing the fingerprint does not let anyone act as the session: that takes the secret itself.
    """
    return "key:" + hashlib.sha256(secret.encode()).hexdigest()[:FINGERPRINT_HEX]


def session_of(metadata, peer: str, prefix: str = "") -> str:
    """The session of a call: the fingerprint of its ``rlhw-session`` secret, else ``peer:`` + the
    connection's address. The two namespaces cannot meet: a metadata value is always hashed into
    ``key:...``, and only the transport decides a ``peer:...`` name."""
    for key, value in metadata or ():
        if key == SESSION_METADATA_KEY and value:
            return session_fingerprint(check_session_secret(str(value)))
    return f"peer:{prefix}{peer}"
