"""The direct step lane between an env worker and its rollout worker (rlhw.rl.pipeline.lane), without Ray.

Real sockets on loopback; the peers that die are real processes killed with SIGKILL.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

from rlhw.rl.pipeline.lane import DirectEnvEnd, DirectRolloutEnd, LaneAddress, LaneError
from rlhw.rl.pipeline.messages import Actions, EnvStep, MessageTypeError
from tests.waiting import wait_until

TOKEN = b"t" * 32
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _step(env: int, k: int = 1, image: bool = False) -> EnvStep:
    obs = {"x": np.full((k, 3), env, np.float32)}
    if image:
        obs["wrist"] = np.full((k, 128, 128, 3), env, np.uint8)
    return EnvStep(env=env, obs=obs, rows=tuple(range(k)), evaluating=np.zeros(k, bool))


def _answer(k: int, version: int) -> Actions:
    return Actions(np.full((k, 7), 0.5, np.float32), np.full(k, version, np.int64))


def _receive_until(end: DirectRolloutEnd, count: int, timeout_s: float = 10.0) -> list[EnvStep]:
    got, deadline = [], time.monotonic() + timeout_s
    while len(got) < count and time.monotonic() < deadline:
        got += end.receive(timeout=0.2)
    return got


@pytest.fixture
def rollout_end():
    end = DirectRolloutEnd("127.0.0.1", TOKEN, timeout_s=5.0)
    yield end
    end.close()


def test_an_observation_reaches_the_rollout_worker_and_its_action_comes_back(rollout_end):
    env = DirectEnvEnd(rollout_end.address, TOKEN, env_rank=3, rollout_rank=0, timeout_s=5.0)
    try:
        env.send(_step(3, image=True))
        (msg,) = _receive_until(rollout_end, 1)
        assert msg.env == 3 and msg.obs["wrist"].shape == (1, 128, 128, 3) and msg.obs["wrist"][0, 5, 5, 0] == 3
        rollout_end.answer(3, _answer(1, version=42))
        got = env.actions()
        assert got.actions.shape == (1, 7) and got.versions.tolist() == [42]
    finally:
        env.close()


def test_several_env_workers_on_one_rollout_worker_are_served_in_one_batch_each_answered_on_its_own_lane(rollout_end):
    envs = [DirectEnvEnd(rollout_end.address, TOKEN, env_rank=r, rollout_rank=0, timeout_s=5.0) for r in range(3)]
    try:
        for r, e in enumerate(envs):
            e.send(_step(r, k=2))
        msgs = _receive_until(rollout_end, 3)
        assert sorted(m.env for m in msgs) == [0, 1, 2]
        for m in msgs:
            rollout_end.answer(m.env, _answer(2, version=m.env))
        assert [e.actions().versions.tolist() for e in envs] == [[0, 0], [1, 1], [2, 2]]
    finally:
        for e in envs:
            e.close()


def test_a_wrong_token_is_refused_before_anything_is_read_and_a_fake_rollout_worker_is_found_out(rollout_end):
    with pytest.raises(LaneError, match="refused the step lane handshake"):
        DirectEnvEnd(rollout_end.address, b"x" * 32, env_rank=0, rollout_rank=0, timeout_s=5.0)
    assert wait_until(lambda: rollout_end.refused == 1) and rollout_end.receive(timeout=0.1) == []
    impostor = DirectRolloutEnd("127.0.0.1", b"y" * 32, timeout_s=5.0)  # listens where the run said, other token
    try:
        with pytest.raises(LaneError):
            DirectEnvEnd(impostor.address, TOKEN, env_rank=0, rollout_rank=0, timeout_s=5.0)
    finally:
        impostor.close()


def test_a_silent_or_garbage_connection_does_not_keep_the_env_workers_out():
    # The silent connection's handshake may stay unfinished for 60 s: a doorman that waited for it would keep
    # the env worker out past its own handshake timeout.
    rollout_end = DirectRolloutEnd("127.0.0.1", TOKEN, timeout_s=5.0, handshake_timeout_s=60.0)
    silent = socket.create_connection((rollout_end.address.host, rollout_end.address.port))
    garbage = socket.create_connection((rollout_end.address.host, rollout_end.address.port))
    garbage.sendall(os.urandom(4096))
    try:
        env = DirectEnvEnd(rollout_end.address, TOKEN, env_rank=0, rollout_rank=0, timeout_s=5.0)
        assert rollout_end.refused <= 1  # joined while the silent connection still holds its handshake
        env.send(_step(0))
        assert [m.env for m in _receive_until(rollout_end, 1)] == [0]
        env.close()
    finally:
        silent.close()
        garbage.close()
        rollout_end.close()


def test_a_rollout_worker_that_does_not_answer_fails_the_step_after_the_step_timeout(rollout_end):
    env = DirectEnvEnd(rollout_end.address, TOKEN, env_rank=0, rollout_rank=0, timeout_s=0.3)
    try:
        env.send(_step(0))
        t0 = time.monotonic()
        with pytest.raises(LaneError, match="sent nothing for 0.3 s"):
            env.actions()
        assert 0.25 < time.monotonic() - t0 < 0.3 + 5.0  # waited its timeout, then gave up (room for load)
    finally:
        env.close()


def test_the_lane_carries_only_its_messages(rollout_end):
    env = DirectEnvEnd(rollout_end.address, TOKEN, env_rank=0, rollout_rank=0, timeout_s=5.0)
    try:
        with pytest.raises(MessageTypeError, match="step lane carries EnvStep"):
            env.send({"env": 0})
        env.send(_step(0))
        _receive_until(rollout_end, 1)
        untyped = (np.zeros((1, 7)), np.zeros(1))  # an (actions, versions) pair: the codec has no way to send it
        with pytest.raises(MessageTypeError, match="step lane carries Actions"):
            rollout_end.answer(0, untyped)
        with pytest.raises(
            MessageTypeError, match="carries EnvStep and Actions messages, but was given a builtins.tuple"
        ):
            rollout_end.streams[0].write(untyped, 1.0)
        rollout_end.streams[0].write(_step(9), 1.0)  # a well-formed message of the wrong kind
        with pytest.raises(
            LaneError,
            match="rollout worker 0 at .* sent a frame that does not decode "
            r"\(EnvStep where Actions was expected",
        ):
            env.actions()
    finally:
        env.close()


# ------------------------------------------------------------------------------- a peer process killed

_ROLLOUT_PROCESS = textwrap.dedent("""
    import sys, time
    from rlhw.rl.pipeline.lane import DirectRolloutEnd
    end = DirectRolloutEnd("127.0.0.1", b"t" * 32, timeout_s=5.0)
    print(end.address.port, flush=True)
    while True:
        end.receive(timeout=0.2)  # takes observations, never answers
""")

_ENV_PROCESS = textwrap.dedent("""
    import sys, time
    import numpy as np
    from rlhw.rl.pipeline.lane import DirectEnvEnd, LaneAddress
    from rlhw.rl.pipeline.messages import EnvStep
    env = DirectEnvEnd(LaneAddress("127.0.0.1", int(sys.argv[1])), b"t" * 32, 5, 0, 30.0)
    env.send(EnvStep(env=5, obs={"x": np.zeros((1, 3), np.float32)}, rows=(0,), evaluating=np.zeros(1, bool)))
    print("sent", flush=True)
    env.actions()
""")


def _python(script: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": ROOT},
    )


def test_a_killed_rollout_worker_is_reported_to_the_env_worker_at_once_not_after_the_step_timeout():
    proc = _python(_ROLLOUT_PROCESS)
    try:
        port = int(proc.stdout.readline())
        env = DirectEnvEnd(LaneAddress("127.0.0.1", port), TOKEN, env_rank=0, rollout_rank=0, timeout_s=30.0)
        env.send(_step(0))
        waiting: dict = {}
        t = threading.Thread(target=lambda: _catch(env.actions, waiting), daemon=True)
        t.start()
        proc.send_signal(signal.SIGKILL)
        t.join(10)  # well inside the 30 s step timeout: the closed lane, not the timeout, ended the wait
        assert not t.is_alive(), "the env worker still waits for a dead rollout worker"
        assert isinstance(waiting["error"], LaneError) and "closed the step lane" in str(waiting["error"])
        with pytest.raises(LaneError):
            env.send(_step(0))
    finally:
        proc.kill()
        proc.wait()


def test_a_killed_env_worker_leaves_the_rollout_worker_serving_the_others(rollout_end):
    proc = _python(_ENV_PROCESS, str(rollout_end.address.port))
    other = DirectEnvEnd(rollout_end.address, TOKEN, env_rank=1, rollout_rank=0, timeout_s=5.0)
    try:
        assert proc.stdout.readline().strip() == "sent"
        assert [m.env for m in _receive_until(rollout_end, 1)] == [5]
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert wait_until(lambda: rollout_end.receive(timeout=0.1) == [] and 5 not in rollout_end.streams)
        assert any("env worker 5" in why and "closed the step lane" in why for why in rollout_end.closed)
        with pytest.raises(LaneError, match="env worker 5 has no step lane"):
            rollout_end.answer(5, _answer(1, 0))
        other.send(_step(1))
        (msg,) = _receive_until(rollout_end, 1)
        rollout_end.answer(msg.env, _answer(1, 9))
        assert other.actions().versions.tolist() == [9]
    finally:
        other.close()
        proc.kill()


def _catch(fn, out: dict) -> None:
    try:
        out["value"] = fn()
    except BaseException as e:  # noqa: BLE001 - handed to the test
        out["error"] = e
