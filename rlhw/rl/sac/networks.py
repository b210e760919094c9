"""SAC's networks: the shared observation encoder, the tanh-squashed Gaussian actor and the critic ensemble.

- `Encoder`: obs dict -> one feature vector (proprio concat + one image encoder per camera, from
  rlhw.vision.encoders: `train.sac.image_encoder`). ONE Encoder is shared by the actor and every critic;
  the critic loss trains it, the actor reads its features with the gradient stopped (DrQ-v2, SERL).
- `Actor`: tanh-squashed Gaussian policy on the encoder's features; with its encoder, all acting needs
  (`build_actor` builds it alone, for a rollout worker).
- `CriticEnsemble`: N critics in ONE module (weights [N, in, out], one batched matmul per layer instead of N
  small modules; tools/bench_critics.py measures the cost), LayerNorm after each hidden layer (RLPD's order).

Module and parameter names here are the checkpoint's state-dict keys: renaming one breaks every saved run.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from rlhw.config.train import SacConfig
from rlhw.config.vision import ImageEncoderConfig
from rlhw.rl.sac.obs_layout import ObsLayout
from rlhw.vision.encoders import build_image_encoder

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
IMAGE_ENCODER_FIELD = "train.sac.image_encoder"


def mlp(inp: int, hidden: tuple[int, ...], out: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [nn.Linear(inp, h), nn.ReLU()]
        inp = h
    layers.append(nn.Linear(inp, out))
    return nn.Sequential(*layers)


class Encoder(nn.Module):
    """Observation dict -> feature vector: proprio as is, each camera through its own image encoder
    (rlhw.vision.encoders: the small CNN or a ResNet, LayerNorm'd and tanh-bounded features).

    ONE Encoder serves the critics and the actor (SERL, DrQ-v2): the critic loss trains it, the actor reads
    its features with the gradient stopped. ``for_acting`` builds a copy that only receives weights (a
    rollout worker): it does not read the weights file, which may live only on the learner's machine."""

    def __init__(self, layout: ObsLayout, image_encoder: ImageEncoderConfig, for_acting: bool = False):
        super().__init__()
        self.layout = layout
        cfg = image_encoder.model_copy(update={"weights": None}) if for_acting else image_encoder
        self.cnns = nn.ModuleDict({n: build_image_encoder(cfg, s, field=IMAGE_ENCODER_FIELD) for n, s in layout.images})
        self.dim = layout.proprio_dim + image_encoder.features * len(layout.images)

    def forward(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        feats = [obs["proprio"]] + [self.cnns[n](obs[n]) for n, _ in self.layout.images]
        return torch.cat(feats, dim=-1) if len(feats) > 1 else feats[0]


class Actor(nn.Module):
    """Tanh-squashed Gaussian policy on the (shared) encoder's features, the gradient stopped at them: the
    actor loss never moves the encoder. Actions are rescaled from [-1, 1] to the env's action bounds.
    ``encoder`` is a submodule, so the actor's state_dict holds everything acting needs."""

    def __init__(self, encoder: Encoder, act_low: np.ndarray, act_high: np.ndarray, hidden):
        super().__init__()
        self.encoder = encoder
        act_dim = len(act_low)
        self.trunk = mlp(encoder.dim, hidden, 2 * act_dim)
        self.register_buffer("scale", torch.as_tensor((act_high - act_low) / 2.0, dtype=torch.float32))
        self.register_buffer("bias", torch.as_tensor((act_high + act_low) / 2.0, dtype=torch.float32))

    def forward(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.trunk(features.detach()).chunk(2, dim=-1)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(log_std) + 1)
        return mean, log_std

    def sample(self, obs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(action, log_prob, deterministic action) for an observation dict."""
        return self.sample_features(self.encoder(obs))

    def act(self, obs) -> tuple[torch.Tensor, torch.Tensor]:
        """(action, deterministic action) for acting: `sample` without the log-prob, which only the update
        needs. The same draw as `sample` from the same RNG state (a test checks it); about 2x faster for
        the small MLP policies (0.39-0.45 ms against 0.85-1.08 ms per step on the 2-core VM), and the
        obs->action path pays it every step."""
        mean, log_std = self(self.encoder(obs))
        action = torch.tanh(mean + log_std.exp() * torch.randn_like(mean))
        return action * self.scale + self.bias, torch.tanh(mean) * self.scale + self.bias

    def sample_features(self, features: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """`sample` from features already computed (the update encodes each batch once); log-prob corrected
        for the tanh squashing."""
        mean, log_std = self(features)
        normal = torch.distributions.Normal(mean, log_std.exp())
        x = normal.rsample()
        y = torch.tanh(x)
        log_prob = normal.log_prob(x) - torch.log(self.scale * (1 - y.pow(2)) + 1e-6)
        return y * self.scale + self.bias, log_prob.sum(-1, keepdim=True), torch.tanh(mean) * self.scale + self.bias


def build_actor(layout: ObsLayout, act_low, act_high, cfg: SacConfig) -> Actor:
    """The acting network alone (encoder + actor) for a rollout worker, from ``train.sac``; its weights
    arrive with `SAC.policy_state`."""
    return Actor(
        Encoder(layout, cfg.image_encoder, for_acting=True),
        np.asarray(act_low, np.float32),
        np.asarray(act_high, np.float32),
        tuple(cfg.hidden_sizes),
    )


class EnsembleLinear(nn.Module):
    """N independent linear layers applied as one batched matmul: input [N, B, in] -> [N, B, out]."""

    def __init__(self, n: int, inp: int, out: int):
        super().__init__()
        bound = 1.0 / np.sqrt(inp)  # nn.Linear's default initialisation, per member
        self.weight = nn.Parameter(torch.empty(n, inp, out).uniform_(-bound, bound))
        self.bias = nn.Parameter(torch.empty(n, 1, out).uniform_(-bound, bound))

    def forward(self, x: torch.Tensor, members: torch.Tensor | None = None) -> torch.Tensor:
        if members is None:
            return torch.baddbmm(self.bias, x, self.weight)
        return torch.baddbmm(self.bias[members], x, self.weight[members])


class EnsembleLayerNorm(nn.Module):
    """LayerNorm over the features, with a gain and shift of its own for each of the N members."""

    def __init__(self, n: int, width: int):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n, 1, width))
        self.bias = nn.Parameter(torch.zeros(n, 1, width))

    def forward(self, x: torch.Tensor, members: torch.Tensor | None = None) -> torch.Tensor:
        w, b = (self.weight, self.bias) if members is None else (self.weight[members], self.bias[members])
        return F.layer_norm(x, x.shape[-1:]) * w + b


class CriticEnsemble(nn.Module):
    """N Q-functions as one module: ``forward`` returns [N, B, 1], or [len(members), B, 1] for a subset of
    them (the target's M: computing only those saves the other N - M). Hidden layers are Linear -> LayerNorm
    -> ReLU (RLPD's order). The members share one encoder (``encoder``, the actor's too), as SERL's do."""

    def __init__(self, encoder: Encoder, act_dim: int, hidden, n: int, layer_norm: bool):
        super().__init__()
        self.n = n
        self.encoder = encoder
        widths = [self.encoder.dim + act_dim, *hidden]
        self.layers = nn.ModuleList(EnsembleLinear(n, a, b) for a, b in zip(widths, widths[1:]))
        self.norms = nn.ModuleList(EnsembleLayerNorm(n, w) if layer_norm else nn.Identity() for w in hidden)
        self.head = EnsembleLinear(n, widths[-1], 1)

    def forward(self, obs, action: torch.Tensor, members: torch.Tensor | None = None) -> torch.Tensor:
        return self.q(self.encoder(obs), action, members)

    def q(self, features: torch.Tensor, action: torch.Tensor, members: torch.Tensor | None = None) -> torch.Tensor:
        """`forward` from features already computed by ``self.encoder``."""
        x = torch.cat([features, action], dim=-1)
        x = x.unsqueeze(0).expand(self.n if members is None else len(members), *x.shape)
        for layer, norm in zip(self.layers, self.norms):
            x = layer(x, members)
            x = F.relu(x if isinstance(norm, nn.Identity) else norm(x, members))
        return self.head(x, members)
