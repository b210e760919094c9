"""The SAC algorithm: networks + optimizers + one `update` step (after CleanRL's sac_continuous_action).

An update encodes obs once (with gradient) and next_obs once (without), and the target critics read those
next_obs features (``train.sac.target_features: online``, DrQ-v2's form) unless told to run their own encoder
copy (``target``, DrQ's and SERL's form: one encoder pass more; tools/bench_sac_vision.py). Training images
are randomly shifted (DrQ). RLPD (Ball et al. 2023): N=10 critics, LayerNorm on, the Bellman target takes the
minimum over a random subset of M=2 target critics, the actor maximises the ensemble mean. N=2, M=2, no
LayerNorm, actor on the minimum is plain SAC.

When torch.distributed is initialised, every gradient is averaged across ranks (all-reduce) before the
optimizer step, so all ranks hold identical weights as long as they start identical (`broadcast_weights`).
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Mapping

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn

from rlhw.config.train import SacConfig
from rlhw.errors import ConfigError
from rlhw.rl.sac.networks import IMAGE_ENCODER_FIELD, Actor, CriticEnsemble, Encoder
from rlhw.rl.sac.obs_layout import ObsLayout, obs_to_tensors
from rlhw.vision.augment import RandomShift


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

    def batch_obs(self, batch: Mapping[str, np.ndarray], prefix: str) -> dict[str, torch.Tensor]:
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
        obs, next_obs = self.batch_obs(batch, "obs/"), self.batch_obs(batch, "next_obs/")
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
