"""`RemoteVectorEnv`: one gymnasium vector env over many env servers, calls in parallel."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import gymnasium as gym
import numpy as np

from rlhw.env.remote_env import RemoteEnv
from rlhw.robot.gym import spaces_from_spec
from rlhw.robot.spec import EnvSpec


class RemoteVectorEnv(gym.vector.VectorEnv):
    """One vector env over many servers (each may host several instances); calls go out in parallel.

    Autoreset is same-step, as in rlhw.robot.batch.BatchedEnv: when an instance ends, the returned
    observation row is the first of its next episode and the last one is in
    ``info["final_observation"]`` (rows where ``info["_final_observation"]`` is True).
    """

    metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}

    def __init__(self, addresses: Sequence[str], token: str | None = None, **kwargs):
        if not addresses:
            raise ValueError("addresses: give at least one env server address")
        kwargs.setdefault("use_session", True)
        kwargs.setdefault("measurements_in_info", True)  # gathered per instance into this env's info
        self.envs = [RemoteEnv(a, token, **kwargs) for a in addresses]
        first = self.envs[0].env_spec
        for env in self.envs[1:]:
            s = env.env_spec
            if _shape_sig(s) != _shape_sig(first):
                raise ValueError(
                    f"addresses: server {env.address} serves {_shape_sig(s)} but {self.envs[0].address} serves "
                    f"{_shape_sig(first)}; a vector env needs identical specs"
                )
        self.counts = [e.num_envs for e in self.envs]
        self.num_envs = sum(self.counts)
        self.single_observation_space, self.single_action_space = spaces_from_spec(first, batched=False)
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space, self.num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, self.num_envs)
        self._offsets = np.cumsum([0] + self.counts)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        seeds = [None] * len(self.envs) if seed is None else [seed + int(o) for o in self._offsets[:-1]]
        results = [None] * len(self.envs)
        threads = [
            threading.Thread(target=lambda i=i: results.__setitem__(i, _safe(self.envs[i].reset_typed, seed=seeds[i])))
            for i in range(len(self.envs))
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for r in results:
            if isinstance(r, BaseException):
                raise r
        obs = self._stack([r.obs for r in results])
        info = {"timestamps": [r.stamps for r in results]}  # per server: name -> capture times (its instances)
        return obs, info

    def step(self, actions):
        actions = np.asarray(actions, dtype=self.single_action_space.dtype)
        if actions.shape[0] != self.num_envs:
            raise ValueError(f"actions: expected a leading dimension of {self.num_envs}, got shape {actions.shape}")
        parts = [actions[self._offsets[i] : self._offsets[i + 1]] for i in range(len(self.envs))]
        parts = [a[0] if env.num_envs == 1 else a for a, env in zip(parts, self.envs)]
        for env, a in zip(self.envs, parts):  # every request first, then the answers: the servers work at once
            env.send_step(a)
        timeout_s = max(e.timeout_s for e in self.envs)
        steps = [env.receive_step(a, timeout_s) for env, a in zip(self.envs, parts)]
        obs_parts = [s.obs for s in steps]
        final_obs = [s.obs if s.final_obs is None else s.final_obs for s in steps]
        final_mask = [
            s.ended if env.num_envs == 1 else (np.zeros(env.num_envs, bool) if s.final_mask is None else s.final_mask)
            for env, s in zip(self.envs, steps)
        ]
        done_single = [i for i, (env, s) in enumerate(zip(self.envs, steps)) if env.num_envs == 1 and s.ended[0]]
        if done_single:  # same-step autoreset for single-instance servers, in parallel
            for i in done_single:
                self.envs[i].send_reset()
            timeout_s = max(self.envs[i].reset_timeout_s for i in done_single)
            for i in done_single:
                obs_parts[i] = self.envs[i].receive_reset(timeout_s).obs
        mask = np.concatenate(final_mask)
        info = {"timing": [s.timing for s in steps]}
        if mask.any():
            info["final_observation"] = self._stack(final_obs)
            info["_final_observation"] = mask
        return (
            self._stack(obs_parts),
            np.concatenate([s.reward for s in steps]).astype(np.float32),
            np.concatenate([s.terminated for s in steps]),
            np.concatenate([s.truncated for s in steps]),
            info,
        )

    def _stack(self, parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        out = {}
        for name in self.single_observation_space.spaces:  # each part has its leading instance axis
            out[name] = np.concatenate([p[name] for p in parts], axis=0)
        return out

    def close_extras(self, **kwargs) -> None:
        for env in self.envs:
            env.close()


def _safe(fn, **kwargs):
    try:
        return fn(**kwargs)
    except BaseException as e:  # re-raised in the caller's thread
        return e


def _shape_sig(spec: EnvSpec):
    return (
        tuple((n, s.dtype, tuple(s.shape)) for n, s in spec.observations.items()),
        (spec.action.dtype, tuple(spec.action.shape)),
    )
