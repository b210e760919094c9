"""The step lane: how an env worker's `EnvStep` reaches its rollout worker and the `Actions` come back.

This is the step-critical path of a robot (observation in hand -> action back), so it has its own lane,
chosen with ``train.step_lane``:

- ``direct`` (default): one TCP stream per env worker, straight to its rollout worker. A frame is the message
  in a typed codec (`rlhw.rl.pipeline.messages.pack`: a header naming each array's dtype and shape, then the
  raw arrays; no pickle) and an AES-GCM tag (`rlhw.rl.pipeline.lane_wire`): round trip alone p50 0.18-0.49 ms
  in runs where the pickle lane it replaced took 0.21-0.56, p99 within noise of it (tools/bench_lane.py,
  tools/bench_pipeline.py --parts phases). Measured before that on the 2-core VM (tools/bench_pipeline.py,
  docs/training.md): the round trip alone p50 0.5-1.6 ms (busier runs), and obs->action with the policy
  2.6-3.1 ms, against 17-29 ms through the two relay channel actors of ``channels`` (each message is a Ray
  actor call in, and one out). The same message through a Ray Compiled Graph took p50 1.0-1.2 ms and p99
  2.5-3.2 ms in the runs where the stream took 0.5-1.1 and 0.7-1.8. It works across nodes: the rollout worker
  listens on its node's IP. A dead peer is seen at once (the kernel closes its socket), and
  ``train.step_timeout_s`` bounds a peer that stops answering (a lost node sends nothing).
- ``channels``: the older relay through the ``obs`` and ``actions`` channels, kept as the baseline.

Replay batches and weights stay on their channels (bulk data, no deadline).

Who may talk on a direct lane (the threat model is in docs/training.md): both ends prove they hold the run's
lane token, each over a nonce the other has just drawn (the token never crosses the lane), so a captured handshake is
worthless on another connection; every frame after it carries a tag under keys drawn from that handshake and
its sequence number, so without the token nobody on the robot network can join, inject, change, replay or
reorder a frame, feed observations into a run's replay or send actions to an arm. Nothing received is
unpickled or otherwise executed: a frame that fails its tag or does not decode drops its connection with a
`LaneError` naming the peer. Silent or garbage connections cannot keep env workers out whatever their
number (the doorman reads hellos first and refuses the oldest unfinished handshake when too many wait). Not
provided: confidentiality (frames cross in clear) and availability against someone who can drop or delay
packets, or break the TCP connection.
"""

from __future__ import annotations

import selectors
import socket
import threading
from dataclasses import dataclass
from typing import Protocol

from rlhw.rl.pipeline.lane_wire import (
    HANDSHAKE_TIMEOUT_S,
    MAX_PENDING,
    PENDING_TIMEOUT_S,
    Doorman,
    LaneError,
    SealedStream,
    env_handshake,
)
from rlhw.rl.pipeline.messages import (
    ACTION_CHANNEL,
    OBS_CHANNEL,
    Actions,
    EnvStep,
    decode_env_step,
    encode_env_step,
    expect,
)

__all__ = [
    "LaneError",
    "LaneAddress",
    "EnvLaneEnd",
    "RolloutLaneEnd",
    "DirectEnvEnd",
    "DirectRolloutEnd",
    "ChannelEnvEnd",
    "ChannelRolloutEnd",
]


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


class RolloutLaneEnd(Protocol):
    """The rollout worker's end: every `EnvStep` waiting (none after ``timeout``), and one answer per env."""

    address: LaneAddress | None

    def receive(self, timeout: float) -> list[EnvStep]: ...

    def answer(self, env: int, actions: Actions) -> None: ...

    def close(self) -> None: ...


# ---- direct: one TCP stream per env worker
class DirectEnvEnd:
    """An env worker's direct lane to its rollout worker (connected and authenticated in the constructor)."""

    def __init__(self, address: LaneAddress, token: bytes, env_rank: int, rollout_rank: int, timeout_s: float):
        self.timeout_s = timeout_s
        peer = f"rollout worker {rollout_rank} at {address}"
        try:
            sock = socket.create_connection((address.host, address.port), timeout=HANDSHAKE_TIMEOUT_S)
        except OSError as e:
            raise LaneError(f"cannot reach {peer} ({e.strerror or e})") from None
        try:
            to_rollout, to_env = env_handshake(sock, token, env_rank, peer)
        except BaseException:
            sock.close()
            raise
        self.stream = SealedStream(sock, peer, to_rollout, to_env)

    def send(self, msg: EnvStep) -> None:
        self.stream.write(expect(msg, EnvStep, "step lane"), self.timeout_s)

    def actions(self) -> Actions:
        return self.stream.read(Actions, self.timeout_s)

    def close(self) -> None:
        self.stream.close()


class DirectRolloutEnd:
    """A rollout worker's direct lane: it listens on ``host``; each env worker connects once.

    A doorman thread accepts connections and runs their handshakes (`rlhw.rl.pipeline.lane_wire.Doorman`), so
    env workers can connect before the rollout loop runs and no number of silent or garbage connections keeps
    them out; the loop's ``receive`` reads every stream with a frame waiting. ``handshake_timeout_s`` and
    ``max_pending``: the doorman's bounds on an unfinished handshake (tests shrink them)."""

    def __init__(
        self,
        host: str,
        token: bytes,
        timeout_s: float,
        handshake_timeout_s: float = PENDING_TIMEOUT_S,
        max_pending: int = MAX_PENDING,
    ):
        self.timeout_s = timeout_s
        self.listener = socket.create_server((host, 0), backlog=128)
        self.address = LaneAddress(host, self.listener.getsockname()[1])
        self.selector = selectors.DefaultSelector()
        self.streams: dict[int, SealedStream] = {}
        self.closed: list[str] = []  # why env workers' streams ended (for diagnostics)
        self._new: list[tuple[int, SealedStream]] = []
        self._lock = threading.Lock()
        self.doorman = Doorman(self.listener, token, self._joined, handshake_timeout_s, max_pending)

    @property
    def refused(self) -> int:
        """Connections that did not finish the handshake (wrong proof, garbage, silent, evicted)."""
        return self.doorman.refused

    def _joined(self, rank: int, stream: SealedStream) -> None:
        with self._lock:
            self._new.append((rank, stream))

    def _register_new(self) -> None:
        with self._lock:
            new, self._new = self._new, []
        for rank, stream in new:
            if rank in self.streams:  # the same env rank connected again: the new stream replaces it
                self._drop(rank, f"env worker {rank} connected again")
            self.streams[rank] = stream
            self.selector.register(stream.sock, selectors.EVENT_READ, rank)

    def receive(self, timeout: float) -> list[EnvStep]:
        self._register_new()
        msgs = []
        for key, _ in self.selector.select(timeout):
            try:
                msgs.append(self.streams[key.data].read(EnvStep, self.timeout_s))
            except LaneError as e:  # it stopped, died or sent a bad frame; the controller's poll reports it
                self._drop(key.data, str(e))
        return msgs

    def answer(self, env: int, actions: Actions) -> None:
        stream = self.streams.get(env)
        if stream is None:
            raise LaneError(f"env worker {env} has no step lane to this rollout worker (it closed: {self.closed})")
        stream.write(expect(actions, Actions, "step lane"), self.timeout_s)

    def _drop(self, rank: int, why: str) -> None:
        stream = self.streams.pop(rank)
        self.selector.unregister(stream.sock)
        stream.close()
        self.closed.append(why)

    def close(self) -> None:
        self.doorman.close()
        self.listener.close()
        for rank in list(self.streams):
            self._drop(rank, "closed by the rollout worker")
        with self._lock:
            new, self._new = self._new, []
        for _, stream in new:
            stream.close()


# ---- channels: the relay through two channel actors (the older lane, the baseline)
class ChannelEnvEnd:
    """An env worker's end of the channel relay: ``obs`` (key = rollout rank) out, ``actions`` (key = env rank) in."""

    def __init__(self, prefix: str, env_rank: int, rollout_rank: int, timeout_s: float):
        from rlhw.runtime.channel import Channel

        self.prefix, self.env_rank, self.rollout_rank, self.timeout_s = prefix, env_rank, rollout_rank, timeout_s
        self.obs_ch = Channel.connect(prefix + OBS_CHANNEL, timeout_s=60)
        self.act_ch = Channel.connect(prefix + ACTION_CHANNEL, timeout_s=60)

    def send(self, msg: EnvStep) -> None:
        self.obs_ch.put(encode_env_step(msg), key=self.rollout_rank, timeout=self.timeout_s)

    def actions(self) -> Actions:
        return expect(self.act_ch.get(key=self.env_rank, timeout=self.timeout_s), Actions, self.prefix + ACTION_CHANNEL)

    def close(self) -> None:
        pass


class ChannelRolloutEnd:
    """A rollout worker's end of the channel relay."""

    address = None

    def __init__(self, prefix: str, rank: int, serves_several: bool, timeout_s: float):
        from rlhw.runtime.channel import Channel

        self.rank, self.serves_several, self.timeout_s = rank, serves_several, timeout_s
        self.obs_ch = Channel.connect(prefix + OBS_CHANNEL, timeout_s=60)
        self.act_ch = Channel.connect(prefix + ACTION_CHANNEL, timeout_s=60)

    def receive(self, timeout: float) -> list[EnvStep]:
        from rlhw.runtime.channel import ChannelTimeout

        try:
            msgs = [decode_env_step(self.obs_ch.get(key=self.rank, timeout=timeout))]
        except ChannelTimeout:
            return []
        waiting = self.obs_ch.qsize(key=self.rank) if self.serves_several else 0
        if waiting:
            msgs += map(decode_env_step, self.obs_ch.get_batch(count=waiting, key=self.rank, timeout=1.0))
        return msgs

    def answer(self, env: int, actions: Actions) -> None:
        self.act_ch.put(actions, key=env, timeout=self.timeout_s)

    def close(self) -> None:
        pass
