"""What crosses the robot network on a direct step lane before its frames: the handshake, and the doorman.

The handshake (one and a half round trips, the token itself never crosses):

    rollout -> env   CHALLENGE  magic, rollout nonce                              (at once, on accept)
    env -> rollout   HELLO      magic, env rank, env nonce, HMAC(token, "env" | transcript)
    rollout -> env   VERDICT    accept + HMAC(token, "rollout" | transcript), or refuse or busy + why (text)

where the transcript is magic | env rank | rollout nonce | env nonce. Each end proves the token over a nonce
the other end has just drawn, so a hello or an answer captured on one connection proves nothing on another.
Each direction's frames then carry an AES-256-GCM tag (GMAC: the frame is authenticated, not encrypted)
under a key derived from the token and the transcript, with the frame's sequence number as the nonce, so a
byte changed, a frame injected, replayed, dropped or reordered fails the next check, and the connection is
dropped (`rlhw.rl.pipeline.lane_frames`: the frames, their bounds and how they are read). The rank in the
hello is the one rank that connection speaks for: the rollout end refuses a message for any other.

The doorman runs every pending handshake on the rollout side in one thread, non-blocking: a connection that
stays silent or sends garbage holds nothing but its socket, and is closed after ``timeout_s`` or, when
``max_pending`` connections wait, the oldest unfinished one is refused ("handshake not read: N connections
pending") so the newest, which a legitimate env worker finishes within a round trip, is always read. Those two
refusals say BUSY, not REFUSE: the env worker may try again (`LaneBusy`); a wrong proof or version it may not.
"""

from __future__ import annotations

import collections
import errno
import hashlib
import hmac
import os
import selectors
import socket
import struct
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rlhw.rl.pipeline.lane_frames import LaneError, SealedStream

MAGIC = b"RLHWLN03"
CHALLENGE = struct.Struct("!8s16s")  # magic, rollout nonce
HELLO = struct.Struct("!8sI16s32s")  # magic, env rank, env nonce, env proof
VERDICT = struct.Struct("!BH")  # ACCEPT (then the rollout proof), REFUSE or BUSY (then why, UTF-8), and that length
ACCEPT, REFUSE, BUSY = 1, 2, 3
MAX_REASON = 512
HANDSHAKE_TIMEOUT_S = 10.0  # the env end's bound on each handshake step
PENDING_TIMEOUT_S = 5.0  # the doorman's bound on a connection's hello (a legitimate one takes a round trip)
MAX_PENDING = 256  # unfinished handshakes held at once; past it the oldest is refused
_OUT_OF_RESOURCES = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class LaneBusy(LaneError):
    """A join the rollout end did not finish: it was busy (a flood of connections pushed this one out) or a step
    of the handshake timed out or was cut. A later try may get in (`rlhw.rl.pipeline.lane.join` retries it)."""


@dataclass(frozen=True)
class Transcript:
    """What both ends of one handshake agreed on; every proof and key is bound to all of it."""

    rank: int
    rollout_nonce: bytes
    env_nonce: bytes

    def _mac(self, token: bytes, label: bytes) -> bytes:
        data = b"|".join((label, MAGIC, struct.pack("!I", self.rank), self.rollout_nonce, self.env_nonce))
        return hmac.digest(token, data, hashlib.sha256)

    def env_proof(self, token: bytes) -> bytes:
        return self._mac(token, b"env proof")

    def rollout_proof(self, token: bytes) -> bytes:
        return self._mac(token, b"rollout proof")

    def keys(self, token: bytes) -> tuple[bytes, bytes]:
        """The frame keys, env -> rollout and rollout -> env (one per direction: a frame cannot be reflected)."""
        return self._mac(token, b"frame key env->rollout"), self._mac(token, b"frame key rollout->env")


def _handshake_recv(sock: socket.socket, n: int, timeout: float, peer: str, step: str) -> bytes:
    """``n`` bytes of the handshake, each read within ``timeout`` s; `LaneBusy` saying which ``step`` did not come."""
    buf, got = bytearray(n), 0
    sock.settimeout(timeout)
    try:
        while got < n:
            k = sock.recv_into(memoryview(buf)[got:])
            if k == 0:
                raise LaneBusy(f"{peer} closed the connection during the step lane handshake ({step})")
            got += k
    except TimeoutError:
        raise LaneBusy(f"{peer} did not finish the step lane handshake ({step}) within {timeout:g} s") from None
    except ConnectionError as e:
        raise LaneBusy(f"{peer} cut the step lane handshake ({step}: {e.strerror or e})") from None
    return bytes(buf)


def env_handshake(
    sock: socket.socket, token: bytes, rank: int, peer: str, timeout: float = HANDSHAKE_TIMEOUT_S
) -> tuple[bytes, bytes]:
    """The env end of the handshake on a connected ``sock``, each step within ``timeout`` s: the frame keys (env ->
    rollout, rollout -> env), or `LaneBusy` (refused for a flood, timed out or cut: try again) or `LaneError`
    (refused for good: another run's token or another version), saying which step failed and why (the rollout
    end's own words when it refused)."""
    magic, rollout_nonce = CHALLENGE.unpack(_handshake_recv(sock, CHALLENGE.size, timeout, peer, "no challenge"))
    if magic != MAGIC:
        raise LaneError(
            f"{peer} is not an rlhw step lane of this version (its challenge starts {magic!r}, not "
            f"{MAGIC!r}): is the rollout worker running the same rlhw version?"
        )
    t = Transcript(rank, rollout_nonce, os.urandom(16))
    try:
        sock.sendall(HELLO.pack(MAGIC, rank, t.env_nonce, t.env_proof(token)))
    except OSError as e:
        raise LaneBusy(f"{peer} closed the step lane during the handshake ({e.strerror or e})") from None
    kind, size = VERDICT.unpack(_handshake_recv(sock, VERDICT.size, timeout, peer, "no verdict on its hello"))
    if kind in (REFUSE, BUSY) and size <= MAX_REASON:
        why = _handshake_recv(sock, size, timeout, peer, "a refusal cut short").decode(errors="replace")
        why = "".join(c if c.isprintable() else "?" for c in why)  # unauthenticated text: no terminal escapes
        raise (LaneBusy if kind == BUSY else LaneError)(f"{peer} refused the step lane handshake: {why}")
    proof = _handshake_recv(sock, 32, timeout, peer, "no proof") if (kind, size) == (ACCEPT, 32) else b""
    if not hmac.compare_digest(proof, t.rollout_proof(token)):
        raise LaneError(f"{peer} did not prove it holds the run's lane token: not this run's rollout worker")
    return t.keys(token)


@dataclass(eq=False)
class _Pending:
    """A connection whose hello the doorman has not finished reading."""

    sock: socket.socket
    where: str
    nonce: bytes
    deadline: float
    hello: bytearray = field(default_factory=bytearray)


class Doorman:
    """Accepts connections on ``listener`` and runs their handshakes in one thread, non-blocking; each env worker
    that proves the token is handed to ``joined(rank, stream)``. ``refused`` counts the others, ``refusals``
    keeps the latest reasons."""

    def __init__(
        self,
        listener: socket.socket,
        token: bytes,
        joined: Callable[[int, SealedStream], None],
        timeout_s: float = PENDING_TIMEOUT_S,
        max_pending: int = MAX_PENDING,
    ):
        self.token, self.joined, self.timeout_s, self.max_pending = token, joined, timeout_s, max_pending
        self.listener = listener
        self.pending: dict[socket.socket, _Pending] = {}  # oldest first
        self.refused = 0
        self.refusals: collections.deque[str] = collections.deque(maxlen=64)
        self.selector = selectors.DefaultSelector()
        self._paused_until: float | None = None  # accepting stopped for a moment: out of file descriptors
        self._wake_r, self._wake_w = socket.socketpair()
        listener.setblocking(False)
        self.selector.register(listener, selectors.EVENT_READ, "accept")
        self.selector.register(self._wake_r, selectors.EVENT_READ, "stop")
        self._thread = threading.Thread(target=self._run, daemon=True, name="lane-doorman")
        self._thread.start()

    def _run(self) -> None:
        while True:
            now = time.monotonic()
            oldest = next(iter(self.pending.values()), None)
            wait = min(oldest.deadline if oldest else now + 1.0, self._paused_until or now + 1.0) - now
            events = self.selector.select(max(wait, 0.0))
            if any(key.data == "stop" for key, _ in events):
                return
            for key, _ in events:  # hellos first: a flood of new connections cannot push a waiting one out
                if isinstance(key.data, _Pending):
                    self._read(key.data)
            if any(key.data == "accept" for key, _ in events):
                self._accept()
            now = time.monotonic()
            self._expire(now)
            if self._paused_until and self._paused_until <= now:
                self._paused_until = None
                self.selector.register(self.listener, selectors.EVENT_READ, "accept")

    def _accept(self) -> None:
        for _ in range(64):  # a batch per round, so hellos that arrived meanwhile are read next
            try:
                sock, where = self.listener.accept()
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno not in _OUT_OF_RESOURCES:
                    continue  # that connection was aborted before it was accepted
                if not self.pending:  # the descriptors are used elsewhere: try again in 0.1 s, do not spin
                    self.refusals.append(f"accept failed ({e.strerror or e}) with no handshake pending")
                    self.selector.unregister(self.listener)
                    self._paused_until = time.monotonic() + 0.1
                    return
                self._evict_oldest(f"and no file descriptors left ({e.strerror or e})")
                continue
            if len(self.pending) >= self.max_pending:
                self._evict_oldest("")
            self._greet(sock, f"{where[0]}:{where[1]}")

    def _greet(self, sock: socket.socket, where: str) -> None:
        p = _Pending(sock, where, os.urandom(16), time.monotonic() + self.timeout_s)
        sock.setblocking(False)
        try:
            sent = sock.send(CHALLENGE.pack(MAGIC, p.nonce))  # an empty send buffer takes it whole
        except OSError:
            sent = 0
        if sent != CHALLENGE.size:
            sock.close()
            self._count(f"{where} closed before its challenge was sent")
            return
        self.pending[sock] = p
        self.selector.register(sock, selectors.EVENT_READ, p)

    def _read(self, p: _Pending) -> None:
        try:
            data = p.sock.recv(HELLO.size - len(p.hello))
        except BlockingIOError:
            return
        except OSError as e:
            return self._refuse(p, f"connection failed ({e.strerror or e})")
        if not data:
            return self._refuse(p, "closed before its hello")
        p.hello += data
        if len(p.hello) < HELLO.size:
            return
        magic, rank, env_nonce, proof = HELLO.unpack(p.hello)
        t = Transcript(rank, p.nonce, env_nonce)
        if magic != MAGIC:
            return self._refuse(p, f"not an rlhw step lane hello of this version (it starts {magic!r})")
        if not hmac.compare_digest(proof, t.env_proof(self.token)):
            return self._refuse(
                p,
                f"env worker {rank}'s proof does not match the run's lane token (a captured "
                "hello, another run's worker, or not an rlhw env worker)",
            )
        self._release(p)
        to_rollout, to_env = t.keys(self.token)
        try:  # the socket stays non-blocking: the rollout end polls its frames
            stream = SealedStream(p.sock, f"env worker {rank} at {p.where}", to_env, to_rollout)
        except OSError as e:  # it reset the connection meanwhile
            p.sock.close()
            return self._count(f"env worker {rank} at {p.where} closed before its verdict ({e.strerror or e})")
        self.joined(rank, stream)
        try:  # after `joined`: once the env worker reads its verdict, its stream is the rollout end's already
            p.sock.send(VERDICT.pack(ACCEPT, 32) + t.rollout_proof(self.token))  # 35 bytes: an empty buffer takes them
        except OSError:
            try:
                p.sock.shutdown(socket.SHUT_RDWR)  # the rollout end reads the end of the stream and drops it
            except OSError:
                pass

    def _evict_oldest(self, why: str) -> None:
        oldest = next(iter(self.pending.values()))
        self._read(oldest)  # a hello already there is read, never refused unread
        if oldest.sock in self.pending:
            self._refuse(oldest, f"handshake not read: {len(self.pending)} connections pending {why}".rstrip(), BUSY)

    def _expire(self, now: float) -> None:
        while (oldest := next(iter(self.pending.values()), None)) is not None and oldest.deadline <= now:
            self._refuse(
                oldest,
                f"handshake not read: no complete hello within {self.timeout_s:g} s "
                f"({len(self.pending)} connections pending)",
                BUSY,
            )

    def _refuse(self, p: _Pending, why: str, kind: int = REFUSE) -> None:
        """Tell the peer why (best effort, it may be gone) and whether it may try again (``kind`` BUSY), and close
        its connection."""
        self._release(p)
        reason = why.encode()[:MAX_REASON]
        try:
            p.sock.send(VERDICT.pack(kind, len(reason)) + reason)
        except OSError:
            pass
        p.sock.close()
        self._count(f"{p.where}: {why}")

    def _release(self, p: _Pending) -> None:
        del self.pending[p.sock]
        self.selector.unregister(p.sock)

    def _count(self, why: str) -> None:
        self.refused += 1
        self.refusals.append(why)

    def close(self) -> None:
        """Stop the thread and close every unfinished handshake (the listener is the caller's)."""
        self._wake_w.send(b"x")
        self._thread.join(timeout=5)
        for p in list(self.pending.values()):
            self._release(p)
            p.sock.close()
        self.selector.close()
        self._wake_r.close()
        self._wake_w.close()
