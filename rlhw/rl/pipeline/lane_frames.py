"""A step lane's frames: sealed, bounded by what the run can send, and read as their bytes arrive.

A frame: header length and payload length (two uint64), the message's typed header and payload (the codec of
`rlhw.rl.pipeline.messages.pack`), and the 16-byte AES-GCM tag over everything before it (GMAC: authenticated,
not encrypted) under this direction's key, with the frame's sequence number as the nonce.

Why bounded by the spec: the lengths come first and are not authenticated until the tag, the frame's last 16
bytes, checks out, so a relay without the token can write any length into an established stream. A frame's
lengths are therefore bounded by `FrameBound`: the largest header and payload the run's messages can have (the
largest `EnvStep` its env spec can produce, or the largest `Actions`), twice over plus 64 KiB. A frame that
announces more is refused as soon as its 16-byte prefix is read, as a `LaneError` naming the peer.

Why read as bytes arrive: a frame's buffer starts at 256 KiB at most and doubles only once the bytes already
received fill it, so memory follows what the peer sent, never what it announced. On the rollout end the reads
never wait (the socket is non-blocking, a frame is assembled across calls), so a peer that announces a frame
and sends it slowly or not at all holds neither memory nor the loop that serves the other env workers.

Any failure to read, check or decode a frame closes the connection and is a `LaneError` naming the peer;
nothing else escapes (a `MemoryError` or the AEAD library's `OverflowError` included).
"""

from __future__ import annotations

import select
import socket
import struct
import time
from dataclasses import dataclass

import numpy as np
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from rlhw.errors import RlhwError
from rlhw.rl.pipeline.messages import Actions, EnvStep, FrameError, pack, unpack
from rlhw.rl.replay import transition_batch
from rlhw.robot.spec import EnvSpec

PREFIX = struct.Struct("!QQ")  # a frame's header and payload lengths
TAG = 16
HEADROOM = 1 << 16  # added to twice the largest message: room for an env whose arrays are wider than declared
FIRST_CHUNK = 1 << 18  # a frame's buffer to begin with, at most; it doubles only as bytes fill it


class LaneError(RlhwError):
    """The step lane to a peer broke: it closed, refused the handshake, sent a frame that is too large, fails its
    check or does not decode, or did not answer in time. The connection is closed."""


@dataclass(frozen=True)
class FrameBound:
    """The largest header and payload a frame may announce, in bytes."""

    header: int
    payload: int

    @classmethod
    def around(cls, largest) -> FrameBound:
        """Room for the message ``largest`` twice over, plus `HEADROOM`."""
        _, header, payload = pack(largest)
        return cls(2 * header + HEADROOM, 2 * payload + HEADROOM)


DEFAULT_BOUND = FrameBound(header=1 << 16, payload=1 << 22)
"""For a lane end opened without the run's spec (tests, tools): 64 KiB of header, 4 MiB of payload."""


def env_step_bound(spec: EnvSpec, num_envs: int) -> FrameBound:
    """What a rollout end reads: the largest `EnvStep` of ``spec``'s env run with ``num_envs`` instances, where
    every instance wants an action and brings a transition."""
    k = max(int(num_envs), int(spec.num_envs), 1)
    obs = {name: np.zeros((k, *t.shape), t.dtype) for name, t in spec.observations.items()}
    action, flags = np.zeros((k, *spec.action.shape), np.float32), np.zeros(k, np.float32)
    transitions = transition_batch(obs, obs, action, flags, flags, flags)
    return FrameBound.around(EnvStep(0, obs, tuple(range(k)), np.zeros(k, bool), transitions))


def actions_bound(spec: EnvSpec, num_envs: int) -> FrameBound:
    """What an env end reads: the `Actions` for all ``num_envs`` instances of ``spec``'s env."""
    k = max(int(num_envs), int(spec.num_envs), 1)
    return FrameBound.around(Actions(np.zeros((k, *spec.action.shape), np.float32), np.zeros(k, np.int64)))


def frame(msg) -> bytearray:
    """``msg`` (an `EnvStep` or `Actions`) as a frame: its lengths, header and payload, and room for its tag."""
    buf, header_len, payload_len = pack(msg, front=PREFIX.size, back=TAG)
    PREFIX.pack_into(buf, 0, header_len, payload_len)
    return buf


def seal(aead: AESGCM, seq: int, buf: bytearray) -> None:
    """Write the tag of frame ``seq`` over all of ``buf`` but its last ``TAG`` bytes into those bytes."""
    view = memoryview(buf)
    view[-TAG:] = aead.encrypt(seq.to_bytes(12, "big"), b"", view[:-TAG])


def intact(aead: AESGCM, seq: int, buf: bytearray) -> bool:
    """Whether ``buf`` ends with the right tag for frame ``seq`` of this direction."""
    view = memoryview(buf)
    try:
        aead.decrypt(seq.to_bytes(12, "big"), bytes(view[-TAG:]), view[:-TAG])
    except InvalidTag:
        return False
    return True


class SealedStream:
    """A connected socket carrying `EnvStep` / `Actions` frames, each sealed under this direction's key and
    sequence number and bounded by ``bound``; ``peer`` names the other end in every error.

    ``read`` waits for a whole frame (the env end); ``poll`` takes what has arrived of one without waiting (the
    rollout end, whose socket is non-blocking). ``started``: when the frame being read began to arrive (None
    between frames), so a frame that never completes can be given up on."""

    def __init__(self, sock: socket.socket, peer: str, send_key: bytes, receive_key: bytes, bound=DEFAULT_BOUND):
        self.sock, self.peer, self.bound = sock, peer, bound
        self._seal, self._check = AESGCM(send_key), AESGCM(receive_key)
        self.sent = self.received = 0
        self.started: float | None = None
        self._prefix = bytearray(PREFIX.size)
        self._buf: bytearray | None = None  # the frame being read, once its prefix is in
        self._got = 0  # its bytes received so far (the prefix's until it is whole)
        self._size = 0  # its whole size, prefix and tag included
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    @property
    def pending(self) -> tuple[int, int]:
        """Bytes received of the frame being read, and its announced size (0: not known yet)."""
        return self._got, self._size

    # ---- sending
    def write(self, msg, timeout: float) -> None:
        self.send_sealed(frame(msg), timeout)

    def send_sealed(self, buf: bytearray, timeout: float) -> None:
        """Seal ``buf`` (a frame with ``TAG`` bytes left at its end) with the next sequence number and send it
        within ``timeout`` s, whether the socket blocks or not."""
        seal(self._seal, self.sent, buf)
        self.sent += 1
        view, deadline = memoryview(buf), time.monotonic() + timeout
        if self.sock.gettimeout() not in (0.0, timeout):  # a blocking socket: bounded by this call's timeout
            self.sock.settimeout(timeout)
        try:
            while view:
                try:
                    view = view[self.sock.send(view) :]
                except BlockingIOError:  # a non-blocking socket's buffer is full: wait until it takes more
                    left = deadline - time.monotonic()
                    if left <= 0 or not select.select((), (self.sock,), (), left)[1]:
                        raise TimeoutError from None
        except TimeoutError:
            raise LaneError(f"{self.peer} did not take a message within {timeout:g} s") from None
        except OSError as e:
            raise LaneError(f"{self.peer} closed the step lane ({e.strerror or e}): it stopped or died") from None

    # ---- receiving
    def read(self, expected: type, timeout: float):
        """The next frame's ``expected`` message, waiting at most ``timeout`` s for each of its reads; `LaneError`
        if it does not come, is too large, fails its tag or does not decode (the connection is then closed)."""
        if self.sock.gettimeout() != timeout:
            self.sock.settimeout(timeout)
        while (msg := self._pump(expected, timeout)) is None:
            pass
        return msg

    def poll(self, expected: type):
        """The ``expected`` message if the frame being read is whole after taking what has arrived (the socket
        must be non-blocking), else None; `LaneError` as ``read``."""
        return self._pump(expected, 0.0)

    def _pump(self, expected: type, timeout: float):
        try:
            return self._take(expected)
        except BlockingIOError:
            return None
        except TimeoutError:
            error = LaneError(f"{self.peer} sent nothing for {timeout:g} s (train.step_timeout_s)")
        except ConnectionError as e:
            error = LaneError(f"{self.peer} closed the step lane ({e.strerror or e}): it stopped or died")
        except LaneError as e:
            error = e
        except FrameError as e:
            error = LaneError(f"{self.peer} sent a frame that does not decode ({e}); connection dropped")
        except Exception as e:  # noqa: BLE001 - e.g. MemoryError, OverflowError: whatever a peer's bytes cause
            error = LaneError(f"{self.peer} sent a frame that could not be read ({type(e).__name__}: {e}); dropped")
        self.close()
        raise error

    def _take(self, expected: type):
        """Receive until the frame is whole (its message) or the socket has nothing more (BlockingIOError)."""
        while True:
            k = self.sock.recv_into(memoryview(self._prefix if self._buf is None else self._buf)[self._got :])
            if k == 0:
                raise LaneError(f"{self.peer} closed the step lane: it stopped or died")
            if self.started is None:
                self.started = time.monotonic()
            self._got += k
            if self._buf is None:
                if self._got < PREFIX.size:
                    continue
                self._begin()
            if self._got < len(self._buf):
                continue
            if self._got < self._size:  # the bytes received fill the buffer: it doubles, memory follows them
                self._buf.extend(bytes(min(self._size - self._got, self._got)))
                continue
            return self._finish(expected)

    def _begin(self) -> None:
        """The prefix is in: the frame's size checked against the bound, its first chunk of buffer allocated."""
        header_len, payload_len = PREFIX.unpack(self._prefix)
        if header_len > self.bound.header or payload_len > self.bound.payload:
            raise LaneError(
                f"{self.peer} announced a frame of {header_len} + {payload_len} bytes, over the "
                f"{self.bound.header} + {self.bound.payload} that this run's messages can take: not a "
                "frame of this run's lane; connection dropped"
            )
        self._size = PREFIX.size + header_len + payload_len + TAG
        self._buf = bytearray(min(self._size, FIRST_CHUNK))
        self._buf[: PREFIX.size] = self._prefix

    def _finish(self, expected: type):
        buf, self._buf, self._got, self._size, self.started = self._buf, None, 0, 0, None
        if not intact(self._check, self.received, buf):
            raise LaneError(
                f"{self.peer} sent a frame (number {self.received}) that fails its integrity check: bytes "
                "were injected, changed, replayed or reordered on the way; connection dropped"
            )
        self.received += 1
        header_len, payload_len = PREFIX.unpack_from(buf)
        return unpack(buf, PREFIX.size, header_len, payload_len, expected)

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass
