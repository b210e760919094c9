"""Image encoders: uint8 camera images [B, H, W, 3] -> float features [B, features], LayerNorm'd.

Every kind is a convolutional *backbone* followed by the same *head* (Linear -> LayerNorm -> tanh), the
normalised bounded output that keeps critic learning stable from pixels (DrQ-v2, SERL, RLPD's LayerNorm):

- ``cnn``: the small CNN the SAC agent has used so far (three 3x3 stride-2 convs, 16 channels);
- ``resnet10`` / ``resnet18``: ResNet v1 with BasicBlocks (rlhw.vision.resnet, torchvision's layout),
  inputs normalised with the ImageNet mean and std, as pretrained ResNets expect.

Input normalisation ((x / 255 - mean) / std per channel) is one affine map per channel. Written out
over the whole batch it cost 3.6 ms of a 9 ms cnn forward pass (batch 128, 64 px, one thread), so it is
folded instead: into the first convolution's weights and bias when that convolution has no padding (the
cnn: the map commutes exactly into an unpadded conv), else one fused multiply-add (a ResNet pads its
first conv with zeros, which must stay zeros after normalising). `ImageEncoder.normalise` is the
straightforward form, kept as the reference the tests hold the fast path to.

Weights (``weights``) load from a local state_dict file, never from the network. Two layouts are
accepted: the whole encoder as `save_encoder_weights` writes it (keys ``backbone.*`` and ``head.*``), or
a bare backbone (e.g. a pretrained torchvision-layout ResNet; its ``fc.*`` classifier is ignored), in
which case the head starts from random init. Any other mismatch is an error that names the config field.

``frozen`` (SERL freezes a pretrained ResNet-10): the backbone's parameters get ``requires_grad=False``
and the backbone stays in eval mode even under ``.train()``, so BatchNorm statistics do not drift; the
small head still learns to map the fixed features to the task.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F

from rlhw.config.vision import ImageEncoderConfig
from rlhw.errors import ConfigError
from rlhw.vision.resnet import BLOCKS, resnet_trunk

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
MIN_SIZE, MAX_SIZE = 32, 256
#: Entries of a torchvision ResNet state_dict that belong to its ImageNet classifier, not the trunk.
CLASSIFIER_KEYS = ("fc.weight", "fc.bias")


def small_cnn(channels: int) -> nn.Sequential:
    """The agent's original CNN: three 3x3 stride-2 convolutions, 16 channels, flattened. The ReLUs work in
    place (a conv's backward needs its input, not its output), saving a batch-sized buffer each."""
    return nn.Sequential(
        nn.Conv2d(channels, 16, 3, stride=2),
        nn.ReLU(inplace=True),
        nn.Conv2d(16, 16, 3, stride=2),
        nn.ReLU(inplace=True),
        nn.Conv2d(16, 16, 3, stride=2),
        nn.ReLU(inplace=True),
        nn.Flatten(),
    )


def _starts_with_unpadded_conv(backbone: nn.Module) -> bool:
    """Whether a per-channel affine map of the input folds exactly into the backbone's first layer."""
    first = backbone[0] if isinstance(backbone, nn.Sequential) else None
    return isinstance(first, nn.Conv2d) and first.padding == (0, 0) and first.bias is not None


class ImageEncoder(nn.Module):
    """backbone -> head (Linear, LayerNorm, tanh). Input uint8 [B, H, W, C], output float32 [B, features]."""

    def __init__(self, kind: str, shape: tuple[int, int, int], features: int, frozen: bool = False):
        super().__init__()
        h, w, c = shape
        self.kind, self.shape, self.features, self.frozen = kind, (h, w, c), features, frozen
        self.backbone = small_cnn(c) if kind == "cnn" else resnet_trunk(kind, c)
        if kind == "cnn":
            mean, std = (0.5,) * c, (1.0,) * c  # x / 255 - 0.5, as the agent always did
        else:
            mean, std = IMAGENET_MEAN[:c] + (0.5,) * (c - 3), IMAGENET_STD[:c] + (0.25,) * (c - 3)
        self.register_buffer("mean", torch.tensor(mean, dtype=torch.float32).view(1, c, 1, 1), persistent=False)
        self.register_buffer("std", torch.tensor(std, dtype=torch.float32).view(1, c, 1, 1), persistent=False)
        # (x / 255 - mean) / std == x * scale + shift, per channel
        self.register_buffer("scale", 1.0 / (255.0 * self.std), persistent=False)
        self.register_buffer("shift", -self.mean / self.std, persistent=False)
        self.fold_into_first_conv = _starts_with_unpadded_conv(self.backbone)
        with torch.no_grad():
            n = self.backbone.eval()(torch.zeros(1, c, h, w)).shape[1]
        self.backbone.train()
        self.head = nn.Sequential(nn.Linear(n, features), nn.LayerNorm(features), nn.Tanh())
        if frozen:
            self.freeze_backbone()

    def freeze_backbone(self) -> None:
        self.frozen = True
        for p in self.backbone.parameters():
            p.requires_grad_(False)
        self.backbone.eval()

    def train(self, mode: bool = True) -> ImageEncoder:
        super().train(mode)
        if self.frozen:
            self.backbone.eval()  # BatchNorm keeps the statistics it was given
        return self

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = image.permute(0, 3, 1, 2)  # a view: NCHW indices over the channels-last bytes
        if not self.fold_into_first_conv:
            return self.head(self.backbone(torch.addcmul(self.shift, x, self.scale)))
        conv = self.backbone[0]
        # conv(x * scale + shift) == conv'(x), conv' = weights * scale, bias + sum(weights * shift): no padding
        weight = conv.weight * self.scale
        bias = conv.bias + (conv.weight * self.shift).sum(dim=(1, 2, 3))
        y = F.conv2d(x.float(), weight, bias, conv.stride, 0, conv.dilation, conv.groups)
        return self.head(self.backbone[1:](y))

    def normalise(self, image: torch.Tensor) -> torch.Tensor:
        """uint8 [B, H, W, C] -> the backbone's float input [B, C, H, W], written out step by step: the
        reference form of what `forward` folds away (``head(backbone(normalise(x)))`` == ``forward(x)``)."""
        return (image.permute(0, 3, 1, 2).float() / 255.0 - self.mean) / self.std


def build_image_encoder(
    config: ImageEncoderConfig, shape, features: int | None = None, field: str = "image_encoder"
) -> ImageEncoder:
    """The encoder ``config`` describes, for images of ``shape`` (H, W, C), with ``features`` outputs
    (default ``config.features``); weights loaded from ``config.weights`` when set, then frozen when asked.
    ``field`` is the config path used in error messages (e.g. ``agent.image_encoder``)."""
    h, w, c = (int(s) for s in shape)
    for axis, size in (("height", h), ("width", w)):
        if not MIN_SIZE <= size <= MAX_SIZE:
            raise ConfigError(
                f"{field}.kind",
                f"image {axis} {size} px: the encoders take {MIN_SIZE} to {MAX_SIZE} px "
                "(64-128 tested); set env.image_size",
            )
    encoder = ImageEncoder(config.kind, (h, w, c), int(features or config.features))
    if config.weights is not None:
        load_encoder_weights(encoder, config.weights, f"{field}.weights")
    if config.frozen:
        encoder.freeze_backbone()
    return encoder


def _read_state_dict(path: str, field: str) -> dict[str, torch.Tensor]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(
            field,
            f"weights file {path!r} does not exist; save one with rlhw.vision.encoders.save_encoder_weights "
            "or set it to null for random init",
        )
    try:
        state = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as e:  # a torn file, a pickle with code, not a torch file at all
        raise ConfigError(
            field, f"cannot read weights file {path!r} as a torch state_dict: {type(e).__name__}: {e}"
        ) from None
    if isinstance(state, dict) and "state_dict" in state and isinstance(state["state_dict"], dict):
        state = state["state_dict"]
    if not isinstance(state, dict) or not all(isinstance(k, str) and torch.is_tensor(v) for k, v in state.items()):
        raise ConfigError(field, f"weights file {path!r} does not hold a state_dict (a dict of name -> tensor)")
    return state


def _mismatch(expected: dict[str, torch.Tensor], given: dict[str, torch.Tensor]) -> str | None:
    missing = sorted(set(expected) - set(given))
    unexpected = sorted(set(given) - set(expected))
    shapes = [
        f"{k}: file {tuple(given[k].shape)} vs model {tuple(v.shape)}"
        for k, v in expected.items()
        if k in given and tuple(given[k].shape) != tuple(v.shape)
    ]
    parts = []
    for what, items in (("missing keys", missing), ("unexpected keys", unexpected), ("shape mismatch", shapes)):
        if items:
            parts.append(f"{what} ({len(items)}): " + ", ".join(items[:4]) + (" ..." if len(items) > 4 else ""))
    return "; ".join(parts) or None


def load_encoder_weights(encoder: ImageEncoder, path: str | os.PathLike, field: str = "image_encoder.weights") -> None:
    """Load a whole-encoder or backbone-only state_dict into ``encoder``; a ConfigError naming ``field``
    and what does not match (missing keys, unexpected keys, shapes) otherwise."""
    state = _read_state_dict(str(path), field)
    whole = any(k.startswith(("backbone.", "head.")) for k in state)
    target = encoder if whole else encoder.backbone
    if not whole:
        state = {k: v for k, v in state.items() if k not in CLASSIFIER_KEYS}
    problem = _mismatch(target.state_dict(), state)
    if problem:
        layout = "a whole encoder" if whole else "a backbone"
        raise ConfigError(
            field,
            f"weights file {str(path)!r} ({layout}) does not match a {encoder.kind} encoder for "
            f"{encoder.shape[0]}x{encoder.shape[1]}x{encoder.shape[2]} images with "
            f"{encoder.features} features: {problem}",
        )
    target.load_state_dict(state)


def save_encoder_weights(encoder: nn.Module, path: str | os.PathLike) -> Path:
    """Write ``encoder``'s state_dict (CPU tensors) to ``path`` atomically; it loads back with ``weights``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save({k: v.detach().cpu() for k, v in encoder.state_dict().items()}, tmp)
    os.replace(tmp, path)
    return path


ENCODER_KINDS = ("cnn", *BLOCKS)
