"""A tiny point-mass reach env that follows the RobotEnv contract (spec, reset -> `Reset`, step -> `Step`).

Used only to unit-test the learner and the run directory quickly; the real tasks come from rlhw.robot.
"""

from __future__ import annotations

import numpy as np

from rlhw.robot.spec import EnvSpec, TensorSpec
from rlhw.robot.step import Reset, Step


class PointReachEnv:
    """Move a point in [-1, 1]^dim towards a random goal; success within 0.1; 25 steps per episode."""

    def __init__(self, dim: int = 2, max_steps: int = 25, seed: int = 0):
        self.dim, self.max_steps = dim, max_steps
        self.rng = np.random.default_rng(seed)
        self.spec = EnvSpec(
            observations={
                "pos": TensorSpec("pos", "float32", (dim,), -1.0, 1.0),
                "goal": TensorSpec("goal", "float32", (dim,), -1.0, 1.0),
            },
            action=TensorSpec("action", "float32", (dim,), -1.0, 1.0),
            control_hz=10.0,
            robot="point",
        )
        self.closed = False

    def _obs(self):
        return {"pos": self.pos.astype(np.float32), "goal": self.goal.astype(np.float32)}

    def reset(self, seed=None):
        if seed is not None:
            self.rng = np.random.default_rng(seed)
        self.pos = self.rng.uniform(-1, 1, self.dim)
        self.goal = self.rng.uniform(-1, 1, self.dim)
        self.t = 0
        return Reset.one(self._obs(), {}, False, {})

    def step(self, action) -> Step:
        return self._move(action, intervened=False)

    def _move(self, executed, intervened: bool) -> Step:
        """Move by ``executed`` (the action, or an operator's) and report it as the step's executed action."""
        executed = np.asarray(executed, np.float32)
        self.pos = np.clip(self.pos + 0.2 * np.clip(executed, -1, 1), -1, 1)
        self.t += 1
        dist = float(np.linalg.norm(self.pos - self.goal))
        return Step.one(
            self._obs(),
            -dist,
            False,
            self.t >= self.max_steps,
            success=dist < 0.1,
            executed=executed,
            intervened=intervened,
            stamps={},
            timing={},
        )

    def close(self):
        self.closed = True


def point_expert(obs) -> np.ndarray:
    """The straight-line action towards the goal (what a scripted expert or an operator would do)."""
    return np.clip((obs["goal"] - obs["pos"]) / 0.2, -1, 1).astype(np.float32)


class TakeoverPointEnv(PointReachEnv):
    """PointReachEnv where an operator takes over every ``every``-th step (steps 0, every, 2*every, ...) and
    executes `point_expert`'s action instead of the policy's; the step reports it as an env with a teleop device
    does (``intervened``, ``executed``)."""

    def __init__(self, every: int = 3, **kw):
        super().__init__(**kw)
        self.every = every

    def step(self, action) -> Step:
        intervened = self.t % self.every == 0
        return self._move(point_expert(self._obs()) if intervened else action, intervened)
