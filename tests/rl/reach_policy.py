"""A small reach policy trained in the test itself, saved as `rlhw train` saves its checkpoints.

The actor is fitted (supervised, about a second on one core) to the obvious reach controller: move
towards the target, ``clip(to_target / env.action.scale_m, -1, 1)``, on observations drawn inside the
spec's bounds. It is a real SAC actor in a real checkpoint (spec and ``train.sac`` included), good
enough to reach, and cheap enough for the suite, where a SAC run would take a minute.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from rlhw.rl.checkpoint import checkpoint_state, policy_contract
from rlhw.rl.sac import SAC, obs_to_tensors
from rlhw.rl.session import Counters
from rlhw.rl.spaces import AgentSpace


def random_observations(spec, n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    obs = {}
    for name, s in spec.observations.items():
        low = np.broadcast_to(np.asarray(s.low, np.float32), s.shape)
        high = np.broadcast_to(np.asarray(s.high, np.float32), s.shape)
        obs[name] = rng.uniform(low, high, size=(n, *s.shape)).astype(np.float32)
    obs["to_target"] = obs["target_position"] - obs["ee_position"]
    return obs


def fit_reach_actor(agent: SAC, spec, scale_m: float, steps: int = 600, seed: int = 0) -> float:
    """Fit the actor's deterministic action to the greedy reach action; returns the last mean squared error."""
    rng = np.random.default_rng(seed)
    torch.manual_seed(seed)
    opt = torch.optim.Adam(agent.actor.trunk.parameters(), lr=3e-3)
    loss = torch.tensor(0.0)
    for _ in range(steps):
        obs = random_observations(spec, 256, rng)
        want = torch.as_tensor(np.clip(obs["to_target"] / scale_m, -1, 1))
        _, _, mean = agent.actor.sample(obs_to_tensors(obs, agent.layout, agent.device))
        loss = ((mean - want) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return float(loss.detach())


def reach_checkpoint(path: Path, spec, config, steps: int = 600) -> Path:
    """Fit a reach actor for ``spec`` (``config``'s train.sac and action scale) and save it at ``path``."""
    space = AgentSpace.from_spec(spec)
    agent = SAC(space.layout, space.low, space.high, config.train.sac)
    error = fit_reach_actor(agent, spec, config.env.action.scale_m, steps)
    assert error < 0.02, f"the reach actor did not fit (mse {error:.3f})"
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint_state(agent, policy_contract(spec, config.train.sac), Counters()), path)
    return path
