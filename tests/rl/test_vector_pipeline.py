"""Several env instances per env worker (``env.num_envs`` > 1, simulators only) through the training pipeline.

The episode rules are unit-tested on `Instances` (no Ray); the batched messages on the rollout worker's
``_serve`` with a recording channel; and whole runs on a real Ray cluster with four MuJoCo reach
instances stepped in the env worker's process (where a simulator with no arm placed runs: rlhw.rl.env_transport).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from rlhw.config import load_config, load_config_dict
from rlhw.errors import ConfigError
from rlhw.rl.episodes import EpisodeRecorder, episode_files, iter_recorded_transitions, load_episode
from rlhw.rl.instances import EVAL, IDLE, TRAIN, Instances
from rlhw.rl.pipeline.controller import train_pipeline
from rlhw.rl.pipeline.env_worker import episode_dir
from rlhw.rl.pipeline.launch import Pipeline
from rlhw.rl.pipeline.messages import EnvStep, pack, unpack
from rlhw.rl.pipeline.rollout_worker import RolloutWorker
from rlhw.rl.rundir import RunDir
from rlhw.runtime.cluster import Cluster
from tests.ray_nodes import ray_cluster

ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------------- Instances


def _start_each(book: Instances, **demand) -> list[str]:
    """Start an episode on every instance in index order, as a phase start does; the kinds chosen."""
    kinds = []
    for i in range(book.n):
        kinds.append(book.choose(**demand))
        book.start(i, kinds[-1])
    return kinds


def test_a_new_episode_evaluates_while_eval_episodes_are_wanted_beyond_those_already_running():
    book = Instances(4, max_episode_steps=10)
    kinds = _start_each(book, budget=0, unlimited=True, eval_pending=2)
    assert kinds == [EVAL, EVAL, TRAIN, TRAIN]  # two eval episodes wanted, two already running
    assert book.eval_running() == 2


def test_train_episodes_start_only_while_the_budget_exceeds_what_running_episodes_may_still_take():
    book = Instances(4, max_episode_steps=25)
    kinds = _start_each(book, budget=60, unlimited=False, eval_pending=0)
    # 25 + 25 reserved leaves 10 > 0, so a third episode starts; then 75 >= 60: no fourth.
    assert kinds == [TRAIN, TRAIN, TRAIN, IDLE]
    assert book.train_reserved() == 75
    for _ in range(10):
        book.step(np.zeros(4), np.zeros(4, bool))
    assert book.train_reserved() == 45  # each running episode may take 15 more steps


def test_an_episode_that_ends_early_releases_its_reservation_for_a_new_train_episode():
    book = Instances(2, max_episode_steps=25)
    book.start(0, TRAIN)
    book.start(1, TRAIN)
    for _ in range(5):
        book.step(np.zeros(2), np.zeros(2, bool))
    book.finish(0)  # terminated after 5 steps: budget 50 - 10 taken = 40 left, 20 reserved by instance 1
    assert book.choose(budget=40, unlimited=False, eval_pending=0) == TRAIN
    assert book.choose(budget=20, unlimited=False, eval_pending=0) == IDLE


def test_with_one_instance_the_rule_is_budget_positive_at_episode_start():
    book = Instances(1, max_episode_steps=50)
    assert book.choose(budget=1, unlimited=False, eval_pending=0) == TRAIN
    assert book.choose(budget=0, unlimited=False, eval_pending=0) == IDLE
    assert book.choose(budget=-7, unlimited=True, eval_pending=0) == TRAIN
    assert book.choose(budget=0, unlimited=False, eval_pending=1) == EVAL


def test_finishing_an_episode_returns_its_return_success_length_and_interventions_and_leaves_the_instance_idle():
    book = Instances(2, max_episode_steps=10)
    book.start(0, EVAL)
    book.start(1, TRAIN)
    book.step([-1.0, -2.0], [False, True])
    book.step([-0.5, -1.0], [True, False])
    assert book.finish(1) == (TRAIN, (-3.0, True, 2, 0))
    assert book.kind == [EVAL, IDLE] and book.rows() == [0] and not book.all_idle()
    assert book.finish(0) == (EVAL, (-1.5, True, 2, 0))
    assert book.all_idle()


def test_an_unknown_episode_kind_is_refused():
    with pytest.raises(ValueError, match="unknown episode kind"):
        Instances(1, 5).start(0, "paused")


# (refused env steps: tests/rl/test_episode_loop.py, through the env worker's episode loop)


# ------------------------------------------------------------------------------------- rollout messages


class _RecordingChannel:
    """Records what is put, keyed: the replay channel, and the step lane's answers (``answer(env, actions)``)."""

    def __init__(self):
        self.puts: list[tuple] = []

    def put(self, item, key=None, timeout=None):
        self.puts.append((key, item))

    def answer(self, env, actions):
        self.puts.append((env, actions))


class _NoWeights:
    def refresh(self, policy) -> None:
        pass


def _bare_rollout_worker(weights_version: int) -> RolloutWorker:
    """A RolloutWorker without Ray, lanes or channels: just what `_serve` and its feeder use. The feeder forwards
    only when closed (its period is an hour), so a test sees the batch that closing sends."""
    import torch

    from rlhw.config.train import SacConfig
    from rlhw.rl.acting import ActingPolicy
    from rlhw.rl.pipeline.acting import Feeder, ReplayForwarder
    from rlhw.robot.spec import EnvSpec, TensorSpec

    spec = EnvSpec(
        observations={"x": TensorSpec("x", "float32", (2,))},
        action=TensorSpec("action", "float32", (3,), low=-1.0, high=1.0),
        control_hz=10.0,
    )
    w = RolloutWorker.__new__(RolloutWorker)
    w.policy = ActingPolicy(spec, SacConfig(hidden_sizes=(8,)), torch.device("cpu"), seed=0)
    w.policy.current = (w.policy.current[0], weights_version)
    w.policy.random_actions = weights_version < 0
    w.lane = w.act_ch = _RecordingChannel()
    replay = ReplayForwarder.__new__(ReplayForwarder)
    replay.channel = w.replay_ch = _RecordingChannel()
    replay.num_learner_ranks, replay.timeout_s = 2, 5.0
    replay.pending, replay.rows, replay.next_rank, replay.last_flush = [], 0, 0, time.monotonic() + 3600
    w.feeder = Feeder(w.policy, replay, _NoWeights(), name="rollout-feeder-test")
    w.served = w.batches = 0
    return w


def _message(env: int, k: int, evaluating: list[bool], transitions: int) -> EnvStep:
    """An env worker's message through the same encoding: k instances want actions, ``transitions`` rows."""
    obs = {"x": np.full((k, 2), float(env), np.float32)}
    tr = None
    if transitions:
        x = np.full((transitions, 2), float(env), np.float32)
        tr = {
            "obs/x": x,
            "next_obs/x": x + 1,
            "action": np.zeros((transitions, 3), np.float32),
            "reward": np.full(transitions, -1.0, np.float32),
            "terminated": np.zeros(transitions, np.float32),
        }
    sent = EnvStep(
        env=env, obs=obs if k else None, rows=tuple(range(k)), evaluating=np.array(evaluating, bool), transitions=tr
    )
    buf, header_len, payload_len = pack(sent)
    return unpack(buf, 0, header_len, payload_len, EnvStep)  # as the rollout worker receives it from the lane


def test_the_rollout_worker_answers_each_env_worker_with_one_action_array_and_the_policy_versions():
    w = _bare_rollout_worker(weights_version=1)
    # env 1's last instance just ended its episode and went idle: a transition, but no action wanted
    msgs = [_message(0, 3, [False, True, False], 2), _message(1, 0, [], 1), _message(2, 2, [True, True], 0)]
    w._serve(msgs)
    assert [key for key, _ in w.act_ch.puts] == [0, 2]  # env 1 wanted no action (all its instances idle)
    (a0, v0), (a2, v2) = ((m.actions, m.versions) for _, m in w.act_ch.puts)
    assert a0.shape == (3, 3) and a2.shape == (2, 3)
    assert v0.tolist() == [1, 1, 1] and v2.tolist() == [1, 1]  # the weights version that chose each action
    assert np.all(np.abs(a0) <= 1) and np.all(np.abs(a2) <= 1)
    # eval rows get the deterministic action: the same observation gives the same action
    import torch

    with torch.no_grad():
        mean = w.policy.forward({"x": np.full((1, 2), 2.0, np.float32)})[1][0]
    np.testing.assert_allclose(a2[0], mean, atol=1e-6)
    np.testing.assert_allclose(a2[1], mean, atol=1e-6)
    assert w.served == 5 and w.batches == 1
    # transitions of both messages went on as one replay batch, from the feeder thread
    assert w.replay_ch.puts == []
    w.feeder.close()
    assert len(w.replay_ch.puts) == 1
    batch = w.replay_ch.puts[0][1]
    assert batch["reward"].shape == (3,) and batch["obs/x"].shape == (3, 2)
    assert batch["obs/x"][:, 0].tolist() == [0.0, 0.0, 1.0]


def test_before_any_weights_the_rollout_worker_explores_uniformly_within_the_action_bounds():
    w = _bare_rollout_worker(weights_version=-1)
    w._serve([_message(0, 64, [False] * 64, 0)])
    answer = w.act_ch.puts[0][1]
    actions, versions = answer.actions, answer.versions
    assert actions.shape == (64, 3) and np.all(np.abs(actions) <= 1) and actions.std() > 0.3
    assert np.all(versions == -1)  # no policy chose them
    w.feeder.close()


# ------------------------------------------------------------------------------------ episodes on disk


def test_episodes_of_every_instance_are_found_for_resume(tmp_path):
    for i in range(3):
        rec = EpisodeRecorder(episode_dir(tmp_path, 0, i, 3))
        rec.begin({"x": np.zeros(2, np.float32)}, kind="train")
        for t in range(4 + i):
            rec.step(np.zeros(3), -1.0, False, t == 3 + i, {"x": np.ones(2, np.float32)})
        rec.end()
    assert episode_dir(tmp_path, 2, 0, 1) == tmp_path / "episodes" / "env2"  # one instance: the old layout
    files = episode_files(tmp_path / "episodes", "train")
    assert [p.parent.name for p in files] == ["env0.0", "env0.1", "env0.2"]
    assert sum(len(b["reward"]) for b in iter_recorded_transitions(tmp_path / "episodes")) == 4 + 5 + 6


# --------------------------------------------------------------------------------- real arm is refused


def test_a_real_arm_config_with_several_env_instances_is_refused_naming_env_num_envs(tmp_path):
    config = load_config(ROOT / "configs/franky_sim.yaml", ["env.num_envs=2"])
    with pytest.raises(ConfigError) as e:
        Pipeline(config, RunDir(tmp_path / "run"))  # refused before any Ray worker starts
    assert "env.num_envs" in str(e.value) and "num_envs=1" in str(e.value) and "env.sim=mujoco" in str(e.value)


def test_the_same_layout_rehearsed_in_simulation_may_run_several_instances():
    from rlhw.rl.pipeline.launch import check_layout

    check_layout(load_config(ROOT / "configs/franky_sim.yaml", ["env.num_envs=2", "env.sim=mujoco"]))  # no error


@pytest.mark.parametrize("config", ["configs/franky_sim.yaml", "configs/sim_reach.yaml"])
def test_a_keyboard_operator_is_refused_by_the_pipeline_whose_env_workers_have_no_terminal(config):
    """A Ray actor's input is /dev/null, and a serve-env child inherits it: the keys would never arrive, and the
    first read would end the run as a teleop fault. Refused before any worker starts, naming the devices that
    work; the SpaceMouse (read over USB) is taken."""
    from rlhw.rl.pipeline.launch import check_layout

    with pytest.raises(ConfigError, match=r"env\.teleop\.device.*keyboard.*/dev/null.*spacemouse.*train\.runner=local"):
        check_layout(load_config(ROOT / config, ["env.teleop.device=keyboard", "env.sim=mujoco"]))
    check_layout(load_config(ROOT / config, ["env.teleop.device=spacemouse", "env.sim=mujoco"]))  # no error


# ----------------------------------------------------------------------------------- whole runs (Ray)

VECTOR_RUN = {
    "cluster": {
        "num_nodes": 1,
        "node_groups": [],
        "component_placement": {"env,rollout,learner": {"node_group": "node", "placement": "0"}},
    },
    "env": {"max_episode_steps": 25, "num_envs": 4},
    "train": {
        "mode": "sync",
        "max_env_steps": 200,
        "steps_per_iteration": 100,
        "learning_starts": 100,
        "eval_every_steps": 200,
        "eval_episodes": 3,
        "log_every_steps": 100,
        "progress": False,
        "utd_ratio": 0.25,
        "sac": {"hidden_sizes": [32, 32], "batch_size": 32},
    },
}


@pytest.fixture(scope="module")
def ray_node():
    with ray_cluster({"num_cpus": 2, "labels": {"rlhw.node_rank": "0"}}) as rc:
        yield rc


@pytest.fixture(scope="module")
def vector_run(ray_node, tmp_path_factory):
    config = load_config_dict(VECTOR_RUN)
    rd = RunDir(tmp_path_factory.mktemp("vector") / "run")
    rd.write_config(config)
    stop = train_pipeline(config, rd, cluster=Cluster(config, address=ray_node.address, probe_hardware=False))
    return config, rd, stop


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_sync_run_with_four_instances_collects_exactly_its_budget_in_whole_episodes_on_disk(vector_run):
    config, rd, stop = vector_run
    assert stop.status in ("stopped", "finished"), stop.reason
    status = json.loads(rd.status_path.read_text())
    # 2 iterations x 100 steps; 4 instances x 25-step episodes fill each one exactly
    assert status["env_steps"] == 200 and status["updates"] > 0
    files = episode_files(rd.episodes, "train")
    assert sorted({p.parent.name for p in files}) == ["env0.0", "env0.1", "env0.2", "env0.3"]
    episodes = [load_episode(p) for p in files]
    assert all(p.suffix == ".npz" for p in files)
    assert sum(ep.length for ep in episodes) == status["env_steps"] == status["episodes"] * 25
    scale = config.env.reach.reward_scale_m
    for ep in episodes:
        assert len(ep.obs["to_target"]) == ep.length + 1
        # each step's reward belongs to the observation that followed it in THIS instance's episode
        np.testing.assert_allclose(ep.reward, -np.linalg.norm(ep.obs["to_target"][1:], axis=1) / scale, rtol=1e-4)
        assert np.all(ep.obs["target_position"] == ep.obs["target_position"][0])  # one target per episode
        assert ep.truncated[-1] or ep.terminated[-1]
        assert not ep.truncated[:-1].any() and not ep.terminated[:-1].any()
    assert status["loop_health"][0]["num_envs"] == 4


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_an_evaluation_with_four_instances_returns_eval_episodes_results(vector_run):
    config, rd, _ = vector_run
    evals = [r for r in rd.metrics() if r.get("eval/success_rate") is not None]
    assert evals and evals[-1]["eval/episodes"] == config.train.eval_episodes == 3
    files = episode_files(rd.episodes, "eval")
    assert len(files) == 3 and len({p.parent.name for p in files}) == 3  # three instances evaluated at once
    assert all(load_episode(p).length == 25 for p in files)


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_resumed_run_reloads_every_instances_episodes_and_continues(ray_node, vector_run):
    _, rd, _ = vector_run
    more = load_config_dict(
        {**VECTOR_RUN, "train": {**VECTOR_RUN["train"], "max_env_steps": 300, "eval_every_steps": 100_000}}
    )
    stop = train_pipeline(more, rd, resume=True, cluster=Cluster(more, address=ray_node.address, probe_hardware=False))
    assert stop.status == "stopped", stop.reason
    status = json.loads(rd.status_path.read_text())
    on_disk = sum(load_episode(p).length for p in episode_files(rd.episodes, "train"))
    # had the resume missed the env0.<i> directories it would have started from 0 and collected 300 more
    assert status["env_steps"] == on_disk == 300


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.timeout(180)
def test_an_async_run_with_four_instances_gets_every_evaluation_it_asks_for(ray_node, tmp_path):
    # Async mode polls the env workers from two places (evaluation and training); an eval result must
    # count whichever poll brings it in, or the evaluation waits forever while the robots keep stepping.
    # Two evaluations are asked for whatever the machine's load: the UTD gate (utd_slack 2, i.e. 8 steps)
    # keeps the robots within about 61 train steps of what the controller has seen (8 + 3 of a batched tick,
    # or a 50-step grant while the learner has no data), so the first eval starts by about 100 + 2 * 61
    # steps, and while it runs (at most 2 episodes of 10 ticks of 4 instances) the run gains at most 80 more
    # plus 61 before the controller sees it end: about 363 < 400, so the budget cannot end the run inside
    # the first evaluation, and reaching it (or 200, 300) asks for another one.
    # (With the default utd_slack of 100, i.e. 400 steps, a loaded machine let one eval run past the budget.)
    config = load_config_dict(
        {
            **VECTOR_RUN,
            "env": {**VECTOR_RUN["env"], "max_episode_steps": 10},
            "train": {
                **VECTOR_RUN["train"],
                "mode": "async",
                "max_env_steps": 400,
                "eval_every_steps": 100,
                "learning_starts": 50,
                "utd_slack": 2,
            },
        }
    )
    rd = RunDir(tmp_path / "run")
    rd.write_config(config)
    stop = train_pipeline(config, rd, cluster=Cluster(config, address=ray_node.address, probe_hardware=False))
    assert stop.status in ("stopped", "finished"), stop.reason
    evals = [r for r in rd.metrics() if r.get("eval/success_rate") is not None]
    assert len(evals) >= 2 and all(r["eval/episodes"] == 3 for r in evals)
    assert json.loads(rd.status_path.read_text())["updates"] > 0
