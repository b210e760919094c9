"""Async mode holds ``train.utd_ratio``: env workers wait for the learner (rlhw.rl.utd_gate).

A simulator waits before its next step; a real arm, or a simulated one that a person drives, waits only
between episodes. The env worker is driven without Ray here (its loop thread on the mock simulator, the
rollout worker's lanes replaced as in test_episode_loop); the full pipeline's achieved UTD is checked in
test_pipeline.py.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from rlhw.config.env import TeleopConfig
from rlhw.rl.utd_gate import UtdGate, step_allowance
from rlhw.robot.takeover import Takeover
from rlhw.robot.teleop import Operator, TeleopDevice, TeleopReading
from tests.rl.test_episode_loop import _worker
from tests.robot.fake_clock import FakeClock
from tests.waiting import wait_until


def test_the_allowance_is_the_steps_the_updates_pay_for_plus_the_slack_shared_over_the_env_workers():
    assert step_allowance(0, 1.0, 500, 100, 0, 1) == 600  # before any update: warm-up plus the slack
    assert step_allowance(400, 0.5, 1000, 100, 0, 1) == 2000  # 500 updates at 0.5 per step pay for 1,000 steps
    assert step_allowance(400, 0.5, 1000, 100, 0, 3) == 667  # three robots share them (rounded up)
    assert step_allowance(400, 0.5, 1000, 100, 1500, 1) == 500  # a resumed run already collected 1,500
    assert step_allowance(0, 1.0, 0, 1, 5000, 1) == 0


def test_a_grant_never_takes_steps_back_and_a_wait_ends_at_a_grant_or_at_stop():
    cond = threading.Condition()
    gate = UtdGate(cond, clock=FakeClock())
    assert not gate.blocks(10**9)  # no grant yet: no gate (sync mode never grants)
    gate.allow(10)
    gate.allow(8)  # a grant computed from an older update count
    assert gate.allowance == 10 and gate.blocks(10) and not gate.blocks(9)
    with cond:
        assert gate.wait(9, lambda: False) is False and gate.waits == 0
    threading.Timer(0.05, gate.allow, (11,)).start()
    with cond:
        assert gate.wait(10, lambda: False) is True
    assert gate.waits == 1 and gate.allowance == 11
    with cond:
        assert gate.wait(11, lambda: True) is True  # stopping: never held


class Running:
    """The worker's loop thread, and a stop that wakes it wherever it waits."""

    def __init__(self, worker):
        self.w = worker
        self.thread = threading.Thread(target=worker.run_loop, daemon=True)
        self.thread.start()

    def stop(self):
        self.w.work.stop()
        self.thread.join(10)
        assert not self.thread.is_alive()
        assert self.w.error is None, self.w.error


def spy_on_waits(w) -> list[tuple[int, list[int]]]:
    """(train steps, instances in an episode) at every wait that held the loop."""
    seen, real = [], w.work.gate.wait

    def wait(collected, stopping):
        if w.work.gate.blocks(collected):
            seen.append((collected, list(w.episode_loop.book.rows())))
        return real(collected, stopping)

    w.work.gate.wait = wait
    return seen


def test_a_simulator_waits_for_the_learner_before_its_next_step_inside_an_episode(tmp_path):
    w = _worker(tmp_path)  # the mock simulator in process, 5-step episodes
    waits = spy_on_waits(w)
    assert w.transport.wait_inside
    w.allow(7)
    w.run_async()
    run = Running(w)
    try:
        assert wait_until(lambda: waits, timeout_s=10), "the loop never waited"
        assert waits == [(7, [0])]  # held mid-episode, before step 3 of the second episode
        assert w.work.train_steps == 7 and w.episode_loop.book.length[0] == 2
        w.allow(12)  # the learner caught up: it steps on to the new allowance and waits again
        assert wait_until(lambda: len(waits) == 2, timeout_s=10)
        assert waits[1] == (12, [0]) and w.work.train_steps == 12
    finally:
        run.stop()
        w.env.close()
    assert w.poll().utd_wait_s > 0


class Person(TeleopDevice):
    """A person at the device who does not touch it: the simulated arm is paced for them."""

    operator = Operator.HUMAN

    def open(self, timeout_s=5.0):
        pass

    def close(self):
        pass

    def read(self, timeout_s=0.05):
        return TeleopReading(np.zeros(6, np.float32), None, (), frozenset(), False, 0.0)


def a_real_arm(env):
    env.realtime = True  # the mock arm flagged as real: the env keeps real time (on the test's clock)


def a_person_at_the_simulated_arm(env):
    env.takeover = Takeover(Person(), TeleopConfig(device="keyboard"), env.spec.action.shape)


@pytest.mark.parametrize("flag", [a_real_arm, a_person_at_the_simulated_arm])
def test_a_real_arm_or_a_person_waits_for_the_learner_only_between_episodes(tmp_path, flag):
    w = _worker(tmp_path)
    w.env.clock = FakeClock()  # paced steps sleep on the test's time
    flag(w.env)
    assert w.env.paced and not w.transport.wait_inside
    waits = spy_on_waits(w)
    w.allow(7)
    w.run_async()
    run = Running(w)
    try:
        # The second episode starts with 5 of 7 steps used and runs to its end: 10 steps, then the arm waits.
        assert wait_until(lambda: waits, timeout_s=10), "the loop never waited"
        assert waits == [(10, [])] and w.work.status == "waiting"
        assert [length for _, _, length, _ in w.poll().episodes] == [5, 5]
        w.evaluate(1)  # an eval episode is not held back: it teaches the learner nothing
        assert wait_until(lambda: len(w.outbox.eval_results) == 1 and len(waits) == 2, timeout_s=10)
        assert waits[1] == (10, [])  # ...after which the arm waits again for the learner
        w.allow(11)
        assert wait_until(lambda: len(waits) == 3, timeout_s=10)
        assert waits[2] == (15, [])  # again a whole episode, then the wait
    finally:
        run.stop()
        w.env.close()
