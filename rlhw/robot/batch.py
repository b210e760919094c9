"""`BatchedEnv`: N `RobotEnv`s in one process, stepped together, with same-step autoreset.

Shapes: every observation gets a leading dimension N, and ``step`` returns one `Step` (rlhw/robot/step.py)
of the N instances; the spec is the members' spec with ``num_envs = N``.

Same-step autoreset (exactly): when instance i's episode ends in ``step`` (terminated or truncated,
including truncation by a fault), the env resets instance i inside the same call. Then

- the step's ``reward[i]``, ``terminated[i]``, ``truncated[i]``, ``success[i]``, ``fault[i]`` and
  ``notes[i]`` belong to the step that ended the episode;
- ``final_obs``'s row i is that episode's last observation, where ``final_mask[i]`` is set;
- ``obs[i]`` is the FIRST observation of the next episode.

So a learner stores ``(obs, action, reward, final observation if ended else next obs, terminated)``
(`Step.last`). A fault in the automatic reset that locks instance i raises `SafetyViolation` (as RobotEnv.reset
does). ``reset`` returns one `Reset` of the N instances (`stack_resets`: each phase's slowest instance).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rlhw.robot.env import RobotEnv
from rlhw.robot.spec import EnvSpec
from rlhw.robot.step import Reset, Step, stack, stack_resets


class BatchedEnv:
    def __init__(self, envs: Sequence[RobotEnv]):
        if not envs:
            raise ValueError("BatchedEnv needs at least one env")
        self.envs = list(envs)
        first = self.envs[0].spec
        for e in self.envs[1:]:
            if e.spec.observations.keys() != first.observations.keys() or e.spec.action != first.action:
                raise ValueError("all envs of a BatchedEnv must have the same observation and action specs")
        self.num_envs = len(self.envs)
        self.spec: EnvSpec = dataclasses.replace(first, num_envs=self.num_envs)

    @property
    def paced(self) -> bool:
        """A person drives one of the instances (`RobotEnv.paced`): the batch steps at ``env.control_hz``."""
        return any(e.paced for e in self.envs)

    def reset(self, seed: int | None = None) -> Reset:
        """Reset every instance; instance i gets ``seed + i`` when a seed is given."""
        return stack_resets([e.reset(seed=None if seed is None else seed + i) for i, e in enumerate(self.envs)])

    def step(self, actions) -> Step:
        actions = np.asarray(actions, dtype=np.float32)
        expected = (self.num_envs, *self.spec.action.shape)
        if actions.shape != expected:
            raise ValueError(f"actions have shape {actions.shape}, expected {expected} (one action per env instance)")
        steps: list[Step] = []
        obs: list[Mapping[str, np.ndarray]] = []
        finals: dict[int, Mapping[str, np.ndarray]] = {}
        for i, (env, action) in enumerate(zip(self.envs, actions)):
            step = env.step(action)
            steps.append(step)
            if step.ended[0]:
                finals[i] = step.obs
                obs.append(env.reset().obs)
            else:
                obs.append(step.obs)
        return stack(steps, obs, finals)

    def stop(self) -> None:
        for e in self.envs:
            e.stop()

    def status(self) -> dict[str, Any]:
        return {"num_envs": self.num_envs, "envs": [e.status() for e in self.envs]}

    def close(self) -> None:
        for e in self.envs:
            e.close()

    def __enter__(self) -> BatchedEnv:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
