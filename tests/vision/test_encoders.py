"""Image encoders: every kind on 64 and 128 px inputs, weights from a local file, clear errors, freezing."""

from __future__ import annotations

import pytest
import torch

from rlhw.config.vision import ImageEncoderConfig
from rlhw.errors import ConfigError
from rlhw.vision.encoders import build_image_encoder, save_encoder_weights
from rlhw.vision.resnet import resnet_trunk


def _batch(n: int, size: int) -> torch.Tensor:
    return torch.randint(0, 256, (n, size, size, 3), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("kind", ["cnn", "resnet10", "resnet18"])
@pytest.mark.parametrize("size", [64, 128])
def test_each_encoder_kind_maps_uint8_images_to_layernormed_features(kind, size):
    enc = build_image_encoder(ImageEncoderConfig(kind=kind, features=32), (size, size, 3))
    out = enc(_batch(2, size))
    assert out.shape == (2, 32) and out.dtype == torch.float32 and torch.isfinite(out).all()
    assert isinstance(enc.head[1], torch.nn.LayerNorm)


def test_the_resnets_have_torchvisions_parameter_layout():
    r18 = resnet_trunk("resnet18")
    assert sum(p.numel() for p in r18.parameters()) == 11_689_512 - 513_000  # torchvision resnet18 without fc
    keys = set(r18.state_dict())
    assert {"conv1.weight", "layer4.1.bn2.running_var", "layer2.0.downsample.0.weight"} <= keys
    assert "layer1.1.conv1.weight" not in resnet_trunk("resnet10").state_dict()  # one block per stage


def test_weights_saved_from_one_encoder_load_into_another(tmp_path):
    cfg = ImageEncoderConfig(kind="resnet10", features=16)
    a = build_image_encoder(cfg, (64, 64, 3))
    path = save_encoder_weights(a, tmp_path / "enc.pt")
    b = build_image_encoder(cfg.model_copy(update={"weights": str(path)}), (64, 64, 3))
    a.eval(), b.eval()
    x = _batch(2, 64)
    assert torch.equal(a(x), b(x))


def test_a_backbone_only_file_loads_the_backbone_and_ignores_an_imagenet_classifier(tmp_path):
    trunk = resnet_trunk("resnet10")
    state = {**trunk.state_dict(), "fc.weight": torch.zeros(1000, 512), "fc.bias": torch.zeros(1000)}
    torch.save(state, tmp_path / "r10.pt")
    enc = build_image_encoder(ImageEncoderConfig(kind="resnet10", weights=str(tmp_path / "r10.pt")), (64, 64, 3))
    assert torch.equal(enc.backbone.conv1.weight, trunk.conv1.weight)


def test_a_missing_weights_file_names_the_config_field(tmp_path):
    with pytest.raises(ConfigError) as err:
        build_image_encoder(
            ImageEncoderConfig(weights=str(tmp_path / "nope.pt")), (64, 64, 3), field="agent.image_encoder"
        )
    assert err.value.path == "agent.image_encoder.weights" and "does not exist" in str(err.value)


def test_an_unreadable_weights_file_is_a_clear_error(tmp_path):
    (tmp_path / "junk.pt").write_bytes(b"not a torch file")
    with pytest.raises(ConfigError, match="cannot read weights file"):
        build_image_encoder(ImageEncoderConfig(weights=str(tmp_path / "junk.pt")), (64, 64, 3))


def test_weights_of_another_architecture_say_which_keys_and_shapes_do_not_match(tmp_path):
    path = save_encoder_weights(
        build_image_encoder(ImageEncoderConfig(kind="resnet18"), (64, 64, 3)), tmp_path / "r18.pt"
    )
    with pytest.raises(ConfigError) as err:
        build_image_encoder(ImageEncoderConfig(kind="resnet10", weights=str(path)), (64, 64, 3))
    assert err.value.path == "image_encoder.weights"
    assert "unexpected keys (" in str(err.value) and "backbone.layer1.1." in str(err.value)
    cnn = save_encoder_weights(
        build_image_encoder(ImageEncoderConfig(kind="cnn", features=8), (64, 64, 3)), tmp_path / "c.pt"
    )
    with pytest.raises(
        ConfigError, match=r"shape mismatch \(\d+\): head.0.weight: file \(8, 784\) vs model \(16, 784\)"
    ):
        build_image_encoder(ImageEncoderConfig(kind="cnn", features=16, weights=str(cnn)), (64, 64, 3))


def test_a_frozen_encoder_keeps_its_backbone_fixed_and_in_eval_mode_while_the_head_learns():
    enc = build_image_encoder(ImageEncoderConfig(kind="resnet10", frozen=True, features=8), (64, 64, 3))
    enc.train()
    assert not any(p.requires_grad for p in enc.backbone.parameters())
    assert all(p.requires_grad for p in enc.head.parameters())
    assert not enc.backbone.training and enc.head.training
    stats = enc.backbone.bn1.running_mean.clone()
    enc(_batch(4, 64)).sum().backward()
    assert torch.equal(enc.backbone.bn1.running_mean, stats)  # BatchNorm statistics did not move
    assert enc.head[0].weight.grad is not None


def test_an_image_size_outside_the_encoders_range_is_a_config_error():
    with pytest.raises(ConfigError, match="32 to 256 px"):
        build_image_encoder(ImageEncoderConfig(), (16, 16, 3))


@pytest.mark.parametrize("kind, folded", [("cnn", True), ("resnet10", False)])
def test_the_fast_forward_matches_the_normalisation_written_out_in_outputs_and_gradients(kind, folded):
    """`forward` folds (x / 255 - mean) / std into the cnn's unpadded first conv (a ResNet's padded conv
    gets one fused multiply-add instead); both must compute what the written-out form computes."""
    torch.manual_seed(0)
    enc = build_image_encoder(ImageEncoderConfig(kind=kind, features=32), (64, 64, 3))
    assert enc.fold_into_first_conv is folded
    images = _batch(4, 64)
    fast = enc(images)
    fast.square().sum().backward()
    fast_grads = {n: p.grad.clone() for n, p in enc.named_parameters()}
    enc.zero_grad(set_to_none=True)
    plain = enc.head(enc.backbone(enc.normalise(images)))
    plain.square().sum().backward()
    torch.testing.assert_close(fast, plain, rtol=1e-5, atol=1e-5)
    for name, p in enc.named_parameters():  # float rounding, scaled to each gradient's size (BatchNorm sums many terms)
        torch.testing.assert_close(fast_grads[name], p.grad, rtol=1e-4, atol=1e-5 * float(p.grad.abs().max()), msg=name)
    first = enc.backbone[0] if folded else enc.backbone.conv1
    assert first.weight.grad.abs().sum() > 0, "the first layer learns through the folded weights"


def test_the_reference_normalisation_maps_the_cnns_pixels_to_minus_and_plus_a_half():
    enc = build_image_encoder(ImageEncoderConfig(kind="cnn"), (64, 64, 3))
    black, white = torch.zeros(1, 64, 64, 3, dtype=torch.uint8), torch.full((1, 64, 64, 3), 255, dtype=torch.uint8)
    assert torch.allclose(enc.normalise(black), torch.tensor(-0.5)) and torch.allclose(
        enc.normalise(white), torch.tensor(0.5)
    )
