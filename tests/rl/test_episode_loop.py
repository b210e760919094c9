"""The one episode loop (`rlhw.rl.episode_loop`): what it does with one env instance and with a batch of n.

No Ray, no server and no sleeps: a point-mass env and the fake env stand in for arms, a function for the policy.
The env worker's part (its hooks, its in-process transport) is driven through `EnvWorker.detached` and
`run_episodes`, its step lane the test's.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from rlhw.config import load_config, load_config_dict
from rlhw.env.client import EnvServiceError
from rlhw.env.fake_env import FakeEnv
from rlhw.errors import FaultKind, SafetyViolation
from rlhw.rl import episode_loop
from rlhw.rl.env_transport import env_transport
from rlhw.rl.episode_loop import BatchView, EpisodeLoop, LoopHooks
from rlhw.rl.episodes import EpisodeRecorder, episode_files, load_episode
from rlhw.rl.instances import EVAL, IDLE, TRAIN
from rlhw.rl.pipeline.env_worker import EnvWorker
from rlhw.rl.pipeline.messages import Actions
from rlhw.robot.step import Step
from tests.rl.point_env import PointReachEnv, TakeoverPointEnv

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = {
    "num_nodes": 1,
    "node_groups": [],
    "component_placement": {"env,rollout,learner": {"node_group": "node", "placement": "0"}},
}


class Counting:
    """Counts an env's resets and steps (the loop must not reset an arm nobody asked to move)."""

    def __init__(self, env):
        self.env, self.spec, self.resets, self.steps = env, env.spec, 0, 0

    def reset(self, seed=None):
        self.resets += 1
        return self.env.reset(seed=seed)

    def step(self, action) -> Step:
        self.steps += 1
        step = self.env.step(action)
        return replace(step, obs={k: np.array(v) for k, v in step.obs.items()})  # FakeEnv's arrays are reused


class Demand:
    """What a controller asks for: eval episodes, a train budget (counted by the sink), as the env worker keeps it."""

    def __init__(self, action_dim: int, budget=0, eval_pending=0, unlimited=False):
        self.action_dim = action_dim
        self.budget, self.eval_pending, self.unlimited = budget, eval_pending, unlimited
        self.reports, self.transitions, self.acted = [], [], []

    def hooks(self, action_value=0.5, version=7, **extra) -> LoopHooks:
        def act(obs, rows, evaluating):
            self.acted.append((list(rows), evaluating.tolist()))
            k = len(rows)
            return np.full((k, self.action_dim), action_value, np.float32), np.full(k, version, np.int64)

        def report(kind, result):
            self.eval_pending -= kind == EVAL
            self.reports.append((kind, result))

        def sink(batch):
            self.budget -= len(batch["reward"])
            self.transitions.append(batch)

        return LoopHooks(
            act=act,
            choose=lambda book: book.choose(self.budget, self.unlimited, self.eval_pending),
            report=report,
            sink=sink,
            **extra,
        )


def _meta(path) -> dict:
    return dict(load_episode(path).meta)


def _point_loop(tmp_path, env=None):
    env = Counting(env or PointReachEnv(seed=0))
    recorder = EpisodeRecorder(tmp_path / "env0")
    return env, EpisodeLoop(BatchView(env), 25, [recorder])


# ------------------------------------------------------------------------------------ one instance (a real arm)


def test_one_instance_runs_one_episode_then_returns_without_resetting_again(tmp_path):
    env, loop = _point_loop(tmp_path)
    demand = Demand(2, unlimited=True)
    loop.run(demand.hooks(), seed=3)
    assert env.resets == 1 and env.steps == 25  # the episode's end returns: the next reset waits for the caller
    [(kind, (ret, success, length, interventions))] = demand.reports
    assert kind == TRAIN and length == 25 and interventions == 0 and ret < 0
    assert sum(len(b["reward"]) for b in demand.transitions) == 25
    assert loop.book.all_idle()


def test_an_instance_chosen_idle_is_never_stepped(tmp_path):
    env, loop = _point_loop(tmp_path)
    demand = Demand(2)  # nothing wanted
    loop.run(demand.hooks(), seed=0)
    assert env.steps == 0 and demand.reports == [] and not episode_files(tmp_path)


def test_each_recorded_step_is_what_the_arm_executed_with_the_intervened_flag_and_the_acting_version(tmp_path):
    env, loop = _point_loop(tmp_path, TakeoverPointEnv(every=3, seed=0))
    demand = Demand(2, unlimited=True)
    loop.run(demand.hooks(action_value=0.5, version=7), seed=0)
    ep = load_episode(episode_files(tmp_path)[0])
    operator = np.arange(25) % 3 == 0
    np.testing.assert_array_equal(ep.intervened, operator)
    np.testing.assert_array_equal(ep.policy_version, np.where(operator, -1, 7))  # -1: an operator acted
    assert np.all(ep.action[~operator] == 0.5) and not np.all(ep.action[operator] == 0.5)
    sunk = np.concatenate([b["action"] for b in demand.transitions])
    np.testing.assert_array_equal(sunk, ep.action)  # the learner gets the executed actions too
    assert demand.reports[0][1][3] == operator.sum()


def test_an_eval_episode_asks_the_policy_for_eval_actions_and_hands_no_transitions_on(tmp_path):
    env, loop = _point_loop(tmp_path)
    demand = Demand(2, eval_pending=1)
    loop.run(demand.hooks(), seed=0)
    assert demand.reports[0][0] == EVAL and demand.eval_pending == 0
    assert all(flags == [True] for _, flags in demand.acted) and demand.transitions == []
    assert [p.name for p in episode_files(tmp_path, "eval")] == ["eval-000000.npz"]


def test_stopping_ends_the_running_episode_where_it_is_and_reports_it(tmp_path):
    env, loop = _point_loop(tmp_path)
    demand = Demand(2, unlimited=True)
    loop.run(demand.hooks(stopping=lambda: env.steps >= 5), seed=0)
    assert env.steps == 5 and demand.reports[0][1][2] == 5
    assert load_episode(episode_files(tmp_path)[0]).length == 5


def test_a_refused_step_truncates_the_running_episode_and_returns(tmp_path):
    env, loop = _point_loop(tmp_path)
    demand = Demand(2, unlimited=True)
    refuse_after = 3

    def step(actions):
        return None if env.steps >= refuse_after else loop.view.step(actions)

    loop.run(demand.hooks(step=step), seed=0)
    assert env.steps == refuse_after and demand.reports[0][1][2] == refuse_after
    ep = load_episode(episode_files(tmp_path)[0])  # what was recorded stays on disk, as a finished episode
    assert ep.length == refuse_after and not ep.truncated.any()


# ------------------------------------------------------------------------------- n instances (batched simulators)


def _fake_batch(tmp_path, n=3, episode_length=4):
    env = Counting(FakeEnv(num_envs=n, episode_length=episode_length))
    recorders = [EpisodeRecorder(tmp_path / f"env0.{i}") for i in range(n)]
    return env, EpisodeLoop(BatchView(env), episode_length, recorders, meta={"env_rank": 0})


def test_a_batch_chooses_each_instances_kind_at_its_start_and_collects_exactly_the_budget(tmp_path):
    env, loop = _fake_batch(tmp_path)
    demand = Demand(7, budget=8, eval_pending=1)
    loop.run(demand.hooks(), seed=0)
    # instance 0 evaluates; 1 and 2 train, each reserving its 4 steps of the budget of 8
    assert demand.acted[0] == ([0, 1, 2], [True, False, False])
    assert sorted(k for k, _ in demand.reports) == [EVAL, TRAIN, TRAIN] and env.resets == 1
    assert demand.budget == 0 and sum(len(b["reward"]) for b in demand.transitions) == 8
    assert env.steps == 4 and loop.book.kind == [IDLE] * 3  # autoreset, then nothing wanted: every one idle
    assert _meta(episode_files(tmp_path / "env0.1")[0]) == {
        "env_rank": 0,
        "instance": 1,
        "kind": TRAIN,
        "complete": True,
    }


def test_an_autoreset_instance_learns_from_its_final_observation_and_goes_on_from_its_first(tmp_path):
    env, loop = _fake_batch(tmp_path, n=2, episode_length=3)
    demand = Demand(7, budget=12)
    loop.run(demand.hooks(action_value=1.0), seed=0)
    assert env.steps == 6 and len(demand.reports) == 4  # two episodes per instance, the second ones autoreset
    last_of_first = demand.transitions[2]
    np.testing.assert_allclose(last_of_first["next_obs/joint_pos"], 0.03, atol=1e-6)  # the final observation
    first_of_second = demand.transitions[3]
    np.testing.assert_allclose(first_of_second["obs/joint_pos"], 0.0)  # the reset one
    for path in episode_files(tmp_path / "env0.0"):
        ep = load_episode(path)
        np.testing.assert_allclose(ep.obs["joint_pos"][-1], 0.03, atol=1e-6)
        assert ep.length == 3 and ep.truncated[-1]


def test_idle_instances_of_a_batch_get_the_neutral_action_and_record_nothing(tmp_path):
    env, loop = _fake_batch(tmp_path, n=3)
    demand = Demand(7, budget=4)  # one train episode's worth: instances 1 and 2 stay idle
    loop.run(demand.hooks(action_value=1.0), seed=0)
    assert [rows for rows, _ in demand.acted] == [[0]] * 4
    assert env.env.last_action[1:].tolist() == np.zeros((2, 7)).tolist()
    assert episode_files(tmp_path / "env0.1") == [] and len(episode_files(tmp_path / "env0.0")) == 1


class CameraStallOnInstance1(Counting):
    """Instance 1's camera stalls on the second step, which truncates its episode (as a BatchedEnv reports it)."""

    def step(self, action) -> Step:
        step = super().step(action)
        if self.steps == 2:
            step = replace(
                step,
                fault=(None, FaultKind.CAMERA_STALL),
                fault_message=("", "no frame for 0.5 s"),
                truncated=step.truncated | np.array([False, True]),
            )
        return step


def test_a_fault_is_noted_with_its_instance_and_ends_only_that_instances_episode(tmp_path):
    env = CameraStallOnInstance1(FakeEnv(num_envs=2, episode_length=4))
    loop, demand, notes = EpisodeLoop(BatchView(env), 4), Demand(7, budget=6), []
    loop.run(demand.hooks(note=notes.append), seed=0)
    assert notes == ["instance 1: camera_stall: no frame for 0.5 s"]
    assert sorted(result[2] for _, result in demand.reports) == [2, 4]


class TakenOverInstance1(Counting):
    """A batch whose instance 1 an operator steers, reported as the env server does (arrays per instance)."""

    def step(self, action) -> Step:
        step = super().step(action)
        executed = np.array(action, np.float32)
        executed[1] = -1.0
        return replace(step, intervened=np.array([False, True, False]), executed=executed)


def test_a_batch_records_each_instances_executed_action_and_flag(tmp_path):
    env = TakenOverInstance1(FakeEnv(num_envs=3, episode_length=2))
    recorders = [EpisodeRecorder(tmp_path / f"env0.{i}") for i in range(3)]
    loop, demand = EpisodeLoop(BatchView(env), 2, recorders), Demand(7, unlimited=True)
    loop.run(demand.hooks(action_value=0.5, version=4, stopping=lambda: env.steps >= 2), seed=0)
    ep0, ep1 = (load_episode(episode_files(tmp_path / f"env0.{i}")[0]) for i in range(2))
    assert np.all(ep0.action == 0.5) and ep0.policy_version.tolist() == [4, 4] and not ep0.intervened.any()
    assert np.all(ep1.action == -1.0) and ep1.policy_version.tolist() == [-1, -1] and ep1.intervened.all()
    assert [r[3] for _, r in demand.reports] == [0, 2, 0]  # instance by instance
    assert demand.transitions[0]["intervened"].tolist() == [0.0, 1.0, 0.0]


def test_a_batched_env_in_this_process_reads_like_the_env_server(tmp_path):
    """`BatchedEnv`'s step is a `Step` of the server's shapes: final observations with a mask, one timing."""
    from rlhw.robot.factory import make_batched_env

    config = load_config_dict({"cluster": CLUSTER, "env": {"sim": "mock", "num_envs": 2, "max_episode_steps": 2}})
    env = make_batched_env(config, 0)
    try:
        view = BatchView(env)
        obs = view.reset(seed=0)
        view.step(np.zeros((2, *env.spec.action.shape), np.float32))
        s = view.step(np.full((2, *env.spec.action.shape), 0.5, np.float32))
        assert s.ended.all() and s.timing["total"] > 0  # each phase's slowest instance
        assert not np.allclose(s.last["ee_position"], s.obs["ee_position"])  # final obs vs the autoreset one
        assert s.intervened.tolist() == [False, False] and s.executed.shape == (2, *env.spec.action.shape)
        assert set(obs) == set(s.last)
    finally:
        env.close()


# --------------------------------------------------------------------------------------- the env worker's loop


class Lanes:
    """The rollout worker as the env worker sees it, as its step lane: `send` takes observations and
    transitions (``puts``), `actions` answers every row that asked."""

    def __init__(self, action_shape):
        self.puts, self.action_shape = [], action_shape

    def send(self, msg):
        self.puts.append((msg.obs, tuple(msg.rows), np.asarray(msg.evaluating).tolist(), msg.transitions))

    def actions(self):
        k = len(self.puts[-1][1])
        return Actions(np.zeros((k, *self.action_shape), np.float32), np.full(k, 3, np.int64))

    def close(self):
        pass


def _worker(tmp_path, *overrides) -> EnvWorker:
    """An env worker without Ray, a rollout worker or a loop thread: its env (in process), episode loop and
    counters, its lane a `Lanes`."""
    raw = {"cluster": CLUSTER, "env": {"sim": "mock", "max_episode_steps": 5}, "train": {"progress": False}}
    config = load_config_dict(raw, overrides=list(overrides))
    w = EnvWorker.detached(config, str(tmp_path))
    w.attach_lane(Lanes(w.spec().action.shape))
    return w


def _children() -> list[int]:
    me = str(os.getpid())
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        if stat.rsplit(")", 1)[1].split()[1] == me:
            out.append(int(pid))
    return out


def test_a_simulated_env_worker_steps_its_env_in_process_without_a_server_child(tmp_path):
    before = _children()
    w = _worker(tmp_path)
    try:
        assert w.transport.kind == "in_process" and w.server_pid() is None and _children() == before
        w.collect(5)
        w.run_episodes()
        assert w.work.train_steps == 5 and w.poll().episodes[0][2] == 5
        puts = w.lane.puts
        assert puts[-1][0] is None and len(puts[-1][3]["reward"]) == 1  # the last step's transition goes alone
        assert sum(len(p[3]["reward"]) for p in puts if p[3] is not None) == 5
        [path] = episode_files(tmp_path / "episodes")
        assert load_episode(path).policy_version.tolist() == [3] * 5 and _meta(path)["env_rank"] == 0
        assert w.loop_health()["steps"] == 5
    finally:
        w.env.close()


@pytest.mark.parametrize(
    "refusal",
    [
        EnvServiceError("127.0.0.1:1", "the arm is stopped", "FAILED_PRECONDITION"),
        SafetyViolation("the env locked itself"),
    ],
    ids=["the env server refuses", "the env in process refuses"],
)
def test_the_env_worker_ends_the_episode_on_a_refused_step_and_fails_on_the_fourth_refusal_in_a_row(tmp_path, refusal):
    w = _worker(tmp_path)
    try:

        def refuse(action):
            raise refusal

        w.env.step = refuse
        w.collect(100)
        for _ in range(3):
            w.run_episodes()
        assert len(w.outbox.faults) == 3 and "step refused, episode truncated: " in w.outbox.faults[0]
        assert len(w.outbox.episodes) == 3  # each cut-short episode was reported
        with pytest.raises(type(refusal)):
            w.run_episodes()
        assert len(w.outbox.episodes) == 4  # ...the fourth too, before the loop gave up
    finally:
        w.env.close()


def test_the_env_worker_and_the_local_runner_run_the_same_loop(tmp_path, monkeypatch):
    from rlhw.config.train import SacConfig, TrainConfig
    from rlhw.rl.local import make_agent, run_episode

    calls = []
    real_run = EpisodeLoop.run
    monkeypatch.setattr(
        episode_loop.EpisodeLoop,
        "run",
        lambda self, hooks, seed: calls.append(hooks.act.__qualname__) or real_run(self, hooks, seed),
    )
    w = _worker(tmp_path)
    try:
        w.collect(5)
        w.run_episodes()
    finally:
        w.env.close()
    env = PointReachEnv()
    from types import SimpleNamespace

    agent = make_agent(SimpleNamespace(train=TrainConfig(sac=SacConfig(hidden_sizes=(8,)))), env.spec, "cpu")
    run_episode(env, agent, np.random.default_rng(0), None, "train")
    assert calls == ["EnvLoopHooks.act", "agent_policy.<locals>.act"]


# ---------------------------------------------------------------------------------------------- the transport


def test_an_arm_the_placement_gives_is_served_driven_or_simulated_and_a_simulator_without_one_runs_in_process():
    assert env_transport(load_config(ROOT / "configs/sim_reach.yaml"), 0) == "in_process"  # no arm placed
    assert env_transport(load_config(ROOT / "configs/franky_sim.yaml"), 0) == "server"  # a real arm
    rehearsed = load_config(ROOT / "configs/franky_sim.yaml", ["env.sim=mujoco"])
    assert env_transport(rehearsed, 0) == "server"  # the same cell simulated: the same program
    fleet = load_config(ROOT / "configs/sim_fleet.yaml")
    assert [env_transport(fleet, rank) for rank in (0, 1)] == ["server", "server"]  # each simulated cell
    beside = load_config(ROOT / "configs/workstation_franka.yaml", ["cluster.component_placement.env.node_group=gpu"])
    assert env_transport(beside, 0) == "server"  # auto's simulator beside a declared Franka keeps a real arm's guards
