"""RLPD critics, demonstrations and interventions: the training side of human-in-the-loop RL (issue 16)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from rlhw.config import load_config_dict
from rlhw.config.train import SacConfig, TrainConfig
from rlhw.errors import ConfigError
from rlhw.rl.demos import load_demos
from rlhw.rl.episodes import EpisodeRecorder, episode_files, load_episode
from rlhw.rl.local import make_agent, run_episode, train_local
from rlhw.rl.replay import MixedReplay
from rlhw.rl.rundir import RunDir
from rlhw.rl.sac import SAC, EnsembleLayerNorm, ObsLayout
from tests.rl.point_env import PointReachEnv, TakeoverPointEnv, point_expert

CLUSTER = {
    "num_nodes": 1,
    "component_placement": {"env,rollout,learner": {"node_group": "node", "placement": "0"}},
    "node_groups": [],
}
POINT_OBS, POINT_ACTION = {"pos": (2,), "goal": (2,)}, (2,)


def _sac(**cfg) -> SAC:
    layout = ObsLayout.from_shapes(POINT_OBS, {"pos": "float32", "goal": "float32"})
    return SAC(layout, -np.ones(2), np.ones(2), SacConfig(hidden_sizes=(16, 16), batch_size=8, **cfg))


def _transitions(n: int, reward: float, intervened: float = 0.0) -> dict[str, np.ndarray]:
    x = np.random.rand(n, 2).astype(np.float32)
    return {
        "obs/pos": x,
        "obs/goal": x,
        "next_obs/pos": x,
        "next_obs/goal": x,
        "action": np.random.uniform(-1, 1, (n, 2)).astype(np.float32),
        "reward": np.full(n, reward, np.float32),
        "terminated": np.zeros(n, np.float32),
        "intervened": np.full(n, intervened, np.float32),
    }


def _record_demos(directory, episodes: int = 3, kind: str = "demo", seed: int = 7) -> int:
    """Scripted-expert episodes on the point env, written as `rlhw record-demos` writes them; returns steps."""
    env, rec, steps = PointReachEnv(seed=seed), EpisodeRecorder(directory), 0
    for _ in range(episodes):
        obs, _ = env.reset().gym()
        rec.begin(obs, kind=kind, meta={"success": True})
        while True:
            action = point_expert(obs)
            obs, reward, terminated, truncated, info = env.step(action).gym()
            rec.step(action, reward, terminated, truncated, obs, info["success"], intervened=True)
            steps += 1
            if terminated or truncated:
                break
        rec.end()
    return steps


# ------------------------------------------------------------------------------------------ critics
def test_the_critics_are_one_batched_ensemble_of_n_with_layer_norm_after_each_hidden_layer():
    sac = _sac(critic_ensemble=10, critic_subset=2)
    assert [tuple(layer.weight.shape) for layer in sac.critic.layers] == [(10, 6, 16), (10, 16, 16)]
    assert all(isinstance(norm, EnsembleLayerNorm) for norm in sac.critic.norms)
    q = sac.critic({"proprio": torch.zeros(5, 4)}, torch.zeros(5, 2))
    assert q.shape == (10, 5, 1)
    assert not any(isinstance(n, EnsembleLayerNorm) for n in _sac(critic_layer_norm=False).critic.norms)


def test_the_target_is_the_minimum_over_a_fresh_random_subset_of_m_target_critics():
    sac = _sac(critic_ensemble=10, critic_subset=2)
    with torch.no_grad():  # target critic i answers i, whatever the input
        sac.critic_target.head.weight.zero_()
        sac.critic_target.head.bias.copy_(torch.arange(10.0).view(10, 1, 1))
    obs, act = {"proprio": torch.zeros(1, 4)}, torch.zeros(1, 2)
    torch.manual_seed(0)
    draws = np.array([sac.target_q(obs, act).item() for _ in range(1500)])
    # min of 2 distinct of 10: P(0) = 9/45, P(k) = (9 - k)/45; never 9 (it is nobody's minimum with a partner)
    assert set(draws) <= set(range(9))
    assert np.mean(draws == 0) == pytest.approx(9 / 45, abs=0.03)
    assert np.mean(draws == 8) == pytest.approx(1 / 45, abs=0.01)
    everyone = _sac(critic_ensemble=4, critic_subset=4)  # M = N: the minimum of all of them
    with torch.no_grad():
        everyone.critic_target.head.weight.zero_()
        everyone.critic_target.head.bias.copy_(torch.arange(4.0).view(4, 1, 1) + 3)
    assert {everyone.target_q(obs, act).item() for _ in range(20)} == {3.0}


@pytest.mark.parametrize("ensemble,subset,actor_q", [(10, 2, "mean"), (2, 2, "min")])
def test_an_update_trains_every_critic_and_the_actor(ensemble, subset, actor_q):
    sac = _sac(critic_ensemble=ensemble, critic_subset=subset, actor_q=actor_q)
    before = [p.detach().clone() for p in (sac.critic.head.weight, next(sac.actor.parameters()))]
    m = sac.update(_transitions(8, 1.0))
    assert all(np.isfinite(v) for v in m.values())
    changed = (sac.critic.head.weight - before[0]).abs().sum(dim=(1, 2))
    assert (changed > 0).all(), "every member of the ensemble learns"
    assert not torch.equal(next(sac.actor.parameters()), before[1])


def test_a_subset_larger_than_the_ensemble_is_refused_naming_both_fields():
    with pytest.raises(ValueError, match="critic_subset \\(3\\) exceeds critic_ensemble \\(2\\)"):
        SacConfig(critic_ensemble=2, critic_subset=3)
    with pytest.raises(ValueError):
        SacConfig(critic_subset=0)


def test_an_old_two_critic_checkpoint_is_refused_with_the_fix():
    sac = _sac()
    state = sac.state_dict()
    old = {k: v for k, v in state.items() if not k.startswith("critic")}
    old.update(qf1={}, qf2={}, qf1_target={}, qf2_target={})
    with pytest.raises(ConfigError, match="qf1/qf2.*start a new run directory"):
        sac.load_state_dict(old)
    with pytest.raises(ConfigError, match="critic_ensemble=10 to resume"):
        _sac(critic_ensemble=4).load_state_dict(state)


# ------------------------------------------------------------------------------------------ sampling
@pytest.mark.parametrize("ratio,batch,expected", [(0.5, 64, 32), (0.25, 10, 2), (0.0, 16, 0), (1.0, 8, 8)])
def test_every_batch_draws_exactly_round_ratio_times_batch_size_demo_samples(ratio, batch, expected):
    replay = MixedReplay(1000, demo_ratio=ratio, seed=0)
    replay.add_batch(_transitions(300, reward=0.0))
    replay.add_demos(_transitions(50, reward=1.0))
    counts = [int(replay.sample(batch)["reward"].sum()) for _ in range(300)]
    assert set(counts) == {expected}
    if expected:  # and the demo samples come from all over the demo buffer
        drawn = np.concatenate([replay.sample(batch)["obs/pos"][-expected:, 0] for _ in range(200)])
        assert len(np.unique(drawn)) == 50


def test_without_demos_every_sample_is_online_replay():
    replay = MixedReplay(100, demo_ratio=0.5, seed=0)
    replay.add_batch(_transitions(20, reward=0.0))
    assert replay.sample(32)["reward"].sum() == 0 and len(replay.sample(32)["reward"]) == 32


def test_intervention_transitions_go_to_both_buffers_with_their_actions():
    replay = MixedReplay(100, demo_ratio=0.5, seed=0)
    batch = _transitions(6, reward=0.0)
    batch["intervened"] = np.array([0, 1, 0, 0, 1, 0], np.float32)
    replay.add_batch(batch)
    assert len(replay.online) == 6 and len(replay.demos) == 2
    np.testing.assert_array_equal(replay.demos.data["action"][:2], batch["action"][[1, 4]])


# ------------------------------------------------------------------------------------------ demos
def test_demos_load_every_demo_and_train_episode_and_skip_eval_ones(tmp_path):
    steps = _record_demos(tmp_path / "a", episodes=2) + _record_demos(tmp_path / "b" / "env0", 1, kind="train")
    _record_demos(tmp_path / "b" / "env0", 1, kind="eval")
    batches = load_demos([str(tmp_path / "a"), str(tmp_path / "b")], POINT_OBS, POINT_ACTION, None)
    assert sum(len(b["reward"]) for b in batches) == steps == 75
    assert all(b["intervened"].all() for b in batches[:2])


def test_demo_config_errors_name_the_entry_and_the_problem(tmp_path):
    with pytest.raises(ConfigError, match=r"train.demos\[0\]: .*nope is not a directory"):
        load_demos([str(tmp_path / "nope")], POINT_OBS, POINT_ACTION, None)
    (tmp_path / "empty").mkdir()
    _record_demos(tmp_path / "ok", 1)
    with pytest.raises(ConfigError, match=r"train.demos\[1\]: .*holds no demo-\*/train-\* episode"):
        load_demos([str(tmp_path / "ok"), str(tmp_path / "empty")], POINT_OBS, POINT_ACTION, None)
    with pytest.raises(ConfigError, match=r"train.demos\[0\]: .*missing tcp_pos; not in the env: pos"):
        load_demos([str(tmp_path / "ok")], {"tcp_pos": (2,), "goal": (2,)}, POINT_ACTION, None)
    with pytest.raises(ConfigError, match=r"observation 'goal' has shape \(2,\), the env's has \(3,\)"):
        load_demos([str(tmp_path / "ok")], {"pos": (2,), "goal": (3,)}, POINT_ACTION, None)
    with pytest.raises(ConfigError, match=r"action shape \(2,\), the env's is \(7,\)"):
        load_demos([str(tmp_path / "ok")], POINT_OBS, (7,), None)


# ------------------------------------------------------------------------------------------ audit fields
def test_each_recorded_step_keeps_the_executed_action_the_intervened_flag_and_the_policy_version(tmp_path):
    torch.manual_seed(0)
    env = TakeoverPointEnv(every=3, seed=0)
    agent = make_agent(SimpleNamespace(train=TrainConfig(sac=SacConfig(hidden_sizes=(8,)))), env.spec, "cpu")
    agent.updates = 41  # as if the policy had been trained 41 steps
    seen = []
    rec = EpisodeRecorder(tmp_path)
    _, _, length, interventions = run_episode(env, agent, np.random.default_rng(0), rec, "train", on_step=seen.append)
    assert length == 25 and interventions == 9  # steps 0, 3, ..., 24
    ep = load_episode(episode_files(tmp_path)[0])
    flags = np.arange(25) % 3 == 0
    np.testing.assert_array_equal(ep.intervened, flags)
    np.testing.assert_array_equal(ep.policy_version, np.where(flags, -1, 41))
    # the stored action is the operator's where they took over: the expert's move from the previous obs
    expert = np.stack([point_expert({"pos": ep.obs["pos"][t], "goal": ep.obs["goal"][t]}) for t in range(25)])
    np.testing.assert_allclose(ep.action[flags], expert[flags], atol=1e-6)
    assert [bool(s["intervened"][0]) for s in seen] == flags.tolist()  # the learner gets the same flags...
    np.testing.assert_allclose(np.concatenate([s["action"] for s in seen]), ep.action)  # ...and executed actions
    warmup = EpisodeRecorder(tmp_path / "w")
    run_episode(PointReachEnv(), agent, np.random.default_rng(0), warmup, "train", random_actions=True)
    assert (load_episode(episode_files(tmp_path / "w")[0]).policy_version == -1).all()


def test_the_stored_action_is_what_the_env_says_the_arm_executed_else_the_policys():
    policy = np.array([0.5, -0.5], np.float32)  # one instance
    plain = PointReachEnv()
    plain.reset(seed=0)
    step = plain.step(policy)  # an env without a teleop device: the policy's action was executed
    assert step.intervened.tolist() == [False] and step.executed.tolist() == [[0.5, -0.5]]
    taken = TakeoverPointEnv(every=1)
    obs, _ = taken.reset(seed=0).gym()
    step = taken.step(policy)  # the operator's action was executed instead
    assert step.intervened.tolist() == [True]
    np.testing.assert_array_equal(step.executed, point_expert(obs)[None])
    # (a batch of instances: tests/rl/test_episode_loop.py, through the episode loop's view of the env)


def test_episodes_written_before_the_audit_fields_load_as_nobody_intervened_and_no_version(tmp_path):
    _record_demos(tmp_path, 1, kind="train")
    path = episode_files(tmp_path)[0]
    with np.load(path) as z:
        old = {k: z[k] for k in z.files if k not in ("intervened", "policy_version")}
    np.savez(path, **old)
    ep = load_episode(path)
    assert ep.intervened.dtype == bool and not ep.intervened.any()
    assert ep.policy_version.dtype == np.int64 and (ep.policy_version == -1).all()


def test_a_crash_cut_episode_keeps_its_audit_fields(tmp_path):
    rec = EpisodeRecorder(tmp_path)
    env = PointReachEnv()
    obs, _ = env.reset().gym()
    rec.begin(obs)
    for t in range(3):
        obs, r, te, tr, _ = env.step(np.zeros(2, np.float32)).gym()
        rec.step(np.zeros(2), r, te, tr, obs, intervened=t == 1, policy_version=t * 10)
    rec.close()  # the process dies: only the .steps file is left
    ep = load_episode(episode_files(tmp_path)[0])
    assert ep.intervened.tolist() == [False, True, False] and ep.policy_version.tolist() == [0, 10, 20]


# ------------------------------------------------------------------------------------------ the local runner
def _config(**train):
    base = {
        "runner": "local",
        "max_env_steps": 200,
        "learning_starts": 50,
        "eval_every_steps": 1000,
        "eval_episodes": 1,
        "log_every_steps": 50,
        "checkpoint_every_steps": 100,
        "progress": False,
        "sac": {"hidden_sizes": [16, 16], "batch_size": 16},
    }
    base.update(train)
    return load_config_dict({"cluster": CLUSTER, "train": base})


def _intervened_steps_before(rd: RunDir, env_steps: int) -> int:
    """Intervention steps of the train episodes on disk that ended by ``env_steps`` (25-step episodes)."""
    eps = [load_episode(p) for p in episode_files(rd.episodes, "train")]
    return int(sum(ep.intervened.sum() for ep in eps[: env_steps // 25]))


@pytest.mark.timeout(120)
def test_a_local_run_with_demos_and_interventions_and_its_resume_refill_both_buffers(tmp_path):
    demo_steps = _record_demos(tmp_path / "demos", 2)
    config = _config(demos=[str(tmp_path / "demos")])
    rd = RunDir(tmp_path / "run")
    rd.write_config(config)
    train_local(config, rd, env_factory=lambda c, r: TakeoverPointEnv(every=4, seed=c.train.seed))
    rows = [r for r in rd.metrics() if r.get("train/demo_buffer_size") is not None]
    assert rows and all(r["train/intervention_rate"] == pytest.approx(7 / 25) for r in rows)
    for r in rows:  # demo buffer = the demos + every intervention step so far
        assert r["train/demo_buffer_size"] == demo_steps + _intervened_steps_before(rd, r["env_steps"])
    first_run = len(rows)

    more = _config(demos=[str(tmp_path / "demos")], max_env_steps=300)
    train_local(more, rd, env_factory=lambda c, r: TakeoverPointEnv(every=4, seed=c.train.seed + 1), resume=True)
    resumed = [r for r in rd.metrics() if r.get("train/demo_buffer_size") is not None][first_run:]
    assert resumed and min(r["env_steps"] for r in resumed) > 200
    for r in resumed:  # reloaded: the demos from train.demos, the run's interventions from its episodes
        assert r["train/demo_buffer_size"] == demo_steps + _intervened_steps_before(rd, r["env_steps"])
    assert rd.plot_path.exists()


@pytest.mark.timeout(60)
def test_a_benchmarks_scripted_operator_can_be_kept_out_of_evaluation_with_an_eval_env_of_its_own(tmp_path):
    rd = RunDir(tmp_path / "run")
    train_local(
        _config(max_env_steps=75, eval_every_steps=50),
        rd,
        env_factory=lambda c, r: TakeoverPointEnv(),
        eval_env_factory=lambda c, r: PointReachEnv(seed=99),
    )
    train_eps = [load_episode(p) for p in episode_files(rd.episodes, "train")]
    eval_eps = [load_episode(p) for p in episode_files(rd.episodes, "eval")]
    assert eval_eps and not any(ep.intervened.any() for ep in eval_eps)
    assert all(ep.intervened.sum() == 9 for ep in train_eps)


@pytest.mark.timeout(60)
def test_a_high_update_to_data_ratio_runs_every_update_it_owes(tmp_path):
    rd = RunDir(tmp_path / "run")
    stop = train_local(_config(utd_ratio=8, max_env_steps=75), rd, env_factory=lambda c, r: PointReachEnv())
    status = json.loads(rd.status_path.read_text())
    assert stop.status == "stopped" and status["env_steps"] == 75
    assert status["updates"] == 8 * (75 - 50)


def test_a_bad_demo_directory_stops_a_local_run_before_any_step(tmp_path):
    rd = RunDir(tmp_path / "run")
    with pytest.raises(ConfigError, match=r"train.demos\[0\]"):
        train_local(_config(demos=[str(tmp_path / "missing")]), rd, env_factory=lambda c, r: PointReachEnv())
    assert not episode_files(rd.episodes)
