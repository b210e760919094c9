"""`BatchedEnv`: N `RobotEnv`s in one process, stepped together, with same-step autoreset.

Shapes: every observation gets a leading dimension N; ``reward``, ``terminated``, ``truncated`` and
``info["success"]`` are arrays of length N; the spec is the members' spec with ``num_envs = N``.

Same-step autoreset (exactly): when instance i's episode ends in ``step`` (terminated or truncated,
including truncation by a fault), the env resets instance i inside the same call. Then

- ``reward[i]``, ``terminated[i]``, ``truncated[i]`` and ``info["success"][i]`` belong to the step that
  ended the episode;
- ``info["final_observation"][i]`` is that episode's last observation (a dict) and
  ``info["final_info"][i]`` its per-instance info; both are None for instances that did not end;
- ``obs[i]`` is the FIRST observation of the next episode, and ``info["reset"][i]`` is True.

So a learner stores ``(obs, action, reward, final_observation if ended else next obs, terminated)``.
A fault in the automatic reset that locks instance i raises `SafetyViolation` (as RobotEnv.reset does).
The per-instance dicts ``timestamps``, ``timing``, ``fault``, ``fault_message`` are lists of length N.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from rlhw.robot.env import RobotEnv
from rlhw.robot.spec import EnvSpec

_PER_ENV = ("timestamps", "timing", "fault", "fault_message", "episode_step", "clipped", "frame_index")


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

    def _stack(self, obs_list: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        return {k: np.stack([o[k] for o in obs_list]) for k in self.spec.observations}

    def reset(self, seed: int | None = None) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
        """Reset every instance; instance i gets ``seed + i`` when a seed is given."""
        results = [e.reset(seed=None if seed is None else seed + i) for i, e in enumerate(self.envs)]
        obs = self._stack([r[0] for r in results])
        infos = [r[1] for r in results]
        info = self._merge(infos)
        info["reset"] = np.ones(self.num_envs, dtype=bool)
        return obs, info

    def step(self, actions) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
        actions = np.asarray(actions, dtype=np.float32)
        expected = (self.num_envs, *self.spec.action.shape)
        if actions.shape != expected:
            raise ValueError(f"actions have shape {actions.shape}, expected {expected} (one action per env instance)")
        n = self.num_envs
        obs_list: list[dict[str, np.ndarray]] = []
        rewards = np.zeros(n, dtype=np.float32)
        terminated = np.zeros(n, dtype=bool)
        truncated = np.zeros(n, dtype=bool)
        reset = np.zeros(n, dtype=bool)
        finals: list[dict[str, np.ndarray] | None] = [None] * n
        final_infos: list[dict[str, Any] | None] = [None] * n
        infos: list[dict[str, Any]] = []
        for i, (env, action) in enumerate(zip(self.envs, actions)):
            o, r, term, trunc, inf = env.step(action)
            rewards[i], terminated[i], truncated[i] = r, term, trunc
            if term or trunc:
                finals[i], final_infos[i] = o, inf
                o, _reset_info = env.reset()
                reset[i] = True
            obs_list.append(o)
            infos.append(inf)
        info = self._merge(infos)
        info["final_observation"] = finals
        info["final_info"] = final_infos
        info["reset"] = reset
        return self._stack(obs_list), rewards, terminated, truncated, info

    def _merge(self, infos: list[dict[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {"success": np.array([bool(i["success"]) for i in infos])}
        for key in _PER_ENV:
            out[key] = [i.get(key) for i in infos]
        return out

    def stop(self) -> None:
        for e in self.envs:
            e.stop()

    def status(self) -> dict[str, Any]:
        return {"num_envs": self.num_envs, "envs": [e.status() for e in self.envs]}

    def close(self) -> None:
        for e in self.envs:
            e.close()

    def __enter__(self) -> "BatchedEnv":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
