"""One session controls the arm; others may look and stop it; a silent controller is stopped."""

from __future__ import annotations

import time

import numpy as np
import pytest

from rlhw.env.auth import session_fingerprint as fingerprint
from rlhw.env.client import ControlConflictError, RemoteEnv
from rlhw.env.fake_env import FakeEnv
from tests.waiting import wait_until

GOOD = np.zeros(7, np.float32)
ALICE, BOB, CAROL = ("alice-" + "a" * 32, "bob-" + "b" * 32, "carol-" + "c" * 32)  # session secrets


@pytest.mark.timeout(60)
@pytest.mark.parametrize("use_session", [True, False], ids=["session", "unary"])
def test_a_second_would_be_controller_gets_a_clear_failed_precondition(serve, clients, use_session):
    server = serve(FakeEnv())
    first = clients(RemoteEnv(server.address, session_secret=ALICE, use_session=use_session))
    second = clients(RemoteEnv(server.address, session_secret=BOB, use_session=use_session))
    first.reset()
    for call in (lambda: second.reset(), lambda: second.step(GOOD)):
        with pytest.raises(ControlConflictError) as err:
            call()
        msg = str(err.value)
        assert "arm is controlled by session " + fingerprint(ALICE) + " since" in msg and "Stop(release=true)" in msg
    first.step(GOOD)  # the controller is unaffected


@pytest.mark.timeout(60)
def test_observers_may_read_spec_and_status_while_another_session_controls(serve, clients):
    server = serve(FakeEnv())
    controller = clients(RemoteEnv(server.address, session_secret=ALICE))
    controller.reset()
    controller.step(GOOD)
    observer = clients(RemoteEnv(server.address, session_secret=CAROL))
    status = observer.status()
    assert status.controller == fingerprint(ALICE) and status.steps == 1 and status.resets == 1
    assert "validate" in status.timing and status.timing["env"].count == 1
    assert observer.action_space.shape == (7,)


@pytest.mark.timeout(60)
def test_stop_with_release_hands_control_to_the_next_session(serve, clients):
    env = FakeEnv()
    server = serve(env)
    alice = clients(RemoteEnv(server.address, session_secret=ALICE, use_session=False))
    bob = clients(RemoteEnv(server.address, session_secret=BOB))
    alice.reset()
    reply = bob.stop(release=True)  # anyone may stop the arm, only the holder may release
    assert reply.stopped and not reply.released and "held by " + fingerprint(ALICE) in reply.message
    assert env.events[-1] == "stop"
    with pytest.raises(ControlConflictError):
        bob.reset()
    reply = alice.stop(release=True)
    assert reply.released
    bob.reset()
    bob.step(GOOD)
    assert server.env_host.control.controller == fingerprint(BOB)


@pytest.mark.timeout(60)
def test_ending_the_session_stream_stops_the_arm_and_frees_control(serve, clients):
    env = FakeEnv()
    server = serve(env)
    alice = RemoteEnv(server.address, session_secret=ALICE)
    alice.reset()
    alice.step(GOOD)
    stops = env.stops
    alice.close()
    assert wait_until(lambda: server.env_host.control.controller == "")
    assert env.stops > stops
    bob = clients(RemoteEnv(server.address, session_secret=BOB))
    bob.reset()


@pytest.mark.timeout(60)
def test_watchdog_stops_the_arm_and_releases_a_silent_controller(serve, clients):
    env = FakeEnv()
    server = serve(env, watchdog_s=0.3)
    alice = clients(RemoteEnv(server.address, session_secret=ALICE))
    alice.reset()
    alice.step(GOOD)
    stops = env.stops
    t0 = time.monotonic()
    assert wait_until(lambda: server.env_host.control.controller == "", timeout_s=5)
    silent = time.monotonic() - t0
    assert silent >= 0.25  # not before watchdog_s of silence (less the time since the last step)
    assert env.stops == stops + 1
    status = alice.status()
    assert status.controller == "" and status.stopped
    assert any("watchdog" in f and fingerprint(ALICE) in f for f in status.faults)
    bob = clients(RemoteEnv(server.address, session_secret=BOB))
    bob.reset()  # control is free again


@pytest.mark.timeout(60)
def test_watchdog_does_not_fire_during_a_slow_call_by_the_controller(serve, clients):
    env = FakeEnv(reset_delay_s=0.8)
    server = serve(env, watchdog_s=0.3)
    alice = clients(RemoteEnv(server.address, session_secret=ALICE))
    alice.reset()  # takes longer than watchdog_s, but the controller is not silent: it is waiting
    assert env.stops == 0
    alice.step(GOOD)
    assert server.env_host.control.controller == fingerprint(ALICE)


@pytest.mark.timeout(60)
def test_a_step_running_past_its_limit_stops_the_arm_while_control_stays(serve, clients):
    env = FakeEnv(step_delay_s=1.0)  # a driver that hangs for a second
    server = serve(env, step_deadline_s=0.3, watchdog_s=5.0)
    alice = clients(RemoteEnv(server.address, session_secret=ALICE, timeout_s=5.0))
    alice.reset()
    alice.step(GOOD)  # answers after 1 s; the arm was stopped at ~0.3 s, while the step still ran
    assert env.events == ["reset", "stop"] and env.steps == 1  # silence (5 s) cannot have caused it
    status = alice.status()
    assert any("overrun" in f and fingerprint(ALICE) in f for f in status.faults)
    assert status.controller == fingerprint(ALICE)


@pytest.mark.timeout(60)
def test_a_stream_abandoned_after_a_timeout_does_not_stop_the_arm_under_its_successor(serve, clients):
    env = FakeEnv()
    server = serve(env, watchdog_s=10.0)
    alice = clients(RemoteEnv(server.address, session_secret=ALICE, timeout_s=0.3))
    alice.reset()
    env.step_delay_s = 1.0
    from rlhw.env.client import EnvTimeout

    with pytest.raises(EnvTimeout):
        alice.step(GOOD)  # the client gives up on this stream; the server is still in env.step
    env.step_delay_s = 0.0
    alice.timeout_s = 5.0
    alice.reset()  # a new stream, same session, while the old one drains
    # the old step finishes and its stream ends: only the new stream is left open
    assert wait_until(lambda: env.steps == 1 and server.native.gate.open_streams == 1)
    alice.step(GOOD)
    assert env.stops == 0 and server.env_host.control.controller == fingerprint(ALICE)
