"""The step lane: how an env worker's `EnvStep` reaches its rollout worker and the `Actions` come back.

This is the step-critical path of a robot (observation in hand -> action back), so it has its own lane,
chosen with ``train.step_lane``:

- ``direct`` (default): one TCP stream per env worker, straight to its rollout worker. A frame is an 8-byte
  length and a pickled message. Measured on the 2-core VM (tools/bench_pipeline.py, docs/training.md): the
  round trip alone costs p50 0.5-1.6 ms, and obs->action with the policy 2.6-3.1 ms, against 17-29 ms through
  the two relay channel actors of ``channels`` (each message is a Ray actor call in, and one out). The same
  message through a Ray Compiled Graph took p50 1.0-1.2 ms and p99 2.5-3.2 ms in the runs where the stream
  took 0.5-1.1 and 0.7-1.8. It works across nodes: the rollout worker listens on its node's IP. A dead peer
  is seen at once (the kernel closes its socket), and ``train.step_timeout_s`` bounds a peer that stops
  answering (a lost node sends nothing).
- ``channels``: the older relay through the ``obs`` and ``actions`` channels, kept as the baseline.

Replay batches and weights stay on their channels (bulk data, no deadline).

Who may talk on a direct lane: a connection must prove it holds the run's lane token (an HMAC over a fresh
nonce, never the token itself) before any message is unpickled, and the rollout worker proves it back, so
nobody can feed observations into the replay of a run or send actions to an arm.
"""

from __future__ import annotations

import hashlib
import hmac
import os
import pickle
import selectors
import socket
import struct
import threading
from dataclasses import dataclass
from typing import Protocol

from rlhw.errors import RlhwError
from rlhw.rl.pipeline.messages import ACTION_CHANNEL, OBS_CHANNEL, Actions, EnvStep, decode_env_step, \
    encode_env_step, expect

_MAGIC = b"RLHWLN01"
_HEADER = struct.Struct("!Q")
_HELLO = struct.Struct("!8sI16s32s")  # magic, env rank, nonce, HMAC(token, magic + rank + nonce)
_MAX_FRAME = 1 << 31
_HANDSHAKE_TIMEOUT_S = 10.0
_MAX_HANDSHAKES = 16  # connections being checked at once; more are closed unread (a flood cannot block joins)


class LaneError(RlhwError):
    """The step lane to a peer broke: it closed, refused the handshake or did not answer in time."""


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
def _proof(token: bytes, *parts: bytes) -> bytes:
    return hmac.new(token, b"".join(parts), hashlib.sha256).digest()


class _Stream:
    """A connected socket carrying length-prefixed pickled messages; ``peer`` names the other end in errors."""

    def __init__(self, sock: socket.socket, peer: str):
        self.sock, self.peer = sock, peer
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def write(self, msg, timeout: float) -> None:
        data = pickle.dumps(msg, protocol=5)
        header = _HEADER.pack(len(data))
        self.sock.settimeout(timeout)
        try:
            if len(data) < 65536:  # one segment; a large frame is not worth copying to join the two
                self.sock.sendall(header + data)
            else:
                self.sock.sendall(header)
                self.sock.sendall(data)
        except socket.timeout:
            raise LaneError(f"{self.peer} did not take a message within {timeout:g} s") from None
        except OSError as e:
            raise LaneError(f"{self.peer} closed the step lane ({e.strerror or e}): it stopped or died") from None

    def read(self, timeout: float):
        self.sock.settimeout(timeout)
        (size,) = _HEADER.unpack(self.read_exact(_HEADER.size, timeout))
        if size > _MAX_FRAME:
            raise LaneError(f"{self.peer} sent a frame of {size} bytes: not an rlhw step lane")
        return pickle.loads(self.read_exact(size, timeout))

    def read_exact(self, n: int, timeout: float) -> memoryview:
        buf = memoryview(bytearray(n))
        got = 0
        try:
            while got < n:
                k = self.sock.recv_into(buf[got:])
                if k == 0:
                    raise LaneError(f"{self.peer} closed the step lane: it stopped or died")
                got += k
        except socket.timeout:
            raise LaneError(f"{self.peer} sent nothing for {timeout:g} s (train.step_timeout_s)") from None
        except ConnectionError as e:
            raise LaneError(f"{self.peer} closed the step lane ({e.strerror or e}): it stopped or died") from None
        return buf

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass


class DirectEnvEnd:
    """An env worker's direct lane to its rollout worker (connected and authenticated in the constructor)."""

    def __init__(self, address: LaneAddress, token: bytes, env_rank: int, rollout_rank: int, timeout_s: float):
        self.timeout_s = timeout_s
        peer = f"rollout worker {rollout_rank} at {address}"
        try:
            sock = socket.create_connection((address.host, address.port), timeout=_HANDSHAKE_TIMEOUT_S)
        except OSError as e:
            raise LaneError(f"cannot reach {peer} ({e.strerror or e})") from None
        self.stream = _Stream(sock, peer)
        nonce = os.urandom(16)
        rank = struct.pack("!I", env_rank)
        sock.sendall(_HELLO.pack(_MAGIC, env_rank, nonce, _proof(token, _MAGIC, rank, nonce)))
        try:
            reply = bytes(self.stream.read_exact(32, _HANDSHAKE_TIMEOUT_S))
        except LaneError:
            self.stream.close()
            raise LaneError(f"{peer} refused the step lane handshake: the run's lane token does not match") from None
        if not hmac.compare_digest(reply, _proof(token, b"rollout", nonce)):
            self.stream.close()
            raise LaneError(f"{peer} did not prove it holds the run's lane token: not this run's rollout worker")

    def send(self, msg: EnvStep) -> None:
        self.stream.write(expect(msg, EnvStep, "step lane"), self.timeout_s)

    def actions(self) -> Actions:
        return expect(self.stream.read(self.timeout_s), Actions, "step lane")

    def close(self) -> None:
        self.stream.close()


class DirectRolloutEnd:
    """A rollout worker's direct lane: it listens on ``host``; each env worker connects once.

    A thread accepts connections and checks each handshake in a thread of its own, so env workers can connect
    before the rollout loop runs and a silent connection cannot hold up the others; the loop's ``receive``
    reads every stream with a message waiting."""

    def __init__(self, host: str, token: bytes, timeout_s: float):
        self.token, self.timeout_s = token, timeout_s
        self.listener = socket.create_server((host, 0))
        self.address = LaneAddress(host, self.listener.getsockname()[1])
        self.selector = selectors.DefaultSelector()
        self.streams: dict[int, _Stream] = {}
        self.closed: list[str] = []  # why env workers' streams ended (for diagnostics)
        self.refused = 0  # connections that failed the handshake
        self._new: list[tuple[int, _Stream]] = []
        self._lock = threading.Lock()
        self._stopping = False
        self._handshakes = threading.BoundedSemaphore(_MAX_HANDSHAKES)
        self._acceptor = threading.Thread(target=self._accept, daemon=True, name="lane-accept")
        self._acceptor.start()

    def _accept(self) -> None:
        self.listener.settimeout(0.5)
        while not self._stopping:
            try:
                sock, where = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            if not self._handshakes.acquire(blocking=False):
                sock.close()
                with self._lock:
                    self.refused += 1
                continue
            threading.Thread(target=self._join, args=(sock, f"{where[0]}:{where[1]}"), daemon=True,
                             name="lane-handshake").start()

    def _join(self, sock: socket.socket, where: str) -> None:
        try:
            joined = self._handshake(sock, where)
        finally:
            self._handshakes.release()
        with self._lock:
            if joined is None:
                self.refused += 1
            else:
                self._new.append(joined)

    def _handshake(self, sock: socket.socket, where: str) -> tuple[int, _Stream] | None:
        stream = _Stream(sock, f"env worker at {where}")
        try:
            magic, rank, nonce, proof = _HELLO.unpack(bytes(stream.read_exact(_HELLO.size, _HANDSHAKE_TIMEOUT_S)))
        except LaneError:
            stream.close()
            return None
        if magic != _MAGIC or not hmac.compare_digest(proof, _proof(self.token, magic, struct.pack("!I", rank), nonce)):
            stream.close()
            return None
        try:
            sock.sendall(_proof(self.token, b"rollout", nonce))
        except OSError:
            stream.close()
            return None
        stream.peer = f"env worker {rank} at {where}"
        return rank, stream

    def _register_new(self) -> None:
        with self._lock:
            new, self._new = self._new, []
        for rank, stream in new:
            old = self.streams.pop(rank, None)
            if old is not None:  # the same env rank connected again: the new stream replaces it
                self.selector.unregister(old.sock)
                old.close()
            self.streams[rank] = stream
            self.selector.register(stream.sock, selectors.EVENT_READ, rank)

    def receive(self, timeout: float) -> list[EnvStep]:
        self._register_new()
        msgs = []
        for key, _ in self.selector.select(timeout):
            stream = self.streams[key.data]
            try:
                msgs.append(expect(stream.read(self.timeout_s), EnvStep, "step lane"))
            except LaneError as e:  # that env worker stopped or died; the controller's poll reports it
                self._drop(key.data, str(e))
        return msgs

    def answer(self, env: int, actions: Actions) -> None:
        stream = self.streams.get(env)
        if stream is None:
            raise LaneError(f"env worker {env} has no step lane to this rollout worker (it closed: {self.closed})")
        stream.write(actions, self.timeout_s)

    def _drop(self, rank: int, why: str) -> None:
        stream = self.streams.pop(rank)
        self.selector.unregister(stream.sock)
        stream.close()
        self.closed.append(why)

    def close(self) -> None:
        self._stopping = True
        self.listener.close()
        for rank in list(self.streams):
            self._drop(rank, "closed by the rollout worker")
        self._acceptor.join(timeout=2)


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
