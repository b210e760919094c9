"""The direct step lane against a hostile peer on the robot network (rlhw.rl.pipeline.lane, lane_wire).

One test per attack of issue 28, on loopback with real sockets: a captured hello or answer replayed on a new
connection, a pickle from an impostor and from an authenticated peer, bytes injected into an authenticated
stream (through a man in the middle that forwards, records and injects), a flood of idle connections during a
join, and garbage frames. Each asserts that nothing the attacker sent was run or delivered, and that the
legitimate env workers still get their actions.
"""

from __future__ import annotations

import os
import pathlib
import pickle
import socket
import struct
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from rlhw.rl.pipeline.lane import DirectEnvEnd, DirectRolloutEnd, LaneAddress, LaneError
from rlhw.rl.pipeline.lane_frames import PREFIX, TAG
from rlhw.rl.pipeline.lane_wire import ACCEPT, BUSY, CHALLENGE, HELLO, MAGIC, REFUSE, VERDICT
from rlhw.rl.pipeline.messages import Actions, EnvStep, pack
from tests.rl.lane_peers import TOKEN
from tests.waiting import wait_until

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _step(env: int, value: float = 0.0) -> EnvStep:
    return EnvStep(env=env, obs={"x": np.full((1, 3), value, np.float32)}, rows=(0,), evaluating=np.zeros(1, bool))


def _receive_until(end: DirectRolloutEnd, count: int, timeout_s: float = 10.0) -> list[EnvStep]:
    got: list[EnvStep] = []
    wait_until(lambda: got.extend(end.receive(timeout=0.05)) or len(got) >= count, timeout_s)
    return got


def _until_dropped(end: DirectRolloutEnd, rank: int) -> list[EnvStep]:
    """Everything the rollout end received until it dropped env worker ``rank``'s stream (it must within 10 s)."""
    got: list[EnvStep] = []
    assert wait_until(lambda: got.extend(end.receive(timeout=0.05)) or rank not in end.streams, 10.0)
    return got


def _served(end: DirectRolloutEnd, env: DirectEnvEnd, rank: int, version: int) -> bool:
    """One full step for env worker ``rank``: its observation arrives, its actions come back."""
    env.send(_step(rank, value=version))
    (msg,) = _receive_until(end, 1)
    assert msg.env == rank and msg.obs["x"][0, 0] == version
    end.answer(rank, Actions(np.full((1, 7), 0.5, np.float32), np.full(1, version, np.int64)))
    return env.actions().versions.tolist() == [version]


def _connect(address: LaneAddress) -> socket.socket:
    return socket.create_connection((address.host, address.port), timeout=10.0)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n and (chunk := sock.recv(n - len(data))):
        data += chunk
    return data


def _refusal(sock: socket.socket, kind: int = REFUSE) -> str:
    """The reason the rollout end gives when it refuses the connection ``sock`` (whose challenge was read), for
    good (REFUSE) or for now (BUSY: the peer may try again)."""
    got, size = VERDICT.unpack(_recv_exact(sock, VERDICT.size))
    assert got == kind
    reason = _recv_exact(sock, size).decode()
    try:
        assert sock.recv(1) == b""  # then it closes the connection
    except ConnectionResetError:  # what the peer sent after its hello was never read
        pass
    return reason


class _Armed:
    """A pickle that touches ``marker`` when it is unpickled: what the issue's attacker ran with os.system."""

    def __init__(self, marker: pathlib.Path):
        self.marker = marker

    def __reduce__(self):
        return pathlib.Path.touch, (self.marker,)


def _armed_pickle(tmp_path: pathlib.Path) -> tuple[bytes, pathlib.Path]:
    """A live exploit (checked: unpickling it here does create its control marker) and the marker it will touch."""
    control = tmp_path / "control"
    pickle.loads(pickle.dumps(_Armed(control)))
    assert control.exists(), "the exploit is not armed: the test would prove nothing"
    marker = tmp_path / "ran"
    return pickle.dumps(_Armed(marker), protocol=5), marker


class Relay:
    """A man in the middle on loopback: one connection, forwarded both ways and recorded; a test can inject bytes
    into either direction, change the next chunk to the rollout end, or hold what goes to it."""

    def __init__(self, target: LaneAddress):
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = LaneAddress("127.0.0.1", self.listener.getsockname()[1])
        self.to_rollout, self.to_env = bytearray(), bytearray()
        self.forward = threading.Event()  # cleared: what the env sends waits here
        self.forward.set()
        self.tamper = None  # applied once, to the next chunk to the rollout end
        self.connected = threading.Event()
        self.up = self.down = None
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        self.down, _ = self.listener.accept()
        self.up = socket.create_connection((self.target.host, self.target.port))
        self.connected.set()
        threading.Thread(target=self._pump, args=(self.down, self.up, self.to_rollout, True), daemon=True).start()
        self._pump(self.up, self.down, self.to_env, False)

    def _pump(self, src: socket.socket, dst: socket.socket, record: bytearray, to_rollout: bool) -> None:
        try:
            while data := src.recv(65536):
                if to_rollout:
                    self.forward.wait(30)
                    if self.tamper is not None:
                        data, self.tamper = self.tamper(data), None
                record += data
                dst.sendall(data)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def frames_to_rollout(self) -> list[bytes]:
        """The frames the env end sent after its hello, as they crossed."""
        return _frames(bytes(self.to_rollout[HELLO.size :]))

    def frames_to_env(self) -> list[bytes]:
        return _frames(bytes(self.to_env[CHALLENGE.size + VERDICT.size + 32 :]))

    def close(self) -> None:
        for s in (self.listener, self.up, self.down):
            if s is not None:
                s.close()


def _frames(data: bytes) -> list[bytes]:
    out = []
    while data:
        header_len, payload_len = PREFIX.unpack_from(data)
        size = PREFIX.size + header_len + payload_len + TAG
        out.append(data[:size])
        data = data[size:]
    return out


def _frame(header: bytes, payload: bytes = b"") -> bytearray:
    """A frame around ``header`` and ``payload`` with room for its tag: what `SealedStream.send_sealed` seals."""
    return bytearray(PREFIX.pack(len(header), len(payload)) + header + payload + bytes(TAG))


@pytest.fixture
def rollout_end():
    end = DirectRolloutEnd("127.0.0.1", TOKEN, timeout_s=5.0, handshake_timeout_s=30.0)
    yield end
    end.close()


# ---------------------------------------------------------------------------------------------- replay


def test_a_captured_hello_replayed_on_a_new_connection_is_refused_and_nothing_after_it_is_read(
    rollout_end, bystander, tmp_path
):
    relay = Relay(rollout_end.address)
    env = DirectEnvEnd(relay.address, TOKEN, env_rank=0, rollout_rank=0, timeout_s=5.0)
    try:
        assert _served(rollout_end, env, 0, version=1)
        captured_hello, (captured_step,) = bytes(relay.to_rollout[: HELLO.size]), relay.frames_to_rollout()
        exploit, marker = _armed_pickle(tmp_path)
        attacker = _connect(rollout_end.address)
        _recv_exact(attacker, CHALLENGE.size)  # a fresh nonce the captured proof was not made over
        attacker.sendall(captured_hello + captured_step + struct.pack("!Q", len(exploit)) + exploit)
        assert "proof does not match the run's lane token" in _refusal(attacker)
        assert wait_until(lambda: rollout_end.refused == 1)
        assert rollout_end.receive(timeout=0.1) == [] and sorted(rollout_end.streams) == [0, 1]
        assert not marker.exists()
        assert _served(rollout_end, env, 0, version=2) and _served(rollout_end, bystander, 1, version=3)
    finally:
        env.close()
        relay.close()


def test_a_captured_answer_replayed_to_an_env_worker_does_not_pass_for_the_rollout_worker(rollout_end):
    relay = Relay(rollout_end.address)
    env = DirectEnvEnd(relay.address, TOKEN, env_rank=0, rollout_rank=0, timeout_s=5.0)
    env.close()
    captured = bytes(relay.to_env[: CHALLENGE.size + VERDICT.size + 32])  # challenge, accept and proof
    assert VERDICT.unpack_from(captured, CHALLENGE.size) == (ACCEPT, 32)
    fake = socket.create_server(("127.0.0.1", 0))  # listens where the run said the rollout worker is
    served = threading.Thread(target=lambda: fake.accept()[0].sendall(captured), daemon=True)
    served.start()
    try:
        with pytest.raises(LaneError, match="did not prove it holds the run's lane token"):
            DirectEnvEnd(LaneAddress("127.0.0.1", fake.getsockname()[1]), TOKEN, 0, 0, timeout_s=5.0)
    finally:
        served.join(10)
        fake.close()
        relay.close()


# ---------------------------------------------------------------------------------------------- pickles


def test_a_pickle_is_never_unpickled_not_even_in_a_frame_sealed_by_a_peer_that_holds_the_token(
    rollout_end, bystander, tmp_path
):
    exploit, marker = _armed_pickle(tmp_path)
    impostor = _connect(rollout_end.address)  # no token: a forged hello, then the pickle as the old lane framed it
    _recv_exact(impostor, CHALLENGE.size)
    impostor.sendall(HELLO.pack(MAGIC, 0, os.urandom(16), os.urandom(32)) + struct.pack("!Q", len(exploit)) + exploit)
    assert "proof does not match" in _refusal(impostor)
    insider = DirectEnvEnd(rollout_end.address, TOKEN, env_rank=0, rollout_rank=0, timeout_s=5.0)
    try:
        insider.stream.send_sealed(_frame(exploit + bytes(-len(exploit) % 16)), timeout=5.0)  # the pickle as a header
        assert _until_dropped(rollout_end, 0) == []  # nothing of it reached the policy
        assert any("env worker 0 at 127.0.0.1" in why and "does not decode" in why for why in rollout_end.closed)
        assert not marker.exists()
        assert _served(rollout_end, bystander, 1, version=4)
    finally:
        insider.close()


# ---------------------------------------------------------------------------------------------- injection


def _forged(relay: Relay) -> bytes:
    buf, header_len, payload_len = pack(_step(0, value=666.0), front=PREFIX.size, back=TAG)
    PREFIX.pack_into(buf, 0, header_len, payload_len)
    buf[-TAG:] = os.urandom(TAG)
    return bytes(buf)


def _flip_an_observation_byte(data: bytes) -> bytes:
    at = len(data) - TAG - 5  # the last byte of x[0, 2]: the payload ends with x (12 bytes) and 4 of padding
    return data[:at] + bytes([data[at] ^ 0x40]) + data[at + 1 :]


INJECTIONS = {
    "a forged frame": lambda relay: relay.up.sendall(_forged(relay)),
    "an earlier frame replayed": lambda relay: relay.up.sendall(relay.frames_to_rollout()[0]),
    "an observation changed on the way": lambda relay: setattr(relay, "tamper", _flip_an_observation_byte),
}


@pytest.mark.parametrize("injection", list(INJECTIONS))
def test_bytes_injected_into_an_authenticated_stream_are_refused_and_the_env_worker_can_join_again(
    rollout_end, bystander, injection
):
    relay = Relay(rollout_end.address)
    env = DirectEnvEnd(relay.address, TOKEN, env_rank=0, rollout_rank=0, timeout_s=5.0)
    try:
        assert _served(rollout_end, env, 0, version=1)
        INJECTIONS[injection](relay)
        if injection == "an observation changed on the way":
            env.send(_step(0, value=2.0))
        assert _until_dropped(rollout_end, 0) == []  # nothing of it reached the policy
        assert any(
            "env worker 0 at 127.0.0.1" in why and "fails its integrity check" in why for why in rollout_end.closed
        )
        with pytest.raises(LaneError, match="closed the step lane"):
            env.actions()
        assert _served(rollout_end, bystander, 1, version=5)
        again = DirectEnvEnd(rollout_end.address, TOKEN, env_rank=0, rollout_rank=0, timeout_s=5.0)
        try:
            assert _served(rollout_end, again, 0, version=6)
        finally:
            again.close()
    finally:
        env.close()
        relay.close()


def test_actions_replayed_to_an_env_worker_are_refused_before_they_reach_its_arm(rollout_end):
    relay = Relay(rollout_end.address)
    env = DirectEnvEnd(relay.address, TOKEN, env_rank=0, rollout_rank=0, timeout_s=5.0)
    try:
        assert _served(rollout_end, env, 0, version=1)
        env.send(_step(0))
        _receive_until(rollout_end, 1)
        relay.down.sendall(relay.frames_to_env()[0])  # the previous step's actions, before this step's answer
        with pytest.raises(LaneError, match="rollout worker 0 at 127.0.0.1:.* fails its integrity check"):
            env.actions()
    finally:
        env.close()
        relay.close()


# ---------------------------------------------------------------------------------------------- floods


def test_a_flood_of_64_idle_connections_does_not_keep_an_env_worker_out(rollout_end, bystander):
    flood = [_connect(rollout_end.address) for _ in range(64)]
    try:
        assert wait_until(lambda: len(rollout_end.doorman.pending) == 64)
        env = DirectEnvEnd(rollout_end.address, TOKEN, env_rank=0, rollout_rank=0, timeout_s=5.0)
        try:
            assert _served(rollout_end, env, 0, version=7) and _served(rollout_end, bystander, 1, version=8)
            assert len(rollout_end.doorman.pending) == 64 and rollout_end.refused == 0  # joined past them, unread
        finally:
            env.close()
    finally:
        for s in flood:
            s.close()


def test_past_its_bound_the_oldest_unfinished_handshake_is_refused_and_its_env_worker_is_told_why():
    end = DirectRolloutEnd("127.0.0.1", TOKEN, timeout_s=5.0, handshake_timeout_s=30.0, max_pending=8)
    relay = Relay(end.address)
    relay.forward.clear()  # the env worker's hello is held on a slow link
    joining: dict = {}
    t = threading.Thread(
        target=lambda: _catch(
            lambda: DirectEnvEnd(relay.address, TOKEN, env_rank=0, rollout_rank=0, timeout_s=5.0), joining
        )
    )
    t.start()
    flood = []
    try:
        assert wait_until(lambda: len(end.doorman.pending) == 1)
        flood = [_connect(end.address) for _ in range(8)]  # the ninth pending connection pushes the oldest out
        t.join(10)
        assert "handshake not read: 8 connections pending" in str(joining["error"])
        assert "refused the step lane handshake" in str(joining["error"])
        env = DirectEnvEnd(end.address, TOKEN, env_rank=0, rollout_rank=0, timeout_s=5.0)  # the newest gets in
        try:
            assert _served(end, env, 0, version=9)
        finally:
            env.close()
    finally:
        relay.forward.set()
        for s in flood:
            s.close()
        relay.close()
        end.close()


_ROLLOUT_WITH_FEW_DESCRIPTORS = textwrap.dedent("""
    import os, resource, sys
    import numpy as np
    from rlhw.rl.pipeline.lane import DirectRolloutEnd
    from rlhw.rl.pipeline.messages import Actions
    end = DirectRolloutEnd("127.0.0.1", b"t" * 32, timeout_s=5.0, handshake_timeout_s=30.0)
    free = 24  # descriptors left for connections: far fewer than the flood, and than max_pending
    resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + free, resource.getrlimit(
        resource.RLIMIT_NOFILE)[1]))
    print(end.address.port, flush=True)
    while True:
        for m in end.receive(timeout=0.2):
            end.answer(m.env, Actions(np.full((1, 7), 0.5, np.float32), np.full(1, 13, np.int64)))
""")


def test_a_flood_past_the_rollout_workers_file_descriptors_still_lets_an_env_worker_join():
    proc = subprocess.Popen(
        [sys.executable, "-c", _ROLLOUT_WITH_FEW_DESCRIPTORS],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
    )
    flood = []
    try:
        address = LaneAddress("127.0.0.1", int(proc.stdout.readline()))
        flood = [_connect(address) for _ in range(100)]
        _recv_exact(flood[0], CHALLENGE.size)  # the oldest was accepted, then pushed out for a newer one
        assert "connections pending and no file descriptors left" in _refusal(flood[0], BUSY)
        env = DirectEnvEnd(address, TOKEN, env_rank=0, rollout_rank=0, timeout_s=5.0)
        try:
            env.send(_step(0))
            assert env.actions().versions.tolist() == [13]
        finally:
            env.close()
    finally:
        for s in flood:
            s.close()
        proc.kill()
        proc.wait()


def test_a_connection_that_sends_no_hello_is_closed_after_the_handshake_bound_saying_so():
    end = DirectRolloutEnd("127.0.0.1", TOKEN, timeout_s=5.0, handshake_timeout_s=0.2)
    try:
        silent = _connect(end.address)
        _recv_exact(silent, CHALLENGE.size)
        assert "handshake not read: no complete hello within 0.2 s" in _refusal(silent, BUSY)
        assert wait_until(lambda: end.refused == 1) and not end.doorman.pending
    finally:
        end.close()


# ---------------------------------------------------------------------------------------------- garbage


def _valid_header() -> tuple[bytes, bytes]:
    buf, header_len, payload_len = pack(_step(0), front=0, back=0)
    return bytes(buf[:header_len]), bytes(buf[header_len:])


def _with(header: bytes, at: int, value: bytes) -> bytes:
    return header[:at] + value + header[at + len(value) :]


GARBAGE = {  # what a peer holding the token could seal: each must be refused as it is, never decoded further
    "an unknown message kind": lambda h, p: (_with(h, 0, b"\x09"), p),
    "an Actions header where an EnvStep is due": lambda h, p: (_with(h, 0, b"\x02"), p),
    "a dtype outside the lane's list": lambda h, p: (_with(h, 12 + 1, b"\xc8"), p),  # first array's dtype code
    "an array larger than the payload": lambda h, p: (_with(h, 12 + 4 + 4, struct.pack("<I", 1 << 30)), p),
    "a name that is not UTF-8": lambda h, p: (_with(h, 12 + 4, b"\xff"), p),
    "bytes left after the arrays": lambda h, p: (h + os.urandom(16), p),
    "a header cut short": lambda h, p: (h[:8] + bytes(8), p),
    "random bytes": lambda h, p: (os.urandom(64), os.urandom(256)),
}


@pytest.mark.parametrize("garbage", list(GARBAGE))
def test_a_garbage_frame_drops_only_its_sender_and_is_never_decoded(rollout_end, bystander, garbage):
    header, payload = GARBAGE[garbage](*_valid_header())
    env = DirectEnvEnd(rollout_end.address, TOKEN, env_rank=0, rollout_rank=0, timeout_s=5.0)
    try:
        env.stream.send_sealed(_frame(header, payload), timeout=5.0)
        assert _until_dropped(rollout_end, 0) == []  # nothing of it reached the policy
        assert any(
            why.startswith("env worker 0 at 127.0.0.1") and "does not decode" in why for why in rollout_end.closed
        ), rollout_end.closed
        assert _served(rollout_end, bystander, 1, version=10)
    finally:
        env.close()


def test_a_frame_announcing_more_than_the_lane_carries_is_refused_before_anything_is_allocated(rollout_end, bystander):
    env = DirectEnvEnd(rollout_end.address, TOKEN, env_rank=0, rollout_rank=0, timeout_s=5.0)
    try:
        env.stream.sock.sendall(PREFIX.pack(16, 1 << 40))  # unsealed: the lengths come first
        assert _until_dropped(rollout_end, 0) == []
        assert any("announced a frame of 16 + 1099511627776 bytes" in why for why in rollout_end.closed)
        assert _served(rollout_end, bystander, 1, version=11)
    finally:
        env.close()


def test_garbage_before_the_handshake_is_refused_and_the_env_workers_still_join(rollout_end):
    garbage = _connect(rollout_end.address)
    garbage.sendall(os.urandom(HELLO.size))
    _recv_exact(garbage, CHALLENGE.size)
    assert "not an rlhw step lane hello" in _refusal(garbage)
    env = DirectEnvEnd(rollout_end.address, TOKEN, env_rank=0, rollout_rank=0, timeout_s=5.0)
    try:
        assert _served(rollout_end, env, 0, version=12) and rollout_end.refused == 1
    finally:
        env.close()


def _catch(fn, out: dict) -> None:
    try:
        out["value"] = fn()
    except BaseException as e:  # noqa: BLE001 - handed to the test
        out["error"] = e
