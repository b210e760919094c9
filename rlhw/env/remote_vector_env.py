"""`RemoteVectorEnv`: one gymnasium vector env over many env servers, calls in parallel."""

from __future__ import annotations

import threading
from typing import Sequence

import gymnasium as gym
import numpy as np

from rlhw.env import codec
from rlhw.env.remote_env import RemoteEnv
from rlhw.env.v1 import env_pb2 as pb
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

    def _parallel(self, calls: list[tuple[RemoteEnv, bytes]], timeout_s: float) -> list:
        """Send every request first, then collect: the servers work at the same time."""
        for env, req in calls:
            env._send(req)
        return [env._receive(timeout_s) for env, _ in calls]

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        seeds = [None] * len(self.envs) if seed is None else [seed + int(o) for o in self._offsets[:-1]]
        results = [None] * len(self.envs)
        threads = [threading.Thread(target=lambda i=i: results.__setitem__(i, _safe(self.envs[i].reset, seed=seeds[i])))
                   for i in range(len(self.envs))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for r in results:
            if isinstance(r, BaseException):
                raise r
        obs = self._stack([r[0] for r in results])
        info = {"timestamps": [r[1]["timestamps"] for r in results]}
        return obs, info

    def step(self, actions):
        actions = np.asarray(actions, dtype=self.single_action_space.dtype)
        if actions.shape[0] != self.num_envs:
            raise ValueError(f"actions: expected a leading dimension of {self.num_envs}, got shape {actions.shape}")
        requests = []
        for i, env in enumerate(self.envs):
            a = actions[self._offsets[i]: self._offsets[i + 1]]
            a = a[0] if env.num_envs == 1 else a
            requests.append((env, codec.step_request(a, True)))
        responses = self._parallel(requests, max(e.timeout_s for e in self.envs))
        steps = [env._unpack_step(head, observations) for env, (_, head, observations) in zip(self.envs, responses)]
        obs_parts, rewards, terms, truncs, final_obs, final_mask = [], [], [], [], [], []
        done_single = []
        for i, (env, (obs, rew, term, trunc, info)) in enumerate(zip(self.envs, steps)):
            rewards.append(np.atleast_1d(rew)); terms.append(np.atleast_1d(term)); truncs.append(np.atleast_1d(trunc))
            if env.num_envs == 1:
                final_obs.append(obs)
                done = bool(term or trunc)
                final_mask.append(np.array([done]))
                if done:
                    done_single.append(i)
            else:
                final_obs.append(info.get("final_observation") or {k: np.zeros_like(v) for k, v in obs.items()})
                final_mask.append(info.get("_final_observation", np.zeros(env.num_envs, bool)))
            obs_parts.append(obs)
        if done_single:  # same-step autoreset for single-instance servers, in parallel
            reset = pb.SessionRequest(reset=pb.ResetRequest()).SerializeToString()
            resets = self._parallel([(self.envs[i], reset) for i in done_single],
                                    max(self.envs[i].reset_timeout_s for i in done_single))
            for i, (_, _, observations) in zip(done_single, resets):
                obs_parts[i] = observations.get("observation", ({}, {}))[0]
        mask = np.concatenate(final_mask)
        info = {"timing": [s[4]["timing"] for s in steps]}
        if mask.any():
            info["final_observation"] = self._stack(final_obs)
            info["_final_observation"] = mask
        return (self._stack(obs_parts), np.concatenate(rewards).astype(np.float32), np.concatenate(terms),
                np.concatenate(truncs), info)

    def _stack(self, parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
        out = {}
        for name in self.single_observation_space.spaces:
            rows = [p[name] if env.num_envs > 1 else p[name][None] for p, env in zip(parts, self.envs)]
            out[name] = np.concatenate(rows, axis=0)
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
