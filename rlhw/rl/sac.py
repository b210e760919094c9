"""Soft Actor-Critic, written to be read top to bottom (after CleanRL's sac_continuous_action).

Pieces, in the order they are used:
- `ObsLayout`: which entries of the env's dict observation are proprio (flattened, concatenated) and which
  are camera images (HxWx3 uint8, fed to an image encoder). Built from the env spec, so the networks never guess.
- `Encoder`: obs dict -> one feature vector (proprio concat + one image encoder per camera, from
  rlhw.vision.encoders: `train.sac.image_encoder`). ONE Encoder is shared by the actor and every critic;
  the critic loss trains it, the actor reads its features with the gradient stopped (DrQ-v2, SERL), the
  target critics hold a Polyak-averaged copy. Training images are randomly shifted (DrQ) in `update`.
  An update encodes obs once (with gradient) and next_obs once (without), and the target critics read
  those next_obs features (``train.sac.target_features: online``, DrQ-v2's form) unless told to run their
  own encoder copy (``target``, DrQ's and SERL's form: one encoder pass more; tools/bench_sac_vision.py).
- `Actor`: tanh-squashed Gaussian policy on the encoder's features.
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
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from rlhw.config.train import SacConfig
from rlhw.config.vision import ImageEncoderConfig
from rlhw.vision.augment import RandomShift
from rlhw.vision.encoders import build_image_encoder

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0
IMAGE_ENCODER_FIELD = "train.sac.image_encoder"


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
    def from_spec(cls, spec, use_images: bool = True) -> ObsLayout:
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
    def from_dict(cls, d: dict) -> ObsLayout:
        return cls(tuple((n, tuple(s)) for n, s in d["proprio"]), tuple((n, tuple(s)) for n, s in d.get("images", [])))


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
    """Networks + optimizers + one `update` step. Stateless about data: batches come from a replay buffer.

    ``augment_seed`` seeds the DrQ random shifts of training images (default: torch's current seed, so a
    process seeded with `torch.manual_seed` augments reproducibly without drawing from the global stream)."""

    def __init__(
        self,
        layout: ObsLayout,
        act_low,
        act_high,
        cfg: SacConfig,
        device: str | torch.device = "cpu",
        augment_seed: int | None = None,
    ):
        self.cfg, self.layout, self.device = cfg, layout, torch.device(device)
        act_low = np.asarray(act_low, dtype=np.float32)
        act_high = np.asarray(act_high, dtype=np.float32)
        self.act_low, self.act_high = act_low, act_high
        act_dim = len(act_low)
        hidden = tuple(cfg.hidden_sizes)
        # One encoder, shared by the actor and all N critics; the target critics get their own copy of it.
        self.encoder = Encoder(layout, cfg.image_encoder)
        self.actor = Actor(self.encoder, act_low, act_high, hidden).to(self.device)
        self.critic = CriticEnsemble(self.encoder, act_dim, hidden, cfg.critic_ensemble, cfg.critic_layer_norm)
        self.critic.to(self.device)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        # Only the critic loss trains the encoder; a frozen backbone has no trainable parameters at all.
        self.critic_params = [p for p in self.critic.parameters() if p.requires_grad]
        self.actor_params = list(self.actor.trunk.parameters())
        self.q_optimizer = torch.optim.Adam(self.critic_params, lr=cfg.critic_lr)
        self.actor_optimizer = torch.optim.Adam(self.actor_params, lr=cfg.actor_lr)
        # Automatic entropy tuning: alpha is learned so the policy's entropy tracks target_entropy.
        self.target_entropy = float(cfg.target_entropy if cfg.target_entropy is not None else -act_dim)
        self.log_alpha = torch.tensor(
            [np.log(cfg.init_alpha)], dtype=torch.float32, device=self.device, requires_grad=True
        )
        self.a_optimizer = torch.optim.Adam([self.log_alpha], lr=cfg.alpha_lr)
        pad = cfg.image_encoder.augment_pad if layout.images else 0
        seed = torch.initial_seed() if augment_seed is None else augment_seed
        self.augment = RandomShift(pad, seed % 2**63) if pad else None
        self.updates = 0

    @property
    def alpha(self) -> float:
        return float(self.log_alpha.exp().item())

    # ---- acting
    def act(self, obs: Mapping[str, np.ndarray], deterministic: bool = False) -> np.ndarray:
        """Actions for a batch of observations (leading dim = batch): the sample, or the mean."""
        sample, mean = self.sample_and_mean(obs)
        return mean if deterministic else sample

    @torch.no_grad()
    def sample_and_mean(self, obs: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """SAC's stochastic action and its mean for a batch, from one forward pass (what
        `rlhw.rl.policy.choose_actions` picks from). The encoder runs in eval mode, as on a rollout worker: a
        ResNet's BatchNorm uses its running statistics, not those of a batch of one."""
        t = obs_to_tensors(obs, self.layout, self.device)
        training = self.encoder.training
        self.encoder.eval()
        try:
            action, mean_action = self.actor.act(t)
        finally:
            self.encoder.train(training)
        return action.cpu().numpy().astype(np.float32), mean_action.cpu().numpy().astype(np.float32)

    # ---- learning
    def target_q(self, obs, actions: torch.Tensor, online_features: torch.Tensor | None = None) -> torch.Tensor:
        """[B, 1]: the minimum over a random subset of M of the N target critics, drawn anew for each batch.
        M = N = 2 is SAC's clipped double-Q; M = 2 of N = 10 is RLPD's (less pessimistic, less variance).
        With ``train.sac.target_features: online`` they read ``online_features`` (the online encoder's, of
        ``obs``) instead of running their own encoder copy over ``obs``."""
        subset = torch.randperm(self.critic.n, device=self.device)[: self.cfg.critic_subset]
        if self.cfg.target_features == "online" and online_features is not None:
            return self.critic_target.q(online_features, actions, members=subset).min(dim=0).values
        return self.critic_target(obs, actions, members=subset).min(dim=0).values

    def _batch_obs(self, batch: Mapping[str, np.ndarray], prefix: str) -> dict[str, torch.Tensor]:
        """The ``prefix`` observations of a batch as tensors, camera images randomly shifted (DrQ) when
        augmentation is on; obs and next_obs draw their shifts independently."""
        t = obs_to_tensors(
            {k[len(prefix) :]: v for k, v in batch.items() if k.startswith(prefix)}, self.layout, self.device
        )
        if self.augment is not None:
            for name, _ in self.layout.images:
                t[name] = self.augment(t[name])
        return t

    @torch.no_grad()
    def bellman_target(
        self, next_obs: dict[str, torch.Tensor], rewards: torch.Tensor, not_done: torch.Tensor, alpha: torch.Tensor
    ) -> torch.Tensor:
        """The soft Bellman target (n, 1) from the smallest of a random subset of M target critics (with
        N = M = 2, SAC's clipped double-Q). Where ``not_done`` is 0 (a terminal step: a success, or a safety
        fault stored as ``train.fault_signal`` says) it is the stored reward alone. next_obs is encoded once, for
        the next action and (``target_features: online``) the target critics."""
        next_features = self.encoder(next_obs)
        next_actions, next_log_pi, _ = self.actor.sample_features(next_features)
        q_next = self.target_q(next_obs, next_actions, next_features)
        return rewards + not_done * self.cfg.gamma * (q_next - alpha * next_log_pi)

    def update(self, batch: Mapping[str, np.ndarray]) -> dict[str, float]:
        """One SAC step on a batch dict with obs/<k>, next_obs/<k>, action, reward, terminated."""
        obs, next_obs = self._batch_obs(batch, "obs/"), self._batch_obs(batch, "next_obs/")
        actions = torch.as_tensor(batch["action"], device=self.device)
        rewards = torch.as_tensor(batch["reward"], dtype=torch.float32, device=self.device).view(-1, 1)
        not_done = 1.0 - torch.as_tensor(batch["terminated"], dtype=torch.float32, device=self.device).view(-1, 1)
        alpha = self.log_alpha.exp().detach()

        # Critic: every one of the N critics regresses to the one target (next_obs encoded once, without
        # gradient, in bellman_target); obs is encoded once with gradient: the critic loss trains the encoder.
        target = self.bellman_target(next_obs, rewards, not_done, alpha)
        features = self.encoder(obs)
        q = self.critic.q(features, actions)
        qf_loss = (q - target).pow(2).mean(dim=(1, 2)).sum()
        self.q_optimizer.zero_grad(set_to_none=True)
        qf_loss.backward()
        _average_gradients(self.critic_params)
        self.q_optimizer.step()

        # Actor: maximise the ensemble's Q (its mean as RLPD, or its minimum as SAC) minus the entropy penalty,
        # on the same features with the gradient stopped (DrQ-v2, SERL): the actor loss never moves the encoder.
        features = features.detach()
        pi, log_pi, _ = self.actor.sample_features(features)
        q_all = self.critic.q(features, pi)
        q_pi = q_all.mean(dim=0) if self.cfg.actor_q == "mean" else q_all.min(dim=0).values
        actor_loss = (alpha * log_pi - q_pi).mean()
        self.actor_optimizer.zero_grad(set_to_none=True)
        actor_loss.backward(inputs=self.actor_params)  # no gradients for the critics: they are not stepped here
        _average_gradients(self.actor_params)
        self.actor_optimizer.step()

        # Temperature.
        alpha_loss = (-self.log_alpha.exp() * (log_pi.detach() + self.target_entropy)).mean()
        self.a_optimizer.zero_grad(set_to_none=True)
        alpha_loss.backward()
        _average_gradients([self.log_alpha])
        self.a_optimizer.step()

        # Target critics (their encoder copy included) follow slowly.
        with torch.no_grad():
            for p, tp in zip(self.critic.parameters(), self.critic_target.parameters()):
                if p.requires_grad:  # a frozen backbone is the same in both
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
        """Only what acting needs, on CPU: the actor and the encoder it reads (``encoder.*`` entries, BatchNorm
        statistics included), what rollout workers receive and load into `build_actor`'s network."""
        return {k: v.detach().cpu().clone() for k, v in self.actor.state_dict().items()}

    def load_policy_state(self, state: Mapping[str, torch.Tensor]) -> None:
        self.actor.load_state_dict({k: torch.as_tensor(v) for k, v in state.items()})

    def state_dict(self) -> dict:
        return {
            "actor": self.actor.state_dict(),
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "log_alpha": self.log_alpha.detach().cpu(),
            "q_optimizer": self.q_optimizer.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "a_optimizer": self.a_optimizer.state_dict(),
            "updates": self.updates,
        }

    def load_state_dict(self, state: dict) -> None:
        _check_critic_checkpoint(state, self.critic)
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

    def _tensors(self, buffers: bool) -> list[torch.Tensor]:
        """Every parameter (and buffer) of the agent once: the shared encoder belongs to actor and critic."""
        seen: dict[int, torch.Tensor] = {}
        for m in self.modules():
            for t in list(m.parameters()) + (list(m.buffers()) if buffers else []):
                seen.setdefault(id(t), t)
        return list(seen.values())

    def broadcast_weights(self, src: int = 0) -> None:
        """Make every rank start from rank ``src``'s weights (no-op without torch.distributed)."""
        if not (dist.is_available() and dist.is_initialized()):
            return
        with torch.no_grad():
            for t in self._tensors(buffers=True):
                dist.broadcast(t.data, src=src)
            dist.broadcast(self.log_alpha.data, src=src)

    def weights_digest(self) -> str:
        """A fingerprint of all weights, for checking that data-parallel ranks agree: BLAKE2b over
        each tensor's shape and bytes, in the fixed order of `_tensors` (each tensor once), then
        the temperature. Equal digests mean bit-identical weights; a sum of |w| could not see a
        sign flip or two weights swapped, and all-reduced updates keep the ranks bit-identical."""
        h = hashlib.blake2b(digest_size=16)
        with torch.no_grad():
            for t in self._tensors(buffers=False) + [self.log_alpha]:
                h.update(repr(tuple(t.shape)).encode())
                h.update(t.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
        return h.hexdigest()


def _check_critic_checkpoint(state: dict, critic: CriticEnsemble) -> None:
    """Refuse, with the fix, a checkpoint whose critics or image encoders do not fit this agent (its
    weights cannot be mapped)."""
    from rlhw.errors import ConfigError

    if "critic" not in state:
        raise ConfigError(
            "--resume",
            "the checkpoint holds two separate critics (qf1/qf2), written before rlhw's "
            "critic ensemble; it cannot be resumed: start a new run directory",
        )
    saved = state["critic"]["head.weight"].shape[0]
    if saved != critic.n:
        raise ConfigError(
            "train.sac.critic_ensemble",
            f"is {critic.n}, but the checkpoint was trained with {saved} "
            f"critics: set train.sac.critic_ensemble={saved} to resume",
        )
    want = {k: tuple(v.shape) for k, v in critic.state_dict().items() if k.startswith("encoder.")}
    have = {k: tuple(v.shape) for k, v in state["critic"].items() if k.startswith("encoder.")}
    if want != have:
        old = any(".conv." in k for k in have)
        why = (
            "it was written before rlhw's shared image encoder (each network had its own CNN) and cannot be "
            "resumed: start a new run directory"
            if old
            else "its image encoders differ from this config's (another kind or other cameras): set "
            "train.sac.image_encoder (kind, features), env.images and env.image_size as the run had them, or start "
            "a new run directory"
        )
        raise ConfigError(IMAGE_ENCODER_FIELD, f"the checkpoint's image encoder does not fit: {why}")


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        from rlhw.errors import ConfigError

        raise ConfigError("train.device", "cuda requested but this process sees no GPU; use auto or cpu")
    return torch.device(name)
