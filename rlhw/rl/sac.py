"""Soft Actor-Critic, written to be read top to bottom (after CleanRL's sac_continuous_action).

Pieces, in the order they are used:
- `ObsLayout`: which entries of the env's dict observation are proprio (flattened, concatenated) and which
  are camera images (HxWx3 uint8, fed to a small CNN). Built from the env spec, so the networks never guess.
- `Encoder`: obs dict -> one feature vector (proprio concat + one CNN per camera, optional).
- `Actor`: tanh-squashed Gaussian policy.
- `CriticEnsemble`: N critics in ONE module (weights [N, in, out], one batched matmul per layer instead of N
  small modules; tools/bench_critics.py measures the cost), LayerNorm after each hidden layer. RLPD (Ball et al. 2023):
  N=10, LayerNorm on, the Bellman target takes the minimum over a random subset of M=2 target critics, the
  actor maximises the ensemble mean. N=2, M=2, no LayerNorm, actor on the minimum is plain SAC.
- `SAC`: owns the networks and optimizers; `update(batch)` does one critic + actor + temperature step.
  When torch.distributed is initialised, every gradient is averaged across ranks (all-reduce) before the
  optimizer step, so all ranks hold identical weights as long as they start identical (`broadcast_weights`).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Mapping

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


# --------------------------------------------------------------------------------------------- observations
@dataclass(frozen=True)
class ObsLayout:
    """Names and shapes of the observation entries the agent uses.

    ``proprio``: (name, shape) of low-dimensional entries, concatenated in this (sorted) order.
    ``images``: (name, (H, W, C)) of uint8 camera entries.
    """

    proprio: tuple[tuple[str, tuple[int, ...]], ...]
    images: tuple[tuple[str, tuple[int, ...]], ...] = field(default_factory=tuple)

    @classmethod
    def from_shapes(cls, shapes: Mapping[str, tuple[int, ...]], dtypes: Mapping[str, str], use_images: bool = True):
        proprio, images = [], []
        for name in sorted(shapes):
            shape, dtype = tuple(int(s) for s in shapes[name]), str(np.dtype(dtypes[name]))
            if len(shape) == 3 and dtype == "uint8":
                if use_images:
                    images.append((name, shape))
            elif len(shape) <= 1:
                proprio.append((name, shape))
            else:
                raise ValueError(
                    f"observation {name!r} has shape {shape} and dtype {dtype}: the agent takes vectors or "
                    "HxWx3 uint8 images; flatten it in the task"
                )
        if not proprio and not images:
            raise ValueError("the env spec has no observations the agent can use")
        return cls(tuple(proprio), tuple(images))

    @classmethod
    def from_spec(cls, spec, use_images: bool = True) -> "ObsLayout":
        """From an `rlhw.robot.spec.EnvSpec` (shapes per env instance)."""
        obs = spec.observations
        return cls.from_shapes({k: v.shape for k, v in obs.items()}, {k: v.dtype for k, v in obs.items()}, use_images)

    @property
    def proprio_dim(self) -> int:
        return int(sum(int(np.prod(s)) if s else 1 for _, s in self.proprio))

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(n for n, _ in self.proprio) + tuple(n for n, _ in self.images)

    def to_dict(self) -> dict:
        return {"proprio": [[n, list(s)] for n, s in self.proprio], "images": [[n, list(s)] for n, s in self.images]}

    @classmethod
    def from_dict(cls, d: dict) -> "ObsLayout":
        return cls(
            tuple((n, tuple(s)) for n, s in d["proprio"]), tuple((n, tuple(s)) for n, s in d.get("images", []))
        )


def obs_to_tensors(obs: Mapping[str, np.ndarray], layout: ObsLayout, device: torch.device) -> dict[str, torch.Tensor]:
    """Batch of numpy observations -> tensors on ``device``: proprio as one float32 [B, D], images uint8 [B,H,W,C]."""
    parts = [np.asarray(obs[n], dtype=np.float32).reshape(len(obs[n]), -1) for n, _ in layout.proprio]
    out = {"proprio": torch.as_tensor(np.concatenate(parts, axis=1) if parts else np.zeros((1, 0), np.float32))}
    for n, _ in layout.images:
        out[n] = torch.as_tensor(np.asarray(obs[n]))
    return {k: v.to(device, non_blocking=True) for k, v in out.items()}


# --------------------------------------------------------------------------------------------- networks
def mlp(inp: int, hidden: tuple[int, ...], out: int) -> nn.Sequential:
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [nn.Linear(inp, h), nn.ReLU()]
        inp = h
    layers.append(nn.Linear(inp, out))
    return nn.Sequential(*layers)


class ImageEncoder(nn.Module):
    """A small CNN (DrQ-sized, fewer channels) for one HxWx3 uint8 camera image."""

    def __init__(self, shape: tuple[int, ...], features: int):
        super().__init__()
        h, w, c = shape
        self.conv = nn.Sequential(
            nn.Conv2d(c, 16, 3, stride=2), nn.ReLU(),
            nn.Conv2d(16, 16, 3, stride=2), nn.ReLU(),
            nn.Conv2d(16, 16, 3, stride=2), nn.ReLU(),
            nn.Flatten(),
        )
        with torch.no_grad():
            n = self.conv(torch.zeros(1, c, h, w)).shape[1]
        self.head = nn.Sequential(nn.Linear(n, features), nn.LayerNorm(features), nn.Tanh())

    def forward(self, image: torch.Tensor) -> torch.Tensor:
        x = image.permute(0, 3, 1, 2).float() / 255.0 - 0.5
        return self.head(self.conv(x))


class Encoder(nn.Module):
    """Observation dict -> feature vector: proprio as is, each camera through its own CNN."""

    def __init__(self, layout: ObsLayout, image_features: int):
        super().__init__()
        self.layout = layout
        self.cnns = nn.ModuleDict({n: ImageEncoder(s, image_features) for n, s in layout.images})
        self.dim = layout.proprio_dim + image_features * len(layout.images)

    def forward(self, obs: Mapping[str, torch.Tensor]) -> torch.Tensor:
        feats = [obs["proprio"]] + [self.cnns[n](obs[n]) for n, _ in self.layout.images]
        return torch.cat(feats, dim=-1) if len(feats) > 1 else feats[0]


class Actor(nn.Module):
    """Tanh-squashed Gaussian policy; actions are rescaled from [-1, 1] to the env's action bounds."""

    def __init__(self, layout: ObsLayout, act_low: np.ndarray, act_high: np.ndarray, hidden, image_features):
        super().__init__()
        self.encoder = Encoder(layout, image_features)
        act_dim = len(act_low)
        self.trunk = mlp(self.encoder.dim, hidden, 2 * act_dim)
        self.register_buffer("scale", torch.as_tensor((act_high - act_low) / 2.0, dtype=torch.float32))
        self.register_buffer("bias", torch.as_tensor((act_high + act_low) / 2.0, dtype=torch.float32))

    def forward(self, obs) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.trunk(self.encoder(obs)).chunk(2, dim=-1)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(log_std) + 1)
        return mean, log_std

    def sample(self, obs) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(action, log_prob, deterministic action), the log-prob corrected for the tanh squashing."""
        mean, log_std = self(obs)
        normal = torch.distributions.Normal(mean, log_std.exp())
        x = normal.rsample()
        y = torch.tanh(x)
        log_prob = normal.log_prob(x) - torch.log(self.scale * (1 - y.pow(2)) + 1e-6)
        return y * self.scale + self.bias, log_prob.sum(-1, keepdim=True), torch.tanh(mean) * self.scale + self.bias


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
    -> ReLU (RLPD's order). With cameras the members share one CNN encoder, as SERL's ensemble does."""

    def __init__(self, layout: ObsLayout, act_dim: int, hidden, image_features, n: int, layer_norm: bool):
        super().__init__()
        self.n = n
        self.encoder = Encoder(layout, image_features)
        widths = [self.encoder.dim + act_dim, *hidden]
        self.layers = nn.ModuleList(EnsembleLinear(n, a, b) for a, b in zip(widths, widths[1:]))
        self.norms = nn.ModuleList(EnsembleLayerNorm(n, w) if layer_norm else nn.Identity() for w in hidden)
        self.head = EnsembleLinear(n, widths[-1], 1)

    def forward(self, obs, action: torch.Tensor, members: torch.Tensor | None = None) -> torch.Tensor:
        x = torch.cat([self.encoder(obs), action], dim=-1)
        x = x.unsqueeze(0).expand(self.n if members is None else len(members), *x.shape)
        for layer, norm in zip(self.layers, self.norms):
            x = layer(x, members)
            x = F.relu(x if isinstance(norm, nn.Identity) else norm(x, members))
        return self.head(x, members)


# --------------------------------------------------------------------------------------------- the algorithm
def _average_gradients(params: list[nn.Parameter]) -> None:
    """All-reduce (mean) the gradients of ``params`` across ranks as one flat tensor; no-op on one process."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat /= dist.get_world_size()
    offset = 0
    for p in params:
        n = p.numel()
        p.grad = flat[offset : offset + n].view_as(p).clone()
        offset += n


class SAC:
    """Networks + optimizers + one `update` step. Stateless about data: batches come from a replay buffer."""

    def __init__(self, layout: ObsLayout, act_low, act_high, cfg, device: str | torch.device = "cpu"):
        self.cfg, self.layout, self.device = cfg, layout, torch.device(device)
        act_low = np.asarray(act_low, dtype=np.float32)
        act_high = np.asarray(act_high, dtype=np.float32)
        self.act_low, self.act_high = act_low, act_high
        act_dim = len(act_low)
        hidden, feats = tuple(cfg.hidden_sizes), cfg.image_features
        self.actor = Actor(layout, act_low, act_high, hidden, feats).to(self.device)
        self.critic = CriticEnsemble(layout, act_dim, hidden, feats, cfg.critic_ensemble, cfg.critic_layer_norm)
        self.critic.to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.critic_params = list(self.critic.parameters())
        self.q_optimizer = torch.optim.Adam(self.critic_params, lr=cfg.critic_lr)
        self.actor_optimizer = torch.optim.Adam(self.actor.parameters(), lr=cfg.actor_lr)
        # Automatic entropy tuning: alpha is learned so the policy's entropy tracks target_entropy.
        self.target_entropy = float(cfg.target_entropy if cfg.target_entropy is not None else -act_dim)
        self.log_alpha = torch.tensor([np.log(cfg.init_alpha)], dtype=torch.float32, device=self.device,
                                      requires_grad=True)
        self.a_optimizer = torch.optim.Adam([self.log_alpha], lr=cfg.alpha_lr)
        self.updates = 0

    @property
    def alpha(self) -> float:
        return float(self.log_alpha.exp().item())

    # ---- acting
    @torch.no_grad()
    def act(self, obs: Mapping[str, np.ndarray], deterministic: bool = False) -> np.ndarray:
        """Actions for a batch of observations (leading dim = batch)."""
        t = obs_to_tensors(obs, self.layout, self.device)
        action, _, mean_action = self.actor.sample(t)
        return (mean_action if deterministic else action).cpu().numpy().astype(np.float32)

    def random_actions(self, n: int, rng: np.random.Generator) -> np.ndarray:
        return rng.uniform(self.act_low, self.act_high, size=(n, len(self.act_low))).astype(np.float32)

    # ---- learning
    def target_q(self, obs, actions: torch.Tensor) -> torch.Tensor:
        """[B, 1]: the minimum over a random subset of M of the N target critics, drawn anew for each batch.
        M = N = 2 is SAC's clipped double-Q; M = 2 of N = 10 is RLPD's (less pessimistic, less variance)."""
        subset = torch.randperm(self.critic.n, device=self.device)[: self.cfg.critic_subset]
        return self.critic_target(obs, actions, members=subset).min(dim=0).values

    def update(self, batch: Mapping[str, np.ndarray]) -> dict[str, float]:
        """One SAC step on a batch dict with obs/<k>, next_obs/<k>, action, reward, terminated."""
        obs = obs_to_tensors({k[4:]: v for k, v in batch.items() if k.startswith("obs/")}, self.layout, self.device)
        next_obs = obs_to_tensors(
            {k[9:]: v for k, v in batch.items() if k.startswith("next_obs/")}, self.layout, self.device
        )
        actions = torch.as_tensor(batch["action"], device=self.device)
        rewards = torch.as_tensor(batch["reward"], dtype=torch.float32, device=self.device).view(-1, 1)
        not_done = 1.0 - torch.as_tensor(batch["terminated"], dtype=torch.float32, device=self.device).view(-1, 1)
        alpha = self.log_alpha.exp().detach()

        # Critic: soft Bellman target from the smallest of a random subset of M target critics (with N = M = 2,
        # SAC's clipped double-Q); every one of the N critics regresses to that one target.
        with torch.no_grad():
            next_actions, next_log_pi, _ = self.actor.sample(next_obs)
            q_next = self.target_q(next_obs, next_actions)
            target = rewards + not_done * self.cfg.gamma * (q_next - alpha * next_log_pi)
        q = self.critic(obs, actions)
        qf_loss = (q - target).pow(2).mean(dim=(1, 2)).sum()
        self.q_optimizer.zero_grad(set_to_none=True)
        qf_loss.backward()
        _average_gradients(self.critic_params)
        self.q_optimizer.step()

        # Actor: maximise the ensemble's Q (its mean as RLPD, or its minimum as SAC) minus the entropy penalty.
        pi, log_pi, _ = self.actor.sample(obs)
        q_all = self.critic(obs, pi)
        q_pi = q_all.mean(dim=0) if self.cfg.actor_q == "mean" else q_all.min(dim=0).values
        actor_loss = (alpha * log_pi - q_pi).mean()
        self.actor_optimizer.zero_grad(set_to_none=True)
        actor_loss.backward()
        _average_gradients(list(self.actor.parameters()))
        self.actor_optimizer.step()
        # The actor step left gradients on the critics; they are cleared by the next zero_grad.

        # Temperature.
        alpha_loss = (-self.log_alpha.exp() * (log_pi.detach() + self.target_entropy)).mean()
        self.a_optimizer.zero_grad(set_to_none=True)
        alpha_loss.backward()
        _average_gradients([self.log_alpha])
        self.a_optimizer.step()

        # Target critics follow slowly.
        with torch.no_grad():
            for p, tp in zip(self.critic.parameters(), self.critic_target.parameters()):
                tp.mul_(1 - self.cfg.tau).add_(p, alpha=self.cfg.tau)
        self.updates += 1
        return {
            "losses/qf_loss": float(qf_loss.item()) / self.critic.n,
            "losses/actor_loss": float(actor_loss.item()),
            "losses/alpha_loss": float(alpha_loss.item()),
            "losses/alpha": float(alpha.item()),
            "losses/q_mean": float(q.mean().item()),
            "losses/entropy": float(-log_pi.mean().item()),
        }

    # ---- weights and checkpoints
    def policy_state(self) -> dict[str, torch.Tensor]:
        """Only what acting needs (the actor), on CPU: what rollout workers receive."""
        return {k: v.detach().cpu().clone() for k, v in self.actor.state_dict().items()}

    def load_policy_state(self, state: Mapping[str, torch.Tensor]) -> None:
        self.actor.load_state_dict({k: torch.as_tensor(v) for k, v in state.items()})

    def state_dict(self) -> dict:
        return {
            "actor": self.actor.state_dict(), "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "log_alpha": self.log_alpha.detach().cpu(),
            "q_optimizer": self.q_optimizer.state_dict(), "actor_optimizer": self.actor_optimizer.state_dict(),
            "a_optimizer": self.a_optimizer.state_dict(), "updates": self.updates,
        }

    def load_state_dict(self, state: dict) -> None:
        _check_critic_checkpoint(state, self.critic.n)
        for name in ("actor", "critic", "critic_target"):
            getattr(self, name).load_state_dict(state[name])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"].to(self.device))
        self.q_optimizer.load_state_dict(state["q_optimizer"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.a_optimizer.load_state_dict(state["a_optimizer"])
        self.updates = int(state["updates"])

    def modules(self) -> list[nn.Module]:
        return [self.actor, self.critic, self.critic_target]

    def broadcast_weights(self, src: int = 0) -> None:
        """Make every rank start from rank ``src``'s weights (no-op without torch.distributed)."""
        if not (dist.is_available() and dist.is_initialized()):
            return
        with torch.no_grad():
            for m in self.modules():
                for t in list(m.parameters()) + list(m.buffers()):
                    dist.broadcast(t.data, src=src)
            dist.broadcast(self.log_alpha.data, src=src)

    def weights_digest(self) -> float:
        """A cheap fingerprint of all trainable weights (sum of |w|), for checking ranks agree."""
        with torch.no_grad():
            return float(sum(p.double().abs().sum().item() for m in self.modules() for p in m.parameters())
                         + self.log_alpha.double().abs().sum().item())


def _check_critic_checkpoint(state: dict, n: int) -> None:
    """Refuse, with the fix, a checkpoint whose critics do not fit this agent (its weights cannot be mapped)."""
    from rlhw.errors import ConfigError

    if "critic" not in state:
        raise ConfigError("--resume", "the checkpoint holds two separate critics (qf1/qf2), written before rlhw's "
                                      "critic ensemble; it cannot be resumed: start a new run directory")
    saved = state["critic"]["head.weight"].shape[0]
    if saved != n:
        raise ConfigError("train.sac.critic_ensemble", f"is {n}, but the checkpoint was trained with {saved} "
                                                       f"critics: set train.sac.critic_ensemble={saved} to resume")


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        from rlhw.errors import ConfigError

        raise ConfigError("train.device", "cuda requested but this process sees no GPU; use auto or cpu")
    return torch.device(name)
