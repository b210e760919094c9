"""SAC from camera images: one encoder shared by the critics and the actor (the actor's gradient stopped),
a frozen pretrained backbone, weights from a file, DrQ random shifts in the update, and the weights that
rollout workers act with. Tiny: 64x64 images, batch 8, two critics."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from rlhw.config.train import SacConfig
from rlhw.config.vision import ImageEncoderConfig
from rlhw.errors import ConfigError
from rlhw.rl.sac import SAC, ObsLayout, build_actor
from rlhw.vision.encoders import build_image_encoder, save_encoder_weights

SIZE = (64, 64, 3)
CAMERAS = ("image_front", "image_wrist")


def _layout(cameras=CAMERAS) -> ObsLayout:
    shapes, dtypes = {"pos": (3,)}, {"pos": "float32"}
    for c in cameras:
        shapes[c], dtypes[c] = SIZE, "uint8"
    return ObsLayout.from_shapes(shapes, dtypes)


def _sac(seed: int = 0, augment_seed: int = 0, cameras=CAMERAS, target_features: str = "online", **encoder) -> SAC:
    torch.manual_seed(seed)
    cfg = SacConfig(
        hidden_sizes=(16, 16),
        batch_size=8,
        critic_ensemble=2,
        critic_subset=2,
        target_features=target_features,
        image_encoder=ImageEncoderConfig(features=16, **encoder),
    )
    return SAC(_layout(cameras), -np.ones(2), np.ones(2), cfg, augment_seed=augment_seed)


def _batch(n: int = 8, seed: int = 0, cameras=CAMERAS) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    b = {
        "action": rng.uniform(-1, 1, (n, 2)).astype(np.float32),
        "reward": rng.random(n, np.float32),
        "terminated": np.zeros(n, np.float32),
    }
    for prefix in ("obs/", "next_obs/"):
        b[prefix + "pos"] = rng.random((n, 3), np.float32)
        for c in cameras:
            b[prefix + c] = rng.integers(0, 256, (n, *SIZE), dtype=np.uint8)
    return b


def _obs(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {k[4:]: v for k, v in batch.items() if k.startswith("obs/")}


def _snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _changed(before: dict[str, torch.Tensor], module: torch.nn.Module) -> set[str]:
    return {k for k, v in module.state_dict().items() if not torch.equal(v, before[k])}


def test_all_critics_and_the_actor_read_one_encoder_per_camera_and_the_target_has_its_own_copy():
    sac = _sac()
    assert sac.critic.encoder is sac.encoder and sac.actor.encoder is sac.encoder
    assert set(sac.encoder.cnns) == set(CAMERAS)
    assert sac.critic_target.encoder is not sac.encoder
    target = sac.critic_target.encoder.state_dict()
    assert all(torch.equal(v, target[k]) for k, v in sac.encoder.state_dict().items())
    # each encoder parameter is optimised once, by the critic's optimizer only
    encoder_ids = {id(p) for p in sac.encoder.parameters()}
    critic_ids = [id(p) for g in sac.q_optimizer.param_groups for p in g["params"]]
    actor_ids = {id(p) for g in sac.actor_optimizer.param_groups for p in g["params"]}
    assert encoder_ids <= set(critic_ids) and len(critic_ids) == len(set(critic_ids))
    assert not encoder_ids & actor_ids


def test_the_actor_loss_does_not_reach_the_encoder_while_the_critic_loss_trains_it():
    sac, batch = _sac(), _batch()
    action, log_prob, _ = sac.actor.sample(sac.batch_obs(batch, "obs/"))
    (action.sum() + log_prob.sum()).backward()
    assert all(p.grad is None for p in sac.encoder.parameters()), "the actor's gradient stops at the features"
    assert all(p.grad is not None for p in sac.actor.trunk.parameters())

    sac.actor_optimizer.zero_grad(set_to_none=True)
    before, actor_before = _snapshot(sac.encoder), _snapshot(sac.actor.trunk)
    critic_step = sac.q_optimizer.step
    sac.q_optimizer.step = lambda: None  # only the actor and the temperature may move now
    sac.update(batch)
    assert _changed(before, sac.encoder) == set(), "nothing but the critic's step moves the encoder"
    assert _changed(actor_before, sac.actor.trunk), "the actor still learns"
    sac.q_optimizer.step = critic_step
    sac.update(batch)
    assert any(".head." in k for k in _changed(before, sac.encoder)), "the critic loss trains the encoder"


def test_a_frozen_resnet10_keeps_its_backbone_while_the_heads_learn():
    sac, batch = (
        _sac(kind="resnet10", frozen=True, augment_pad=0, cameras=("image_front",)),
        _batch(cameras=("image_front",)),
    )
    enc = sac.encoder.cnns["image_front"]
    assert not any(p.requires_grad for p in enc.backbone.parameters())
    trainable = {id(p) for g in sac.q_optimizer.param_groups for p in g["params"]}
    assert not {id(p) for p in enc.backbone.parameters()} & trainable, "the optimizer holds no frozen weight"
    backbone, head = _snapshot(enc.backbone), _snapshot(enc.head)
    target_backbone = _snapshot(sac.critic_target.encoder.cnns["image_front"].backbone)
    for _ in range(2):
        sac.update(batch)
    assert _changed(backbone, enc.backbone) == set(), "weights and BatchNorm statistics stay as loaded"
    assert _changed(target_backbone, sac.critic_target.encoder.cnns["image_front"].backbone) == set()
    assert _changed(head, enc.head) == {"0.weight", "0.bias", "1.weight", "1.bias"}


def test_encoder_weights_load_from_a_file_into_the_agent_and_its_target_copy(tmp_path):
    torch.manual_seed(7)
    saved = build_image_encoder(ImageEncoderConfig(features=16), SIZE)
    path = save_encoder_weights(saved, tmp_path / "front.pt")
    sac = _sac(weights=str(path), cameras=("image_front",))
    for encoder in (sac.encoder, sac.critic_target.encoder):
        got = encoder.cnns["image_front"].state_dict()
        assert all(torch.equal(v, got[k]) for k, v in saved.state_dict().items())


def test_a_missing_weights_file_is_a_config_error_naming_the_field(tmp_path):
    with pytest.raises(ConfigError) as e:
        _sac(weights=str(tmp_path / "nowhere.pt"))
    assert e.value.path == "train.sac.image_encoder.weights"
    assert "does not exist" in e.value.message


def test_image_features_is_refused_with_its_new_name():
    with pytest.raises(ValueError, match="image_encoder.features"):
        SacConfig(image_features=32)


def _first_loss(augment_seed: int, **encoder) -> float:
    sac = _sac(seed=0, augment_seed=augment_seed, **encoder)
    torch.manual_seed(1)  # the target's critic subset and the policy's samples
    return sac.update(_batch())["losses/qf_loss"]


def test_the_update_shifts_training_images_with_its_own_seeded_generator():
    assert _first_loss(1) == _first_loss(1)
    assert _first_loss(1) != _first_loss(2)
    assert _first_loss(1, augment_pad=0) == _first_loss(2, augment_pad=0), "augment_pad=0 turns it off"


def test_augmentation_changes_images_but_not_their_shape_or_dtype():
    sac, batch = _sac(), _batch()
    shifted = sac.batch_obs(batch, "obs/")["image_front"]
    assert shifted.shape == (8, *SIZE) and shifted.dtype == torch.uint8
    assert not torch.equal(shifted, torch.as_tensor(batch["obs/image_front"]))


@pytest.mark.parametrize("kind", ["cnn", "resnet10"])
def test_a_rollout_worker_acts_exactly_as_the_learner_after_loading_its_policy_state(kind):
    sac, batch = _sac(kind=kind, cameras=("image_front",)), _batch(cameras=("image_front",))
    sac.update(batch)  # weights and (for the ResNet) BatchNorm statistics move away from their initial values
    # the rollout worker's machine need not have the weights file: it receives the weights
    cfg = sac.cfg.model_copy(update={"image_encoder": sac.cfg.image_encoder.model_copy(update={"weights": "/x.pt"})})
    actor = build_actor(sac.layout, sac.act_low, sac.act_high, cfg).eval()
    # through the weights channel as numpy arrays, as LearnerWorker.publish_weights sends them
    actor.load_state_dict({k: torch.as_tensor(v.numpy()) for k, v in sac.policy_state().items()})
    assert any(k.startswith("encoder.cnns.image_front.") for k in sac.policy_state())
    from rlhw.rl.sac import obs_to_tensors

    obs = _obs(batch)
    with torch.no_grad():
        _, _, mean = actor.sample(obs_to_tensors(obs, sac.layout, torch.device("cpu")))
    np.testing.assert_array_equal(mean.numpy(), sac.act(obs, deterministic=True))


def test_a_checkpoint_from_before_the_shared_encoder_is_refused_with_the_fix():
    sac = _sac(cameras=("image_front",))
    state = sac.state_dict()
    old = {k.replace(".backbone.", ".conv."): v for k, v in state["critic"].items()}
    with pytest.raises(ConfigError, match="written before rlhw's shared image encoder") as e:
        sac.load_state_dict({**state, "critic": old})
    assert e.value.path == "train.sac.image_encoder"
    other = _sac(kind="resnet10", frozen=True, cameras=("image_front",))
    with pytest.raises(ConfigError, match="kind, features"):
        other.load_state_dict(state)
    sac.load_state_dict(state)  # its own checkpoint resumes


def test_a_proprio_only_agent_has_no_encoder_weights_and_no_augmentation():
    torch.manual_seed(0)
    layout = ObsLayout.from_shapes({"pos": (3,)}, {"pos": "float32"})
    sac = SAC(layout, -np.ones(2), np.ones(2), SacConfig(hidden_sizes=(16, 16)))
    assert sac.augment is None and list(sac.encoder.parameters()) == []
    assert set(sac.policy_state()) == {
        "trunk.0.weight",
        "trunk.0.bias",
        "trunk.2.weight",
        "trunk.2.bias",
        "trunk.4.weight",
        "trunk.4.bias",
        "scale",
        "bias",
    }


# ---- the fast update against the straightforward one
def _plain_features(encoder, obs: dict[str, torch.Tensor]) -> torch.Tensor:
    """The Encoder's features with each camera's normalisation written out (no folding)."""
    cams = [
        encoder.cnns[n].head(encoder.cnns[n].backbone(encoder.cnns[n].normalise(obs[n])))
        for n, _ in encoder.layout.images
    ]
    return torch.cat([obs["proprio"], *cams], dim=-1)


def _plain_update(sac: SAC, batch: dict[str, np.ndarray]) -> dict[str, float]:
    """One SAC step written the straightforward way: a separate encoder pass per use (the next action through the
    online encoder, the target Q through the target critics' own copy), the normalisation written out, and the
    actor's loss backpropagated everywhere. Same random draws, in the same order, as `SAC.update`."""
    obs, next_obs = sac.batch_obs(batch, "obs/"), sac.batch_obs(batch, "next_obs/")
    actions, rewards = torch.as_tensor(batch["action"]), torch.as_tensor(batch["reward"]).view(-1, 1)
    alpha = sac.log_alpha.exp().detach()
    with torch.no_grad():
        next_actions, next_log_pi, _ = sac.actor.sample_features(_plain_features(sac.encoder, next_obs))
        subset = torch.randperm(sac.critic.n)[: sac.cfg.critic_subset]
        q_next = sac.critic_target.q(_plain_features(sac.critic_target.encoder, next_obs), next_actions, subset)
        target = rewards + sac.cfg.gamma * (q_next.min(dim=0).values - alpha * next_log_pi)
    features = _plain_features(sac.encoder, obs)
    qf_loss = (sac.critic.q(features, actions) - target).pow(2).mean(dim=(1, 2)).sum()
    sac.q_optimizer.zero_grad()
    qf_loss.backward()
    sac.q_optimizer.step()
    pi, log_pi, _ = sac.actor.sample_features(features.detach())
    actor_loss = (alpha * log_pi - sac.critic.q(features.detach(), pi).mean(dim=0)).mean()
    sac.actor_optimizer.zero_grad()
    actor_loss.backward()
    sac.actor_optimizer.step()
    return {"losses/qf_loss": qf_loss.item() / sac.critic.n, "losses/actor_loss": actor_loss.item()}


def _with_sgd(sac: SAC) -> SAC:
    """Plain gradient steps, so that equal gradients give equal weights (Adam's first step is lr * sign(g),
    which float rounding can flip where a gradient is ~0)."""
    sac.q_optimizer = torch.optim.SGD(sac.critic_params, lr=0.01)
    sac.actor_optimizer = torch.optim.SGD(sac.actor_params, lr=0.01)
    return sac


@pytest.mark.parametrize("target_features", ["online", "target"])
def test_the_update_computes_what_the_straightforward_step_computes(target_features):
    """At the first update the target critics' encoder still equals the online one, so both
    ``train.sac.target_features`` must give the straightforward step's losses and weights."""
    fast, plain = (_with_sgd(_sac(seed=0, augment_seed=3, target_features=target_features)) for _ in range(2))
    batch = _batch()
    torch.manual_seed(1)
    got = fast.update(batch)
    torch.manual_seed(1)
    want = _plain_update(plain, batch)
    assert got["losses/qf_loss"] == pytest.approx(want["losses/qf_loss"], rel=1e-5)
    assert got["losses/actor_loss"] == pytest.approx(want["losses/actor_loss"], rel=1e-5, abs=1e-6)
    for module in ("actor", "critic"):
        mine, theirs = getattr(fast, module).state_dict(), getattr(plain, module).state_dict()
        for k, v in mine.items():
            torch.testing.assert_close(v, theirs[k], rtol=1e-5, atol=1e-6, msg=f"{module}.{k}")


def test_with_online_target_features_the_target_encoder_is_not_run_and_next_obs_is_encoded_once():
    calls = {"online": 0, "target": 0}
    for mode in ("online", "target"):
        sac = _sac(target_features=mode, cameras=("image_front",))
        online, target = sac.encoder.cnns["image_front"], sac.critic_target.encoder.cnns["image_front"]
        counts = {"online": 0, "target": 0}
        online.register_forward_hook(lambda *_: counts.__setitem__("online", counts["online"] + 1))
        target.register_forward_hook(lambda *_: counts.__setitem__("target", counts["target"] + 1))
        sac.update(_batch(cameras=("image_front",)))
        calls[mode] = dict(counts)
    assert calls["online"] == {"online": 2, "target": 0}, "obs and next_obs, each once, through the online encoder"
    assert calls["target"] == {"online": 2, "target": 1}


def test_the_actor_step_adds_no_gradient_to_the_critics():
    """The actor's backward pass goes through the critics to the action but computes no critic weight gradient
    (the critics are not stepped by it): at the actor's step the critics hold exactly the critic loss's gradients."""
    sac, seen = _sac(cameras=("image_front",)), {}
    critic_step, actor_step = sac.q_optimizer.step, sac.actor_optimizer.step

    def snapshot(key, step):
        def wrapped():
            seen[key] = [p.grad.clone() for p in sac.critic_params]
            step()

        return wrapped

    sac.q_optimizer.step, sac.actor_optimizer.step = snapshot("critic", critic_step), snapshot("actor", actor_step)
    sac.update(_batch(cameras=("image_front",)))
    assert all(torch.equal(a, b) for a, b in zip(seen["critic"], seen["actor"]))
    assert all(p.grad is not None for p in sac.actor.trunk.parameters())


def test_an_unknown_target_features_value_is_refused_naming_the_field():
    with pytest.raises(ValueError, match="target_features"):
        SacConfig(target_features="both")
