"""SAC: shapes, a learning sanity check on a tiny problem, and data-parallel weight agreement."""

from __future__ import annotations

import socket
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.multiprocessing as mp

from rlhw.config.train import SacConfig, TrainConfig
from rlhw.rl.local import make_agent, run_episode
from rlhw.rl.replay import ReplayBuffer
from rlhw.rl.sac import SAC, ObsLayout
from tests.rl.point_env import PointReachEnv


def _batch(n=8, img=False):
    b = {
        "obs/pos": np.random.rand(n, 2).astype(np.float32),
        "obs/goal": np.random.rand(n, 2).astype(np.float32),
        "next_obs/pos": np.random.rand(n, 2).astype(np.float32),
        "next_obs/goal": np.random.rand(n, 2).astype(np.float32),
        "action": np.random.uniform(-1, 1, (n, 2)).astype(np.float32),
        "reward": np.random.rand(n).astype(np.float32),
        "terminated": np.zeros(n, np.float32),
    }
    if img:
        b["obs/image_front"] = np.random.randint(0, 255, (n, 32, 32, 3), dtype=np.uint8)
        b["next_obs/image_front"] = np.random.randint(0, 255, (n, 32, 32, 3), dtype=np.uint8)
    return b


def _small_sac(img=False):
    shapes = {"pos": (2,), "goal": (2,)}
    dtypes = {"pos": "float32", "goal": "float32"}
    if img:
        shapes["image_front"], dtypes["image_front"] = (32, 32, 3), "uint8"
    layout = ObsLayout.from_shapes(shapes, dtypes)
    return SAC(layout, -np.ones(2), np.ones(2), SacConfig(hidden_sizes=(32, 32), batch_size=8))


@pytest.mark.timeout(60)
def test_update_returns_finite_losses_and_changes_the_weights():
    sac = _small_sac()
    before = sac.weights_digest()
    metrics = sac.update(_batch())
    assert set(metrics) >= {"losses/qf_loss", "losses/actor_loss", "losses/alpha", "losses/entropy"}
    assert all(np.isfinite(v) for v in metrics.values())
    assert sac.weights_digest() != before
    assert sac.updates == 1


def _sum_abs(sac):
    weights = {id(p): p for m in sac.modules() for p in m.parameters()}  # the shared encoder once
    return sum(float(p.detach().double().abs().sum()) for p in weights.values())


@pytest.mark.timeout(60)
def test_the_weights_digest_sees_a_sign_flip_and_a_permutation_that_a_sum_of_abs_misses():
    sac = _small_sac()
    before, before_sum = sac.weights_digest(), _sum_abs(sac)
    weight = sac.critic.head.weight
    with torch.no_grad():
        weight.view(-1)[0].neg_()  # a sign flip
    assert _sum_abs(sac) == before_sum and sac.weights_digest() != before
    with torch.no_grad():
        weight.view(-1)[0].neg_()
    assert sac.weights_digest() == before  # undone: the same bytes, the same digest
    with torch.no_grad():
        flat = weight.view(-1)
        flat[[0, 1]] = flat[[1, 0]].clone()  # two weights swapped
        assert flat[0] != flat[1]
    assert _sum_abs(sac) == pytest.approx(before_sum, rel=1e-12)
    assert sac.weights_digest() != before


@pytest.mark.timeout(60)
def test_agents_with_the_same_weights_have_the_same_digest():
    torch.manual_seed(1)
    a = _small_sac()
    torch.manual_seed(2)
    b = _small_sac()
    assert a.weights_digest() != b.weights_digest()
    b.load_state_dict(a.state_dict())
    assert a.weights_digest() == b.weights_digest()


@pytest.mark.timeout(60)
def test_actions_have_the_action_shape_and_stay_in_bounds():
    sac = _small_sac()
    obs = {"pos": np.zeros((5, 2), np.float32), "goal": np.ones((5, 2), np.float32)}
    for deterministic in (False, True):
        a = sac.act(obs, deterministic)
        assert a.shape == (5, 2) and a.dtype == np.float32
        assert np.all(a >= -1) and np.all(a <= 1)


@pytest.mark.timeout(60)
def test_acting_draws_the_same_actions_as_the_updates_sampling_from_the_same_random_state():
    from rlhw.rl.sac import obs_to_tensors

    sac = _small_sac(img=True)
    sac.encoder.eval()
    t = obs_to_tensors(
        {
            "pos": np.random.rand(4, 2).astype(np.float32),
            "goal": np.zeros((4, 2), np.float32),
            "image_front": np.random.randint(0, 255, (4, 32, 32, 3), dtype=np.uint8),
        },
        sac.layout,
        sac.device,
    )
    with torch.no_grad():
        torch.manual_seed(3)
        sampled, _, sampled_mean = sac.actor.sample(t)  # the plain path, with its log-prob
        torch.manual_seed(3)
        acted, acted_mean = sac.actor.act(t)  # the acting path
    torch.testing.assert_close(acted, sampled)
    torch.testing.assert_close(acted_mean, sampled_mean)


@pytest.mark.timeout(60)
def test_image_observations_go_through_the_cnn_encoder():
    sac = _small_sac(img=True)
    assert [n for n, _ in sac.layout.images] == ["image_front"]
    assert "image_front" in sac.actor.encoder.cnns
    m = sac.update(_batch(img=True))
    assert np.isfinite(m["losses/qf_loss"])


def test_observation_layout_rejects_unusable_entries_with_a_clear_message():
    with pytest.raises(ValueError, match="depth"):
        ObsLayout.from_shapes({"depth": (4, 4)}, {"depth": "float32"})


@pytest.mark.timeout(120)
def test_sac_learns_point_reach():
    """The learner itself (no pipeline): a 2-D point reach goes from ~0 to >= 80% success."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    env = PointReachEnv(seed=0)
    cfg = TrainConfig(sac=SacConfig(hidden_sizes=(64, 64), batch_size=64))
    agent = make_agent(SimpleNamespace(train=cfg), env.spec, "cpu")
    rb, rng, steps = ReplayBuffer(10_000), np.random.default_rng(0), [0]

    def learn(transitions):
        rb.add_batch(transitions)
        steps[0] += 1
        if steps[0] > 300 and steps[0] % 2 == 0:
            agent.update(rb.sample(64))

    before = np.mean([run_episode(env, agent, rng, None, "eval")[1] for _ in range(20)])
    for _ in range(70):
        run_episode(env, agent, rng, None, "train", random_actions=steps[0] < 300, on_step=learn)
    after = np.mean([run_episode(env, agent, rng, None, "eval")[1] for _ in range(20)])
    assert before <= 0.3
    assert after >= 0.8, f"success after training {after}"


def _rank_main(rank, world, port, out):
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.manual_seed(100 + rank)  # different initial weights per rank on purpose
    np.random.seed(rank)
    sac = _small_sac()
    sac.broadcast_weights(0)
    for _ in range(3):
        sac.update(_batch())  # different data per rank
    out[rank] = sac.weights_digest()
    dist.destroy_process_group()


@pytest.mark.timeout(120)
def test_all_reduced_updates_keep_two_ranks_identical_despite_different_data():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    out = ctx.Manager().dict()
    procs = [ctx.Process(target=_rank_main, args=(r, 2, port, out)) for r in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(100)
        assert p.exitcode == 0
    assert out[0] == out[1]  # bit-identical weights (a hash of their bytes)
