"""A rehearsal on the pipeline: a simulated arm that keeps a real arm's time (``env.pace: real_time``) and a
simulator judge whose verdict reaches the controller only (`JudgeReport`), never what the learner reads.

The env worker is driven without Ray (its episode loop on the mock simulator, as in test_episode_loop), its
lane replaced by one that puts every `EnvStep` through the step lane's wire codec, so the assertions are on
the messages a rollout worker or a learner would receive. Time is the test's (`FakeClock`) wherever a step is
paced.
"""

from __future__ import annotations

import dataclasses
import threading

import numpy as np
import pytest

from rlhw.config import load_config_dict
from rlhw.errors import ConfigError
from rlhw.rl.pipeline.controller import Controller
from rlhw.rl.pipeline.env_worker import EnvWorker
from rlhw.rl.pipeline.launch import PipelineFailure, check_layout
from rlhw.rl.pipeline.messages import Actions, EnvProgress, EnvStep, JudgeReport, pack, unpack
from rlhw.rl.verdicts import VerdictTally
from rlhw.robot import make_env
from tests.placed_arm import placed_arm
from tests.rl.test_utd_gate import Running
from tests.robot.fake_clock import FakeClock
from tests.vision.test_classifier_env import constant_classifier
from tests.waiting import wait_until

pytestmark = pytest.mark.timeout(120)

CLUSTER = {
    "num_nodes": 1,
    "node_groups": [],
    "component_placement": {"env,rollout,learner": {"node_group": "node", "placement": "0"}},
}


def rehearsal_config(tmp_path, *overrides: str, classifier_logit: float = 3.0):
    """The mock simulator rehearsing a cell (env.sim_state: hidden) whose reward is a success classifier that
    always says success (``classifier_logit`` 3): the judge, reading the simulator, never sees one."""
    fooled = constant_classifier(tmp_path / "always.pt", classifier_logit)
    env = {
        "sim": "mock",
        "sim_state": "hidden",
        "max_episode_steps": 5,
        "images": True,
        "image_size": [32, 32],
        "sim_cameras": ["front"],
        "reward": {"classifier": fooled, "decides": "success_and_reward", "terminate_on_success": False},
    }
    raw = {"cluster": CLUSTER, "env": env, "train": {"progress": False, "runner": "pipeline"}}
    return load_config_dict(raw, overrides=list(overrides))


class WireLane:
    """The env worker's step lane as the wire sees it: each `EnvStep` packed by the lane's codec and unpacked
    as its receiver would (``received``); every instance that asked gets a zero action."""

    def __init__(self, action_shape):
        self.received: list[EnvStep] = []
        self.action_shape = action_shape
        self._wanted = 0

    def send(self, msg: EnvStep) -> None:
        buf, header_len, payload_len = pack(msg)
        self.received.append(unpack(buf, 0, header_len, payload_len, EnvStep))
        self._wanted = msg.wanted

    def actions(self) -> Actions:
        k = self._wanted
        return Actions(np.zeros((k, *self.action_shape), np.float32), np.full(k, 7, np.int64))

    def close(self) -> None:
        pass


def worker_on_the_wire(config, tmp_path) -> EnvWorker:
    w = EnvWorker.detached(config, str(tmp_path / "run"))
    w.attach_lane(WireLane(w.spec().action.shape))
    return w


def test_the_judges_verdict_reaches_the_controller_and_nothing_the_learner_reads(tmp_path):
    """The classifier says success at every step (reward 1), the judge never: the messages on the lane carry the
    classifier's reward and the env's done flags, no field of the judge; the judge's verdicts go to the
    controller in the poll's `JudgeReport`, and the eval episode's success is the judge's."""
    w = worker_on_the_wire(rehearsal_config(tmp_path), tmp_path)
    try:
        w.collect(10)
        w.run_episodes()  # two 5-step train episodes
        w.run_episodes()
        w.evaluate(1)
        w.run_episodes()
        progress = w.poll()
    finally:
        w.env.close()

    sent = w.lane.received
    transitions = [m.transitions for m in sent if m.transitions is not None]
    assert sum(len(t["reward"]) for t in transitions) == 10
    for t in transitions:  # exactly the replay buffer's fields: observations, action, reward, done, intervened
        assert {k for k in t if not k.startswith(("obs/", "next_obs/"))} == {
            "action",
            "reward",
            "terminated",
            "intervened",
        }
        assert (t["reward"] == 1.0).all()  # the classifier's reward, though the judge saw no success
    for m in sent:
        names = [*(m.obs or {}), *(m.transitions or {})]
        assert names and not any("judge" in name for name in names)
    assert {f.name for f in dataclasses.fields(EnvStep)} == {"env", "obs", "rows", "evaluating", "transitions"}

    judge = progress.judge
    assert isinstance(judge, JudgeReport)
    assert judge.steps == 15 and judge.eval_episodes == 1
    assert judge.verdicts.steps == 10 and judge.verdicts.false_positives == 10  # train steps only
    assert [r[1] for r in progress.episodes] == [False, False]  # an episode's success is the judge's verdict
    assert [r[1] for r in progress.eval_results] == [False]
    assert w.poll().judge == JudgeReport(0, 0, VerdictTally())  # handed over once


def test_an_eval_episode_ending_after_a_poll_took_its_steps_is_still_counted_as_judged(tmp_path):
    """The controller polls while the loop runs: a poll between an episode's last step and its report must not
    lose the judge's claim on the episode."""
    w = worker_on_the_wire(rehearsal_config(tmp_path), tmp_path)
    polls, stepped = [], w.hooks.stepped

    def poll_after_each_step(step):
        stepped(step)
        polls.append(w.poll())

    w.hooks.stepped = poll_after_each_step
    try:
        w.evaluate(2)
        w.run_episodes()
        w.run_episodes()
        polls.append(w.poll())
    finally:
        w.env.close()
    assert sum(len(p.eval_results) for p in polls) == 2
    assert sum(p.judge.eval_episodes for p in polls) == 2 and sum(p.judge.steps for p in polls) == 10


def test_a_real_arm_has_no_judge_and_its_progress_no_judge_report(tmp_path):
    config = load_config_dict({"cluster": CLUSTER, "env": {"sim": "mock", "max_episode_steps": 3}})
    w = worker_on_the_wire(config, tmp_path)
    w.env.realtime = True  # the mock arm flagged as real: no simulator judges it
    w.env.clock = FakeClock()
    try:
        w.collect(3)
        w.run_episodes()
        progress = w.poll()
    finally:
        w.env.close()
    assert progress.train_steps == 3 and progress.judge is None


class Pipe:
    """What the controller reads of a pipeline, without Ray: the env workers' polls, in order."""

    class Envs:
        """One env worker's answers; the cell bookkeeping the controller asks of its fleet, for one cell."""

        addresses = ["env:0"]
        live = [0]

        def __init__(self, polls):
            self.polls, self.wanted, self.received = polls, 0, 0

        def evaluate(self, n):
            return Ready(None)

        def poll(self):
            return Ready([self.polls.pop(0)])

        def absorb(self, res):
            self.received += len(res.eval_results)

        def drop(self, rank, reason):
            return False

        def start_eval(self, per_cell):
            self.wanted, self.received = per_cell, 0

        def eval_done(self):
            return self.received >= self.wanted

    def __init__(self, polls):
        self.envs = self.Envs(polls)
        self.n_env = 1
        self.resumed = None

    def poll_envs(self):
        return self.envs.poll().wait(1)


class Ready:
    def __init__(self, value):
        self.value = value

    def wait(self, timeout):
        return self.value


def progress(eval_results=(), judge=None, train_steps=0) -> EnvProgress:
    return EnvProgress(0, train_steps, False, "episode", 0, 0, eval_results=list(eval_results), judge=judge)


def verdicts(false_positives: int, steps: int) -> VerdictTally:
    tally = VerdictTally()
    for i in range(steps):
        tally.add(i < false_positives, False, i < false_positives)
    return tally


def test_the_controller_logs_the_judged_eval_with_the_classifiers_disagreements_since_the_last_eval(tmp_path):
    from rlhw.rl.rundir import RunDir

    config = rehearsal_config(tmp_path, "train.mode=sync", "train.eval_episodes=2")
    pipe = Pipe(
        [
            progress(judge=JudgeReport(6, 0, verdicts(2, 6)), train_steps=6),  # train steps, before the eval
            progress([(1.0, True, 5, 0)], JudgeReport(5, 1, verdicts(1, 4)), 6),
            progress([(0.0, False, 5, 0)], JudgeReport(5, 1, VerdictTally()), 6),
        ]
    )
    run = RunDir(tmp_path / "run")
    controller = Controller(config, run, pipe)
    controller.absorb(pipe.poll_envs())
    controller.evaluate()
    [row] = [r for r in run.metrics() if "eval/success_rate" in r]
    assert row["eval/success_rate"] == 0.5 and row["eval/judged_episodes"] == 2
    assert row["reward/classifier_steps"] == 10 and row["reward/classifier_false_positives"] == 3


def test_a_rehearsal_eval_that_no_judge_saw_stops_the_run_rather_than_log_the_classifier_as_truth(tmp_path):
    from rlhw.rl.rundir import RunDir

    config = rehearsal_config(tmp_path, "train.mode=sync", "train.eval_episodes=1")
    pipe = Pipe([progress([(1.0, True, 5, 0)])])  # success, by whoever measured it; no judge report
    controller = Controller(config, RunDir(tmp_path / "run"), pipe)
    with pytest.raises(PipelineFailure, match="no simulator judge reported"):
        controller.evaluate()


def test_the_pipeline_takes_a_rehearsal_and_refuses_one_whose_batch_has_no_judge(tmp_path):
    config = rehearsal_config(tmp_path)
    assert config.train.runner == "pipeline" and config.env.sim_state == "hidden"
    with pytest.raises(ConfigError, match="env.num_envs"):
        rehearsal_config(tmp_path, "env.num_envs=2")


def test_a_rehearsal_of_an_arm_the_placement_serves_is_refused_before_any_worker_starts(tmp_path):
    """A placed arm runs behind a server child, which does not carry the judge's verdict: the run would stop at
    its first eval, so it is refused at the start, naming the field and the layout that works."""
    raw = placed_arm({"env": {"sim_state": "hidden", "task": "push_cube", "images": True, "sim_cameras": ["front"]}})
    raw["env"]["reward"] = {"classifier": constant_classifier(tmp_path / "c.pt", 3.0)}
    with pytest.raises(ConfigError, match=r"env\.sim_state.*server child.*node group without arm hardware"):
        check_layout(load_config_dict(raw))
    check_layout(rehearsal_config(tmp_path))  # a simulator the placement gives no arm: in process, judged


# ---------------------------------------------------------------------------------------- real time in sim


def paced_env(*overrides: str, clock: FakeClock):
    config = load_config_dict(
        {"cluster": CLUSTER, "env": {"sim": "mock", "control_hz": 10, "max_episode_steps": 50}},
        overrides=list(overrides),
    )
    env = make_env(config)
    env.clock = clock
    return env


def test_a_simulator_keeping_real_time_sleeps_to_each_deadline_and_reports_lateness_as_a_real_arm():
    clock = FakeClock(100.0)
    env = paced_env("env.pace=real_time", clock=clock)
    try:
        assert env.paced and not env.realtime
        env.reset(seed=0)
        start = clock.now()
        action = np.zeros(env.spec.action.shape, np.float32)
        steps = [env.step(action) for _ in range(3)]
        assert [round(t - start, 9) for t in clock.wakeups[-3:]] == [0.1, 0.2, 0.3]  # one period each
        assert all(s.timing["late"] == 0.0 for s in steps)
        clock.advance(0.25)  # a policy that answered 250 ms late: the step is late, and the loop resynchronises
        late = env.step(action)
        assert late.timing["late"] == pytest.approx(0.15) and late.timing["obs_age"] == pytest.approx(0.25)
        env.step(action)
        assert clock.wakeups[-1] == pytest.approx(start + 0.55 + 0.1)  # the next period from the late step's end
        assert late.judge_success is not None  # still a simulator: its judge reports, apart
    finally:
        env.close()


def test_a_free_simulator_never_sleeps_and_reports_no_observation_age():
    clock = FakeClock()
    env = paced_env(clock=clock)
    try:
        assert not env.paced
        env.reset(seed=0)
        step = env.step(np.zeros(env.spec.action.shape, np.float32))
        assert clock.now() == 0.0 and "obs_age" not in step.timing and "late" not in step.timing  # no deadline
    finally:
        env.close()


def test_a_simulator_keeping_real_time_waits_for_the_learner_only_between_episodes(tmp_path):
    """As a real arm: the UTD gate never holds it inside an episode (tests/rl/test_utd_gate.py drives the gate)."""
    config = load_config_dict(
        {"cluster": CLUSTER, "env": {"sim": "mock", "max_episode_steps": 5, "pace": "real_time"}},
        overrides=["train.progress=false"],
    )
    w = worker_on_the_wire(config, tmp_path)
    w.env.clock = FakeClock()
    try:
        assert w.transport.kind == "in_process" and w.env.paced and not w.transport.wait_inside
        held = []
        # the gate may only be asked between episodes
        w.work.gate.wait = lambda collected, stopping: held.append(collected)
        w.allow(2)
        w.run_async()
        w.run_episodes()
        assert held == [] and w.work.train_steps == 5  # the whole episode ran past its allowance of 2
        assert w.wait_for_work() and held == [5]
        health = w.loop_health()
        assert health["timed_steps"] == 5 and health["late_steps"] == 0 and health["obs_age_p99_ms"] is not None
    finally:
        w.env.close()


def test_an_env_in_process_is_opened_by_the_loop_thread_so_its_driver_threads_inherit_the_loops_priority(tmp_path):
    """The loop runs at ``loop_priority``; a thread a driver starts (a simulated camera's render thread) inherits
    the scheduling of the thread that opens the env, so that must be the loop thread."""
    config = load_config_dict({"cluster": CLUSTER, "env": {"sim": "mock", "max_episode_steps": 2}})
    w = worker_on_the_wire(config, tmp_path)
    opened_on, connect = [], w.env.connect

    def connect_noting_the_thread():
        opened_on.append(threading.current_thread())
        connect()

    w.env.connect = connect_noting_the_thread
    assert not w.env.connected  # built, not opened
    w.collect(2)
    run = Running(w)
    try:
        assert wait_until(lambda: w.work.train_steps == 2 and w.work.status == "idle", timeout_s=30)
    finally:
        run.stop()
        w.env.close()
    assert opened_on == [run.thread]
