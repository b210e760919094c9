"""The step lane: how an env worker's `EnvStep` reaches its rollout worker and the `Actions` come back.

This is the step-critical path of a robot (observation in hand -> action back), so it has its own lane: one
TCP stream per env worker, straight to its rollout worker. A frame is the message in a typed codec
(`rlhw.rl.pipeline.messages.pack`: a header naming each array's dtype and shape, then the raw arrays; no pickle)
and an AES-GCM tag (`rlhw.rl.pipeline.lane_frames`): round trip alone p50 0.18-0.49 ms in runs where the pickle
lane it replaced took 0.21-0.56, p99 within noise of it (tools/bench_lane.py, tools/bench_pipeline.py --parts
phases). Measured before that on the 2-core VM (tools/bench_pipeline.py, docs/history.md): the round trip alone
p50 0.5-1.6 ms (busier runs), and obs->action with the policy 2.6-3.1 ms, against 17-29 ms through the relay of
two channel actors it replaced (each message a Ray actor call in, and one out; that relay, once
``train.step_lane: channels``, is gone: a benchmark's baseline is no product mode). The same message through a
Ray Compiled Graph took p50 1.0-1.2 ms and p99 2.5-3.2 ms in the runs where the stream took 0.5-1.1 and
0.7-1.8. It works across nodes: the rollout worker listens on its node's IP. A dead peer is seen at once (the
kernel closes its socket), and ``train.step_timeout_s`` bounds a peer that stops answering (a lost node sends
nothing).

Replay batches and weights stay on their channels (bulk data, no deadline).

Who may talk on the lane (the threat model is in docs/lane_security.md): both ends prove they hold the run's
lane token, each over a nonce the other has just drawn (the token never crosses the lane), so a captured handshake is
worthless on another connection; every frame after it carries a tag under keys drawn from that handshake and
its sequence number, so without the token nobody on the robot network can join, inject, change, replay or
reorder a frame, feed observations into a run's replay or send actions to an arm. Nothing received is
unpickled or otherwise executed. One bad peer never stops a rollout worker: a frame is bounded by the run's
spec and read as its bytes arrive, without waiting (`rlhw.rl.pipeline.lane_frames`), a message must be for the
env rank its connection proved, and any failure of one peer's frame drops that peer alone with a `LaneError`
naming it. Silent or garbage connections cannot keep env workers out whatever their number (the doorman reads
hellos first and refuses the oldest unfinished handshake when too many wait, and a join so refused tries
again). Not provided: confidentiality (frames cross in clear) and availability against someone who can drop
or delay packets, or break the TCP connection.
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from rlhw.retry import retry
from rlhw.rl.pipeline.lane_frames import DEFAULT_BOUND, FrameBound, LaneError, SealedStream
from rlhw.rl.pipeline.lane_wire import (
    HANDSHAKE_TIMEOUT_S,
    MAX_PENDING,
    PENDING_TIMEOUT_S,
    Doorman,
    LaneBusy,
    env_handshake,
)
from rlhw.rl.pipeline.messages import Actions, EnvStep, expect

__all__ = [
    "LaneError",
    "LaneBusy",
    "LaneAddress",
    "EnvLaneEnd",
    "DirectEnvEnd",
    "DirectRolloutEnd",
    "join",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LaneAddress:
    """Where a rollout worker's direct lane listens."""

    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


class EnvLaneEnd(Protocol):
    """The env worker's end: send one `EnvStep`, wait for the `Actions` that answer it."""

    def send(self, msg: EnvStep) -> None: ...

    def actions(self) -> Actions: ...

    def close(self) -> None: ...


class DirectEnvEnd:
    """An env worker's direct lane to its rollout worker (connected and authenticated in the constructor, each
    step of the handshake within ``handshake_timeout_s``); the `Actions` it reads are bounded by ``bound``
    (`rlhw.rl.pipeline.lane_frames.actions_bound` of the run's spec). One try: `join` retries."""

    def __init__(
        self,
        address: LaneAddress,
        token: bytes,
        env_rank: int,
        rollout_rank: int,
        timeout_s: float,
        bound: FrameBound = DEFAULT_BOUND,
        handshake_timeout_s: float = HANDSHAKE_TIMEOUT_S,
    ):
        self.timeout_s = timeout_s
        peer = f"rollout worker {rollout_rank} at {address}"
        try:
            sock = socket.create_connection((address.host, address.port), timeout=handshake_timeout_s)
        except TimeoutError:
            raise LaneBusy(f"cannot reach {peer} within {handshake_timeout_s:g} s") from None
        except OSError as e:
            raise LaneError(f"cannot reach {peer} ({e.strerror or e})") from None
        try:
            to_rollout, to_env = env_handshake(sock, token, env_rank, peer, handshake_timeout_s)
            self.stream = SealedStream(sock, peer, to_rollout, to_env, bound)
        except BaseException:
            sock.close()
            raise

    def send(self, msg: EnvStep) -> None:
        self.stream.write(expect(msg, EnvStep, "step lane"), self.timeout_s)

    def actions(self) -> Actions:
        return self.stream.read(Actions, self.timeout_s)

    def close(self) -> None:
        self.stream.close()


def join(
    address: LaneAddress,
    token: bytes,
    env_rank: int,
    rollout_rank: int,
    timeout_s: float,
    within_s: float,
    bound: FrameBound = DEFAULT_BOUND,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> DirectEnvEnd:
    """A `DirectEnvEnd`, tried again (`rlhw.retry.retry`: 0.05 s, doubling up to 1 s) while the rollout end
    refuses it for a flood or a step of the handshake times out or is cut (`LaneBusy`), for at most ``within_s``
    s in all (``train.env_start_timeout_s``). Each failed try is logged with its reason; a refusal for good
    (another run's token or version) is not tried again."""
    deadline, failed = clock() + within_s, []

    def one_try() -> DirectEnvEnd:
        step_s = min(HANDSHAKE_TIMEOUT_S, max(deadline - clock(), 0.1))
        try:
            return DirectEnvEnd(address, token, env_rank, rollout_rank, timeout_s, bound, step_s)
        except LaneBusy as e:
            failed.append(e)
            log.warning("env worker %d: step lane join, try %d failed: %s", env_rank, len(failed), e)
            raise

    try:
        return retry(one_try, retry_on=LaneBusy, within_s=within_s, clock=clock, sleep=sleep)
    except LaneBusy as e:
        raise LaneError(
            f"env worker {env_rank} did not join its step lane in {len(failed)} tries within {within_s:g} s "
            f"(train.env_start_timeout_s); the last try: {e}"
        ) from None


class DirectRolloutEnd:
    """A rollout worker's direct lane: it listens on ``host``; each env worker connects once.

    A doorman thread accepts connections and runs their handshakes (`rlhw.rl.pipeline.lane_wire.Doorman`), so
    env workers can connect before the rollout loop runs and no number of silent or garbage connections keeps
    them out; the loop's ``receive`` takes what has arrived on every stream without waiting on any one, so a
    peer that sends a frame slowly, or only its start, holds up no other (its frame is dropped after
    ``timeout_s``). Whatever goes wrong with one peer's frames (too large for ``bound``, failing its tag, not
    decoding, a message for an env rank other than the one its connection proved) drops that peer alone,
    as a `LaneError` naming it, logged and kept in ``closed``. ``handshake_timeout_s`` and ``max_pending``: the
    doorman's bounds on an unfinished handshake (tests shrink them)."""

    def __init__(
        self,
        host: str,
        token: bytes,
        timeout_s: float,
        handshake_timeout_s: float = PENDING_TIMEOUT_S,
        max_pending: int = MAX_PENDING,
        bound: FrameBound = DEFAULT_BOUND,
    ):
        self.timeout_s, self.bound = timeout_s, bound
        self.listener = socket.create_server((host, 0), backlog=128)
        self.address = LaneAddress(host, self.listener.getsockname()[1])
        self.selector = selectors.DefaultSelector()
        self.streams: dict[int, SealedStream] = {}
        self.closed: list[str] = []  # why env workers' streams ended (each a LaneError's words, for diagnostics)
        self._new: list[tuple[int, SealedStream]] = []
        self._lock = threading.Lock()
        self.doorman = Doorman(self.listener, token, self._joined, handshake_timeout_s, max_pending)

    @property
    def refused(self) -> int:
        """Connections that did not finish the handshake (wrong proof, garbage, silent, evicted)."""
        return self.doorman.refused

    def limit(self, bound: FrameBound) -> None:
        """Bound every frame from now on by ``bound`` (the rollout worker's, once it knows the run's spec)."""
        self.bound = bound
        for stream in self.streams.values():
            stream.bound = bound

    def _joined(self, rank: int, stream: SealedStream) -> None:
        with self._lock:
            self._new.append((rank, stream))

    def _register_new(self) -> None:
        with self._lock:
            new, self._new = self._new, []
        for rank, stream in new:
            if rank in self.streams:  # the same env rank connected again: the new stream replaces it
                self._drop(rank, LaneError(f"env worker {rank} connected again"))
            stream.bound = self.bound
            self.streams[rank] = stream
            self.selector.register(stream.sock, selectors.EVENT_READ, rank)

    def receive(self, timeout: float) -> list[EnvStep]:
        """Every `EnvStep` whose frame is whole, waiting at most ``timeout`` s for one. Nothing a peer sends
        raises out of it: a peer whose frame fails is dropped (its env worker's own loop reports the end)."""
        self._register_new()
        msgs = []
        for key, _ in self.selector.select(timeout):
            try:
                msg = self.streams[key.data].poll(EnvStep)
                if msg is not None:
                    msgs.append(self._proven(key.data, msg))
            except LaneError as e:
                self._drop(key.data, e)
        self._expire()
        return msgs

    def _proven(self, rank: int, msg: EnvStep) -> EnvStep:
        """``msg`` if it is for the env rank its connection proved; else a `LaneError`, so no connection can have
        its observations answered to another env worker's arm."""
        if msg.env != rank:
            stream = self.streams[rank]
            stream.close()
            raise LaneError(
                f"{stream.peer} sent a message for env rank {msg.env}: its connection proved rank {rank} and "
                "speaks for no other; connection dropped"
            )
        return msg

    def _expire(self) -> None:
        """Drop each peer whose frame began to arrive more than ``timeout_s`` ago and is still not whole."""
        now = time.monotonic()
        for rank, stream in list(self.streams.items()):
            if stream.started is not None and now - stream.started > self.timeout_s:
                got, size = stream.pending
                self._drop(
                    rank,
                    LaneError(
                        f"{stream.peer} sent {got} of a frame's {size or 'first 16'} bytes in {self.timeout_s:g} s "
                        "(train.step_timeout_s); connection dropped"
                    ),
                )

    def answer(self, env: int, actions: Actions) -> None:
        """Send ``actions`` to env worker ``env``; a `LaneError` if it has no stream (dropped) or the send fails
        (the stream is then dropped: the rollout worker goes on with the others)."""
        stream = self.streams.get(env)
        if stream is None:
            raise LaneError(f"env worker {env} has no step lane to this rollout worker (it closed: {self.closed})")
        try:
            stream.write(expect(actions, Actions, "step lane"), self.timeout_s)
        except LaneError as e:
            self._drop(env, e)
            raise

    def _drop(self, rank: int, why: LaneError | None) -> None:
        stream = self.streams.pop(rank)
        self.selector.unregister(stream.sock)
        stream.close()
        self.closed.append(str(why) if why else f"env worker {rank}: closed by the rollout worker")
        if why:
            log.warning("step lane: %s", why)

    def close(self) -> None:
        self.doorman.close()
        self.listener.close()
        for rank in list(self.streams):
            self._drop(rank, None)
        with self._lock:
            new, self._new = self._new, []
        for _, stream in new:
            stream.close()
