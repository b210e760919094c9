"""The acting policy: SAC's policy network choosing a batch's actions by the one acting rule
(`rlhw.rl.policy.choose_actions`), in a process of its own. The rollout workers, the env workers next to their
arms (`rlhw.rl.pipeline.acting`) and `rlhw eval` act through it."""

from __future__ import annotations

import copy

import numpy as np
import torch

from rlhw.config.train import SacConfig
from rlhw.rl.policy import Actions, PolicyWeights, choose_actions
from rlhw.rl.sac import Actor, build_actor, obs_to_tensors
from rlhw.rl.seeds import seed_process
from rlhw.rl.spaces import AgentSpace, zero_observations
from rlhw.robot.spec import EnvSpec


class ActingPolicy:
    """SAC's policy network acting for a batch as `rlhw.rl.policy.choose_actions` says (uniform random actions
    during warm-up, then SAC's stochastic action, the mean for eval rows), in a process of its own: its own copy
    of the network, replaced whole by the weights the learner publishes, and their version."""

    def __init__(self, spec: EnvSpec, sac_config: SacConfig, device: torch.device, seed: int):
        space = AgentSpace.from_spec(spec)
        self.layout, self.low, self.high, self.device = space.layout, space.low, space.high, device
        self.rng = seed_process(seed)
        self.random_actions = True
        # (network, version), replaced whole when new weights arrive: an action never mixes two versions.
        self.current: tuple[Actor, int] = (
            build_actor(space.layout, space.low, space.high, sac_config).to(device).eval(),
            -1,
        )
        self.forward(zero_observations(spec))  # warm torch up (first calls are slow) before a robot waits on it

    @property
    def version(self) -> int:
        return self.current[1]

    def act(self, obs: dict, deterministic: np.ndarray) -> Actions:
        """Actions for a batch, and the version of the weights that chose each (-1: uniform random), by the one
        acting rule (`rlhw.rl.policy.choose_actions`)."""
        net, version = self.current
        return Actions(
            *choose_actions(
                lambda: self.forward(obs, net),
                deterministic,
                version,
                self.random_actions,
                self.rng,
                self.low,
                self.high,
            )
        )

    @torch.no_grad()
    def forward(self, obs: dict, net: Actor | None = None) -> tuple[np.ndarray, np.ndarray]:
        """SAC's stochastic action and its mean (the deterministic action), for a batch of observations."""
        net = net if net is not None else self.current[0]
        sample, mean = net.act(obs_to_tensors(obs, self.layout, self.device))
        return sample.cpu().numpy().astype(np.float32), mean.cpu().numpy().astype(np.float32)

    def load(self, weights: PolicyWeights) -> None:
        """New weights into a copy of the network, then swapped in (the acting thread may be mid-forward)."""
        net = copy.deepcopy(self.current[0])
        net.load_state_dict({k: torch.as_tensor(np.array(v)) for k, v in weights.state.items()})
        self.current = (net.eval(), int(weights.version))
