"""Bearer-token check for every call, as a server interceptor.

The token travels as ``authorization: Bearer <token>`` metadata (the usual gRPC convention, which
grpcurl and other languages' clients can send). Comparison is constant-time.
"""

from __future__ import annotations

import hmac

import grpc

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
            context.abort(grpc.StatusCode.UNAUTHENTICATED, why)

        def deny_stream(request_or_iterator, context):
            context.abort(grpc.StatusCode.UNAUTHENTICATED, why)
            yield  # pragma: no cover - abort raises

        kw = dict(
            request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
        )
        if handler.request_streaming and handler.response_streaming:
            return grpc.stream_stream_rpc_method_handler(deny_stream, **kw)
        if handler.request_streaming:
            return grpc.stream_unary_rpc_method_handler(deny, **kw)
        if handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(deny_stream, **kw)
        return grpc.unary_unary_rpc_method_handler(deny, **kw)
