"""What both runners share, written once: the acting rule, resume, the checkpoint's counters, the updates owed
and the seeds per rank. Each is specified here once; the local runner and the pipeline are checked to use it."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rlhw.config.train import SacConfig
from rlhw.rl.acting import ActingPolicy
from rlhw.rl.checkpoint import checkpoint_state, policy_contract, saved_counters
from rlhw.rl.episodes import EpisodeRecorder
from rlhw.rl.fault_signal import AS_REPORTED
from rlhw.rl.local import agent_policy
from rlhw.rl.policy import PolicyWeights, choose_actions
from rlhw.rl.replay import MixedReplay
from rlhw.rl.resume import resume_run
from rlhw.rl.rundir import RunDir
from rlhw.rl.sac import SAC
from rlhw.rl.seeds import TRAIN_SEEDS_BELOW, SeedStream, episode_seed, rank_seed
from rlhw.rl.session import Counters
from rlhw.rl.spaces import AgentSpace
from rlhw.rl.utd_gate import step_allowance, updates_owed
from tests.rl.point_env import PointReachEnv

LOW, HIGH = np.array([-1.0, -2.0], np.float32), np.array([1.0, 2.0], np.float32)
SAMPLE, MEAN = np.full((3, 2), 0.5, np.float32), np.full((3, 2), 0.25, np.float32)


class Forward:
    """A policy network's forward pass that counts its calls."""

    def __init__(self):
        self.calls = 0

    def __call__(self):
        self.calls += 1
        return SAMPLE.copy(), MEAN.copy()


# ---------------------------------------------------------------------------------------------- the acting rule


def test_warm_up_acts_uniformly_at_random_with_version_minus_one_without_the_network():
    forward = Forward()
    actions, versions = choose_actions(forward, np.zeros(3, bool), 7, True, np.random.default_rng(0), LOW, HIGH)
    assert forward.calls == 0 and versions.tolist() == [-1, -1, -1]
    assert actions.dtype == np.float32 and ((actions >= LOW) & (actions <= HIGH)).all()


def test_without_weights_every_row_is_random_even_an_eval_row():
    forward = Forward()
    _, versions = choose_actions(forward, np.array([True, False, True]), -1, False, np.random.default_rng(0), LOW, HIGH)
    assert forward.calls == 0 and versions.tolist() == [-1, -1, -1]


def test_eval_rows_act_on_the_weights_mean_during_warm_up_once_there_are_weights():
    forward = Forward()
    actions, versions = choose_actions(
        forward, np.array([False, True, False]), 4, True, np.random.default_rng(0), LOW, HIGH
    )
    assert forward.calls == 1 and versions.tolist() == [-1, 4, -1]
    np.testing.assert_array_equal(actions[1], MEAN[1])


def test_after_warm_up_one_forward_pass_gives_the_sample_and_the_mean_for_eval_rows():
    forward = Forward()
    actions, versions = choose_actions(
        forward, np.array([False, True, False]), 9, False, np.random.default_rng(0), LOW, HIGH
    )
    assert forward.calls == 1 and versions.tolist() == [9, 9, 9]
    np.testing.assert_array_equal(actions, [SAMPLE[0], MEAN[1], SAMPLE[2]])


def test_the_local_runner_and_an_acting_process_answer_alike_for_the_same_weights_and_seeds():
    """The local runner acts on the agent's own network, an acting process on a copy of its weights: the same
    rule, so the same actions and versions for the same random state."""
    env = PointReachEnv()
    space = AgentSpace.from_spec(env.spec)
    sac_cfg = SacConfig(hidden_sizes=(8,))
    agent = SAC(space.layout, space.low, space.high, sac_cfg)
    agent.updates = 5
    policy = ActingPolicy(env.spec, sac_cfg, torch.device("cpu"), seed=0)
    policy.load(PolicyWeights(version=5, state={k: v.numpy() for k, v in agent.policy_state().items()}))
    policy.random_actions = False
    batch = {k: np.repeat(v, 3, axis=0) for k, v in env.reset(seed=0).obs.items()}
    evaluating = np.array([False, True, False])
    for random_actions in (False, True):
        policy.random_actions = random_actions
        torch.manual_seed(1)
        local = agent_policy(agent, np.random.default_rng(2), random_actions)(batch, [0, 1, 2], evaluating)
        policy.rng = np.random.default_rng(2)
        torch.manual_seed(1)
        acting = policy.act(batch, evaluating)
        np.testing.assert_allclose(local[0], acting.actions, atol=1e-6)
        np.testing.assert_array_equal(local[1], acting.versions)


# ------------------------------------------------------------------------------------------------ updates owed


def test_the_updates_owed_are_utd_ratio_per_step_after_learning_starts_less_those_done():
    assert updates_owed(env_steps=100, updates=0, utd_ratio=1.0, learning_starts=100) == 0
    assert updates_owed(env_steps=150, updates=0, utd_ratio=0.5, learning_starts=100) == 25
    assert updates_owed(env_steps=150, updates=20, utd_ratio=0.5, learning_starts=100) == 5
    assert updates_owed(env_steps=150, updates=30, utd_ratio=0.5, learning_starts=100) == 0  # never negative
    assert updates_owed(env_steps=50, updates=0, utd_ratio=2.0, learning_starts=100) == 0  # warm-up owes none


def test_the_step_allowance_is_what_the_updates_owed_formula_pays_for():
    """Async mode grants the steps whose updates are done: at the allowance (no slack), nothing more is owed."""
    for updates, utd, starts in ((0, 1.0, 500), (400, 0.5, 1000), (1234, 2.0, 0)):
        steps = step_allowance(updates, utd, starts, 0, 0, 1)
        assert updates_owed(steps, updates, utd, starts) == 0
        assert updates_owed(steps + math.ceil(1 / utd), updates, utd, starts) >= 1


# ----------------------------------------------------------------------------------------------------- seeds


def test_every_role_and_rank_has_its_own_seed_and_the_ranks_keep_the_seeds_they_had():
    seeds = {(s, r): rank_seed(7, s, r) for s in SeedStream for r in range(8)}
    assert len(set(seeds.values())) == len(seeds)
    assert rank_seed(7, SeedStream.LEARNER, 3) == 10  # learner rank r: seed + r
    assert rank_seed(7, SeedStream.EPISODES, 3) == 1010  # env worker r's episode seeds
    assert rank_seed(7, SeedStream.ACTING, 3) == 2010  # acting process r


def test_training_episodes_draw_their_seeds_below_every_eval_seed():
    from rlhw.rl.evaluate import EVAL_SEED_BASE

    seeds = [episode_seed(np.random.default_rng(s)) for s in range(200)]
    assert all(0 <= x < TRAIN_SEEDS_BELOW <= EVAL_SEED_BASE for x in seeds)
    assert episode_seed(np.random.default_rng(3)) == episode_seed(np.random.default_rng(3))


# ------------------------------------------------------------------------------------ checkpoint and resume


def _agent(env: PointReachEnv) -> SAC:
    space = AgentSpace.from_spec(env.spec)
    return SAC(space.layout, space.low, space.high, SacConfig(hidden_sizes=(8,)))


def test_a_checkpoint_carries_the_runs_counters_and_the_agents_updates():
    env = PointReachEnv()
    agent = _agent(env)
    agent.updates = 42
    state = checkpoint_state(
        agent,
        policy_contract(env.spec, SacConfig(hidden_sizes=(8,))),
        Counters(env_steps=900, updates=1, episodes=12, best_success=0.5),
    )
    assert saved_counters(state) == Counters(env_steps=900, updates=42, episodes=12, best_success=0.5)
    old = {k: v for k, v in state.items() if k not in ("episodes", "best_success")}  # an older checkpoint
    back = saved_counters(old)
    assert back.episodes == 0 and math.isnan(back.best_success)


def _record(run_dir: RunDir, lengths: list[int]) -> None:
    rec = EpisodeRecorder(run_dir.episodes / "env0")
    for n in lengths:
        rec.begin({"x": np.zeros(2, np.float32)}, kind="train")
        for t in range(n):
            rec.step(
                np.zeros(2, np.float32), -1.0, False, t == n - 1, {"x": np.full(2, t, np.float32)}, intervened=t == 0
            )
        rec.end()


def _replay() -> MixedReplay:
    return MixedReplay(1000, 0.5, seed=0)


@pytest.mark.parametrize("with_checkpoint", [False, True])
def test_resume_shares_the_episodes_over_the_ranks_and_every_rank_counts_them_all(tmp_path, with_checkpoint):
    env = PointReachEnv()
    run_dir = RunDir(tmp_path / "run")
    _record(run_dir, [3, 4, 5, 6, 7])
    if with_checkpoint:
        saved = _agent(env)
        saved.updates = 17
        run_dir.save_checkpoint(checkpoint_state(saved, {}, Counters(env_steps=10, episodes=4, best_success=0.25)), 10)
    ranks = [(_agent(env), _replay()) for _ in range(2)]
    counters = [resume_run(run_dir, agent, replay, AS_REPORTED, rank, 2) for rank, (agent, replay) in enumerate(ranks)]
    alone = _replay()
    whole = resume_run(run_dir, _agent(env), alone, AS_REPORTED)
    assert [c.env_steps for c in counters] == [
        25,
        25,
    ] and whole.env_steps == 25  # the disk's count, not the checkpoint's
    assert [len(r.online) for _, r in ranks] == [3 + 5 + 7, 4 + 6] and len(alone.online) == 25
    assert [len(r.demos) for _, r in ranks] == [3, 2] and len(alone.demos) == 5  # each episode's intervened step
    if with_checkpoint:
        assert all((c.updates, c.episodes, c.best_success) == (17, 4, 0.25) for c in counters + [whole])
        assert all(agent.updates == 17 for agent, _ in ranks)
    else:
        assert all((c.updates, c.episodes) == (0, 0) and math.isnan(c.best_success) for c in counters + [whole])


# ------------------------------------------------------------------ both runners read and write one format


def test_a_learner_rank_resumes_what_a_local_run_wrote_and_writes_the_same_checkpoint(tmp_path, monkeypatch):
    """The local runner's run directory, resumed by learner rank 1 of 2 (its share of the episodes) and by rank 0,
    which then checkpoints; the worker is built without Ray (its channels are stand-ins)."""
    from rlhw.config import load_config_dict
    from rlhw.rl.episodes import episode_files, load_episode
    from rlhw.rl.local import train_local
    from rlhw.rl.pipeline.learner_worker import LearnerWorker
    from tests.rl.test_acting import _Channel

    raw = {
        "cluster": {"num_nodes": 1, "component_placement": {"env,rollout,learner": "0"}},
        "train": {
            "runner": "local",
            "max_env_steps": 120,
            "learning_starts": 50,
            "eval_every_steps": 10_000,
            "log_every_steps": 50,
            "checkpoint_every_steps": 100,
            "progress": False,
            "sac": {"hidden_sizes": [8], "batch_size": 16},
        },
    }
    config = load_config_dict(raw)
    run_dir = RunDir(tmp_path / "run")
    train_local(config, run_dir, env_factory=lambda c, r: PointReachEnv(seed=0))
    written = run_dir.load_checkpoint()
    recorded = [load_episode(p).length for p in episode_files(run_dir.episodes, "train")]

    monkeypatch.setattr("rlhw.runtime.channel.Channel.connect", staticmethod(lambda name, timeout_s=60: _Channel()))
    learners = []
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "2")
        learner = LearnerWorker(config, str(run_dir.path), num_acting=1)
        counters = learner.setup(PointReachEnv().spec, resume=True)
        assert counters.env_steps == sum(recorded)  # every rank counts every recorded step
        assert (counters.updates, counters.episodes, counters.best_success) == (
            written["updates"],
            written["episodes"],
            written["best_success"],
        )
        assert learner.agent.updates == written["updates"]
        assert len(learner.replay.online) == sum(recorded[rank::2])
        learners.append(learner)
    counters.env_steps += 7
    monkeypatch.setenv("RANK", "0")  # rank 0 writes checkpoints
    assert learners[0].save_checkpoint(counters) is not None
    again = run_dir.load_checkpoint()
    assert set(again) == set(written)  # the local runner's format
    back = saved_counters(again)
    assert (back.env_steps, back.updates, back.episodes) == (sum(recorded) + 7, written["updates"], written["episodes"])
