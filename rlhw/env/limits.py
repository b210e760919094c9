"""What one client can hold on the server: open Session streams, and the length of error text.

Every open Session stream occupies one of the server's handler threads for as long as it is open
(grpc's synchronous server runs a stream's handler on a pool thread). Without a bound, a few
clients that open streams and keep them open take every thread, and calls queue. `StreamGate`
bounds the streams per connection and in all, so some threads always stay free for unary calls;
Stop and GetStatus do not use that pool at all (see rlhw.env.service).

Error text is bounded because gRPC carries a status message in metadata (8 KiB by default at the
client): an error that echoes a huge request would arrive as RESOURCE_EXHAUSTED instead of itself.
"""

from __future__ import annotations

import threading

import grpc

#: Longest error message (characters) the server sends, in a status or in-band.
MAX_ERROR_CHARS = 1000
#: Longest ``field`` of an in-band error.
MAX_FIELD_CHARS = 200


def bounded(text: str, limit: int = MAX_ERROR_CHARS) -> str:
    """``text``, cut to ``limit`` characters with a note saying how much was cut."""
    if len(text) <= limit:
        return text
    note = f" ... ({len(text) - limit} more characters cut)"
    return text[: max(0, limit - len(note))] + note


class StreamRefused(Exception):
    """A Session stream was not admitted; ``code`` and ``message`` are what the client gets."""

    def __init__(self, message: str):
        self.code = grpc.StatusCode.RESOURCE_EXHAUSTED
        self.message = message
        super().__init__(message)


class StreamGate:
    """Counts open Session streams per connection (peer) and per session, and in all."""

    def __init__(self, max_streams: int, max_streams_per_peer: int):
        self.max_streams = max_streams
        self.max_streams_per_peer = max_streams_per_peer
        self._lock = threading.Lock()
        self._peers: dict[str, int] = {}
        self._sessions: dict[str, int] = {}
        self._total = 0

    def open(self, peer: str, session: str, controller: bool = False) -> None:
        """Admit one stream or raise StreamRefused (nothing counted then). The controller's own
        streams are exempt from the server-wide cap (not the per-connection one), so that streams
        others hold open cannot lock the controller out."""
        with self._lock:
            if self._peers.get(peer, 0) >= self.max_streams_per_peer:
                raise StreamRefused(
                    f"this connection already has {self.max_streams_per_peer} Session streams open "
                    f"(server.max_streams_per_peer); one stream per client is enough: close the others"
                )
            if self._total >= self.max_streams and not controller:
                raise StreamRefused(
                    f"the server has {self.max_streams} Session streams open (server.max_streams); "
                    f"retry later, or take control with a unary Reset first (the controller's streams "
                    f"are always admitted)"
                )
            self._peers[peer] = self._peers.get(peer, 0) + 1
            self._sessions[session] = self._sessions.get(session, 0) + 1
            self._total += 1

    def close(self, peer: str, session: str) -> int:
        """Count one stream closed; returns how many streams ``session`` still has open."""
        with self._lock:
            self._total -= 1
            for counts, key in ((self._peers, peer), (self._sessions, session)):
                left = counts[key] = counts[key] - 1
                if not left:
                    del counts[key]
            return self._sessions.get(session, 0)

    @property
    def open_streams(self) -> int:
        return self._total
