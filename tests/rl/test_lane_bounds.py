"""One bad peer never stops a rollout worker (issue 36): bounded frames, authenticated ranks, joins that retry.

On loopback with real sockets, each test has one peer break a rule (a length injected into an established
stream by a relay without the token, a frame announced and sent slowly, a check that raises something odd, a
message for another env rank, a join pushed out by a flood or timed out) and asserts that only that peer was
dropped, as a `LaneError` naming it, and that the other env worker was still served. The last test runs the
rollout worker's own loop through all of them.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import tracemalloc

import numpy as np
import pytest

from rlhw.config.isolation import LoopIsolation
from rlhw.rl.pipeline import lane_frames
from rlhw.rl.pipeline.lane import DirectEnvEnd, DirectRolloutEnd, LaneAddress, LaneBusy, LaneError, join
from rlhw.rl.pipeline.lane_frames import PREFIX, FrameBound, env_step_bound, frame
from rlhw.rl.pipeline.lane_wire import BUSY, CHALLENGE, MAGIC, VERDICT
from rlhw.rl.pipeline.messages import Actions, EnvStep
from rlhw.rl.replay import transition_batch
from rlhw.robot.spec import EnvSpec, TensorSpec
from tests.rl.lane_peers import TOKEN
from tests.rl.test_lane_security import Relay, _catch, _connect, _served, _step, _until_dropped
from tests.waiting import wait_until

SPEC = EnvSpec(
    observations={"x": TensorSpec("x", "float32", (3,)), "wrist": TensorSpec("wrist", "uint8", (64, 64, 3))},
    action=TensorSpec("action", "float32", (7,), low=-1.0, high=1.0),
    control_hz=10.0,
)
MARK = 666.0  # an observation value only the misbehaving peer sends


@pytest.fixture
def rollout_end():
    end = DirectRolloutEnd("127.0.0.1", TOKEN, timeout_s=5.0, handshake_timeout_s=30.0, bound=env_step_bound(SPEC, 8))
    yield end
    end.close()


def _dropped_saying(end: DirectRolloutEnd, rank: int, text: str) -> bool:
    """Whether ``end`` dropped env worker ``rank`` with a `LaneError` naming it and saying ``text``."""
    return any(why.startswith(f"env worker {rank} at 127.0.0.1") and text in why for why in end.closed)


def _largest(k: int) -> EnvStep:
    """The largest message the spec allows with ``k`` instances: every one wants an action and brings a transition."""
    obs = {"x": np.ones((k, 3), np.float32), "wrist": np.ones((k, 64, 64, 3), np.uint8)}
    flags = np.zeros(k, np.float32)
    tr = transition_batch(obs, obs, np.zeros((k, 7), np.float32), flags, flags, flags)
    return EnvStep(env=0, obs=obs, rows=tuple(range(k)), evaluating=np.zeros(k, bool), transitions=tr)


# ---------------------------------------------------------------------------------------------- bounds


def test_the_bound_is_the_specs_largest_message_with_headroom_and_that_message_crosses_it(rollout_end, bystander):
    biggest = frame(_largest(8))
    bound = rollout_end.bound
    assert len(biggest) < bound.payload < 3 * len(biggest) and bound.header < 1 << 17  # megabytes, not 2 GiB
    env = DirectEnvEnd(rollout_end.address, TOKEN, env_rank=0, rollout_rank=0, timeout_s=5.0)
    try:
        env.send(_largest(8))
        (msg,) = wait_until(lambda: rollout_end.receive(timeout=0.05), 10.0)
        assert msg.obs["wrist"].shape == (8, 64, 64, 3) and msg.transitions["next_obs/wrist"].sum() == 8 * 64 * 64 * 3
        assert _served(rollout_end, bystander, 1, version=1)
    finally:
        env.close()


@pytest.mark.parametrize("over", ["header", "payload"])
def test_a_length_injected_into_an_established_stream_is_refused_at_once_naming_the_peer(rollout_end, bystander, over):
    relay = Relay(rollout_end.address)  # on the robot network, without the token
    env = DirectEnvEnd(relay.address, TOKEN, env_rank=0, rollout_rank=0, timeout_s=5.0)
    try:
        assert _served(rollout_end, env, 0, version=1)
        bound = rollout_end.bound
        lengths = (bound.header + 16, 16) if over == "header" else (16, bound.payload + 16)
        relay.up.sendall(PREFIX.pack(*lengths))
        assert rollout_end.receive(timeout=5.0) == [] and 0 not in rollout_end.streams  # the first read refuses it
        said = f"announced a frame of {lengths[0]} + {lengths[1]} bytes, over the {bound.header} + {bound.payload}"
        assert _dropped_saying(rollout_end, 0, f"{said} that this run's messages can take"), rollout_end.closed
        assert _served(rollout_end, bystander, 1, version=2)
    finally:
        env.close()
        relay.close()


def test_a_frame_sent_slowly_holds_neither_memory_nor_the_loop_and_is_dropped_after_the_step_bound():
    end = DirectRolloutEnd("127.0.0.1", TOKEN, timeout_s=1.0, bound=FrameBound(1 << 16, 1 << 30))  # 1 GiB allowed
    bystander = DirectEnvEnd(end.address, TOKEN, env_rank=1, rollout_rank=0, timeout_s=5.0)
    slow = DirectEnvEnd(end.address, TOKEN, env_rank=0, rollout_rank=0, timeout_s=5.0)
    tracemalloc.start()
    try:
        slow.stream.sock.sendall(PREFIX.pack(16, (1 << 30) - 48) + bytes(1024))  # 1 GiB in all; then nothing more
        assert wait_until(lambda: end.receive(timeout=0.05) == [] and end.streams[0].pending[0] == 16 + 1024)
        assert _served(end, bystander, 1, version=3)  # the loop was not held
        _, peak = tracemalloc.get_traced_memory()
        assert peak < 2 << 20, f"{peak} bytes allocated for a frame of which 1 KiB arrived"
        assert _until_dropped(end, 0) == []
        assert _dropped_saying(end, 0, f"sent 1040 of a frame's {1 << 30} bytes in 1 s"), end.closed
        assert _served(end, bystander, 1, version=4)
    finally:
        tracemalloc.stop()
        slow.close()
        bystander.close()
        end.close()


@pytest.mark.parametrize("error", [MemoryError, OverflowError, ValueError, KeyError])
def test_whatever_checking_a_peers_frame_raises_drops_that_peer_alone_as_a_lane_error(
    rollout_end, bystander, monkeypatch, error
):
    """What the AEAD library or numpy may raise on a peer's bytes (its `OverflowError` near 2^31, a `MemoryError`),
    raised here by the tag check of the one frame that carries MARK: nothing but a `LaneError` leaves ``poll``."""
    intact, mark = lane_frames.intact, np.float32(MARK).tobytes()

    def raising(aead, seq, buf):
        if mark in bytes(buf):
            raise error("raised on the peer's bytes")
        return intact(aead, seq, buf)

    monkeypatch.setattr(lane_frames, "intact", raising)
    env = DirectEnvEnd(rollout_end.address, TOKEN, env_rank=0, rollout_rank=0, timeout_s=5.0)
    try:
        env.send(_step(0, value=MARK))
        assert _until_dropped(rollout_end, 0) == []
        assert _dropped_saying(rollout_end, 0, f"could not be read ({error.__name__}"), rollout_end.closed
        assert _served(rollout_end, bystander, 1, version=5)
        with pytest.raises(LaneError, match="closed the step lane"):
            env.actions()
    finally:
        env.close()


# ---------------------------------------------------------------------------------------------- ranks


@pytest.mark.parametrize("claimed", [1, 99])
def test_a_message_for_another_env_rank_is_refused_and_only_its_connection_is_dropped(rollout_end, bystander, claimed):
    insider = DirectEnvEnd(rollout_end.address, TOKEN, env_rank=0, rollout_rank=0, timeout_s=5.0)  # holds the token
    try:
        insider.send(_step(claimed, value=MARK))  # its observation, to be answered to env worker `claimed`'s arm
        assert _until_dropped(rollout_end, 0) == []  # never delivered
        said = f"sent a message for env rank {claimed}: its connection proved rank 0"
        assert _dropped_saying(rollout_end, 0, said), rollout_end.closed
        assert sorted(rollout_end.streams) == [1] and _served(rollout_end, bystander, 1, version=6)
    finally:
        insider.close()


# ---------------------------------------------------------------------------------------------- joins


class HeldFirstHello:
    """A relay on loopback for any number of connections, of which the first one's bytes to the rollout end are
    held until ``release``: an env worker whose first hello is slow, and whose later tries are not."""

    def __init__(self, target: LaneAddress):
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.address = LaneAddress("127.0.0.1", self.listener.getsockname()[1])
        self.held = threading.Event()
        self.socks: list[socket.socket] = []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        first = True
        while True:
            try:
                down, _ = self.listener.accept()
            except OSError:
                return
            up = socket.create_connection((self.target.host, self.target.port))
            self.socks += [down, up]
            gate = self.held if first else None
            first = False
            threading.Thread(target=self._pump, args=(down, up, gate), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, down, None), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket, gate: threading.Event | None) -> None:
        try:
            while data := src.recv(65536):
                if gate is not None:
                    gate.wait(30)
                dst.sendall(data)
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    def close(self) -> None:
        self.held.set()
        for s in [self.listener, *self.socks]:
            s.close()


@pytest.mark.parametrize("refused_for", ["a flood", "a timeout"])
def test_a_join_refused_for_a_flood_or_a_timeout_is_tried_again_and_gets_in(refused_for, caplog):
    flood = refused_for == "a flood"
    end = DirectRolloutEnd("127.0.0.1", TOKEN, timeout_s=5.0, handshake_timeout_s=30.0 if flood else 0.3, max_pending=8)
    bystander = DirectEnvEnd(end.address, TOKEN, env_rank=1, rollout_rank=0, timeout_s=5.0)
    relay, joining, idle = HeldFirstHello(end.address), {}, []
    caplog.set_level(logging.WARNING, logger="rlhw.rl.pipeline.lane")
    t = threading.Thread(target=lambda: _catch(lambda: join(relay.address, TOKEN, 0, 0, 5.0, within_s=30.0), joining))
    t.start()
    try:
        assert wait_until(lambda: len(end.doorman.pending) == 1)  # its hello is held on the way
        if flood:
            idle = [_connect(end.address) for _ in range(8)]  # the ninth pending connection pushes it out
        t.join(30)
        env = joining["value"]
        try:
            assert _served(end, env, 0, version=7) and _served(end, bystander, 1, version=8)
        finally:
            env.close()
        why = "handshake not read: 8 connections pending" if flood else "no complete hello within 0.3 s"
        (tried,) = [r.getMessage() for r in caplog.records if "step lane join" in r.getMessage()]
        assert "env worker 0: step lane join, try 1 failed" in tried and why in tried, tried
    finally:
        for s in idle:
            s.close()
        relay.close()
        bystander.close()
        end.close()


def test_a_join_refused_for_good_is_not_tried_again(caplog):
    end = DirectRolloutEnd("127.0.0.1", TOKEN, timeout_s=5.0)
    caplog.set_level(logging.WARNING, logger="rlhw.rl.pipeline.lane")
    try:
        with pytest.raises(LaneError, match="proof does not match the run's lane token") as refused:
            join(end.address, b"x" * 32, 0, 0, 5.0, within_s=30.0)  # another run's token
        assert not isinstance(refused.value, LaneBusy) and wait_until(lambda: end.refused == 1)
        assert "step lane join" not in caplog.text
    finally:
        end.close()


def test_a_join_gives_up_at_its_start_timeout_saying_how_often_it_tried_and_why(caplog):
    """A rollout end that answers every hello "busy" (as under a flood that never ends), on an injected clock."""
    listener = socket.create_server(("127.0.0.1", 0))
    reason = b"handshake not read: 256 connections pending"

    def always_busy() -> None:
        while True:
            try:
                sock, _ = listener.accept()
            except OSError:
                return
            sock.sendall(CHALLENGE.pack(MAGIC, os.urandom(16)) + VERDICT.pack(BUSY, len(reason)) + reason)
            sock.close()

    threading.Thread(target=always_busy, daemon=True).start()
    now = [0.0]
    caplog.set_level(logging.WARNING, logger="rlhw.rl.pipeline.lane")
    try:
        with pytest.raises(LaneError, match=r"did not join its step lane in 10 tries within 5 s") as failed:
            join(
                LaneAddress("127.0.0.1", listener.getsockname()[1]),
                TOKEN,
                0,
                0,
                5.0,
                within_s=5.0,
                clock=lambda: now[0],
                sleep=lambda s: now.__setitem__(0, now[0] + s),  # 0.05, 0.1, ... 1, 1, 1, 0.45 s: a 10th try at 5 s
            )
        assert "256 connections pending" in str(failed.value)
        assert len([r for r in caplog.records if "step lane join, try" in r.getMessage()]) == 10
    finally:
        listener.close()


# ---------------------------------------------------------------------------------------------- the rollout loop


def test_the_rollout_workers_loop_serves_the_others_through_every_bad_peer():
    from tests.rl.test_vector_pipeline import _bare_rollout_worker  # its policy: x (2,) -> action (3,)

    w = _bare_rollout_worker(weights_version=-1)
    spec = EnvSpec({"x": TensorSpec("x", "float32", (2,))}, TensorSpec("action", "float32", (3,)), 10.0)
    w.lane = DirectRolloutEnd("127.0.0.1", TOKEN, timeout_s=1.0, bound=env_step_bound(spec, 1))
    w.isolation, w.stopping, w.error = LoopIsolation(), False, None
    loop = threading.Thread(target=w._loop, daemon=True)
    loop.start()
    bystander = DirectEnvEnd(w.lane.address, TOKEN, env_rank=1, rollout_rank=0, timeout_s=5.0)

    def bystander_served() -> bool:
        bystander.send(EnvStep(env=1, obs={"x": np.zeros((1, 2), np.float32)}, rows=(0,), evaluating=np.ones(1, bool)))
        return bystander.actions().actions.shape == (1, 3) and w.error is None

    bad = [DirectEnvEnd(w.lane.address, TOKEN, env_rank=r, rollout_rank=0, timeout_s=5.0) for r in (0, 2, 3)]
    try:
        assert bystander_served()
        bad[0].stream.sock.sendall(PREFIX.pack(16, 1 << 31))  # the 2 GiB announcement
        bad[1].send(EnvStep(env=1, obs={"x": np.ones((1, 2), np.float32)}, rows=(0,), evaluating=np.ones(1, bool)))
        bad[2].stream.sock.sendall(PREFIX.pack(16, 4096) + bytes(100))  # a frame begun, never finished
        assert wait_until(lambda: len(w.lane.closed) == 3, 10.0), w.lane.closed
        assert bystander_served() and w.error is None and loop.is_alive()
        w._serve([EnvStep(env=7, obs={"x": np.ones((1, 2), np.float32)}, rows=(0,), evaluating=np.ones(1, bool))])
        assert bystander_served()  # an answer to an env worker without a lane raised nothing out of the loop
    finally:
        w.stopping = True
        loop.join(10)
        for e in (bystander, *bad):
            e.close()
        w.lane.close()
        w.feeder.close()


def test_the_actions_an_env_worker_reads_are_bounded_by_its_spec(rollout_end):
    from rlhw.rl.pipeline.lane_frames import actions_bound

    env = DirectEnvEnd(
        rollout_end.address, TOKEN, env_rank=0, rollout_rank=0, timeout_s=5.0, bound=actions_bound(SPEC, 2)
    )
    try:
        env.send(_step(0))
        wait_until(lambda: rollout_end.receive(timeout=0.05), 10.0)
        rollout_end.answer(0, Actions(np.zeros((2, 7), np.float32), np.zeros(2, np.int64)))  # as large as it gets
        assert env.actions().actions.shape == (2, 7)
        env.send(_step(0))
        wait_until(lambda: rollout_end.receive(timeout=0.05), 10.0)
        rollout_end.answer(0, Actions(np.zeros((4096, 7), np.float32), np.zeros(4096, np.int64)))
        with pytest.raises(LaneError, match=r"rollout worker 0 at 127.0.0.1:\d+ announced a frame of"):
            env.actions()
    finally:
        env.close()
