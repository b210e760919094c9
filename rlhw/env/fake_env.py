"""A RobotEnv-contract env that costs nothing: for the env service's tests and benchmark.

It moves no arm and renders nothing; it returns preallocated arrays, so a benchmark against it
measures the service and not the env. It records what the server did to it (stops, closes, the
order of events) so tests can check safety behaviour such as "shutdown stops the arm first".
It is not a simulator: the MuJoCo backend (drivers/) is what the compliance tests run against.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from rlhw.config.root import Config
from rlhw.errors import RobotFault
from rlhw.robot.spec import EnvSpec, TensorSpec
from rlhw.robot.step import FLAG, Reset, Step

_NO_FAULT, _NO_MESSAGE = (None,), ("",)  # one instance, no fault


class FakeEnv:
    """Proprio observations (+ optional HxWx3 uint8 cameras); 7-D action in [-1, 1]."""

    def __init__(
        self,
        cameras: int = 0,
        image_hw: tuple[int, int] = (128, 128),
        episode_length: int = 50,
        num_envs: int = 1,
        step_delay_s: float = 0.0,
        reset_delay_s: float = 0.0,
        intervene_every: int = 0,
    ):
        self.num_envs = num_envs
        #: > 0: report interventions as RobotEnv does with a teleop operator: every k-th step an
        #: "operator" executed the negated action (the step's ``intervened`` and ``executed``).
        self.intervene_every = intervene_every
        self.episode_length = episode_length
        self.step_delay_s = step_delay_s
        self.reset_delay_s = reset_delay_s
        cam_names = tuple(f"cam{i}" for i in range(cameras))
        obs = {
            "joint_pos": TensorSpec("joint_pos", "float32", (7,), -3.0, 3.0),
            "ee_pose": TensorSpec("ee_pose", "float32", (7,)),
            "gripper": TensorSpec("gripper", "float32", (1,), 0.0, 0.08),
        }
        for name in cam_names:
            obs[name] = TensorSpec(name, "uint8", (*image_hw, 3))
        self.spec = EnvSpec(
            observations=obs,
            action=TensorSpec("action", "float32", (7,), -1.0, 1.0),
            control_hz=10.0,
            num_envs=num_envs,
            robot="fake arm (no hardware)",
            cameras=cam_names,
            description="rlhw.env.fake_env.FakeEnv: constant observations, for service tests",
        )
        batch = (num_envs,)  # a leading instance axis, as a `Step` holds them (one instance: 1)
        rng = np.random.default_rng(0)
        self._obs = {
            name: (
                rng.integers(0, 255, batch + s.shape, dtype=np.uint8)
                if s.dtype == "uint8"
                else np.zeros(batch + s.shape, dtype=s.dtype)
            )
            for name, s in obs.items()
        }
        self._row = {k: v[0] for k, v in self._obs.items()}  # one instance's observation (views): what it steps
        self._t = np.zeros(num_envs, dtype=np.int64)
        self._t1 = 0
        self.events: list[str] = []
        self.stops = 0
        self.closed = False
        self.steps = 0
        self.resets = 0
        self.last_action: np.ndarray | None = None
        self.fail_next: RobotFault | Exception | None = None
        self._lock = threading.Lock()

    # -- contract -----------------------------------------------------------------------------
    def reset(self, seed: int | None = None) -> Reset:
        t0 = time.perf_counter()
        self.events.append("reset")
        if self.reset_delay_s:
            time.sleep(self.reset_delay_s)
        self.resets += 1
        self._t[:] = 0
        self._t1 = 0
        self._obs["joint_pos"][...] = 0.0
        now = np.full(self.num_envs, time.time())
        stamps = dict.fromkeys(self._obs, now)
        return Reset(dict(self._obs), stamps, np.zeros(self.num_envs, bool), {"env": time.perf_counter() - t0})

    def step(self, action: np.ndarray) -> Step:
        t0 = time.perf_counter()
        if self.fail_next is not None:
            err, self.fail_next = self.fail_next, None
            raise err
        if self.step_delay_s:
            time.sleep(self.step_delay_s)
        self.steps += 1
        self.last_action = action
        return self._step_one(action, t0) if self.num_envs == 1 else self._step_batch(action, t0)

    def _step_one(self, action: np.ndarray, t0: float) -> Step:
        """One instance: the benchmarks' path, so the env's own cost stays near zero."""
        self._t1 += 1
        # seven floats: Python beats numpy's per-call overhead
        values = action.tolist() if action.ndim == 1 else action.reshape(-1).tolist()
        if any(values):
            jp = self._row["joint_pos"]  # the instance's row: no broadcasting
            jp += 0.01 * action
            np.clip(jp, -3.0, 3.0, out=jp)
        executed, intervened = np.asarray(action, np.float32).reshape(1, -1), FLAG[False]
        if self.intervene_every:
            executed, intervened = self._intervention(executed, self._t1)
        now = np.array([time.time()])
        return Step(
            self._obs,
            np.array([-sum(map(abs, values))]),
            FLAG[False],
            FLAG[self._t1 >= self.episode_length],
            FLAG[False],
            executed,
            intervened,
            _NO_FAULT,
            _NO_MESSAGE,
            dict.fromkeys(self._obs, now),
            {"env": time.perf_counter() - t0},
        )

    def _step_batch(self, action: np.ndarray, t0: float) -> Step:
        """n instances, with same-step autoreset of the ones whose episode ended."""
        n = self.num_envs
        self._t += 1
        # The joint position follows the action a little, so tests can see actions arrive.
        if action.any():
            jp = self._obs["joint_pos"]
            jp += 0.01 * action
            np.clip(jp, -3.0, 3.0, out=jp)
        truncated = self._t >= self.episode_length
        executed, intervened = self._intervention(action, int(self._t[0]))
        final_obs = final_mask = None
        if truncated.any():
            final_obs, final_mask = {k: v.copy() for k, v in self._obs.items()}, truncated.copy()
            self._t[truncated] = 0
            self._obs["joint_pos"][truncated] = 0.0  # same-step autoreset: rows start a new episode
        now = time.time()
        return Step(
            dict(self._obs),
            -np.abs(action).sum(axis=-1).astype(np.float64),
            np.zeros(n, bool),
            truncated,
            np.zeros(n, bool),
            executed,
            intervened,
            (None,) * n,
            ("",) * n,
            {k: np.full(n, now) for k in self._obs},
            {"env": time.perf_counter() - t0},
            final_obs,
            final_mask,
        )

    def _intervention(self, action: np.ndarray, t: int) -> tuple[np.ndarray, np.ndarray]:
        """(executed, intervened) per instance: with ``intervene_every``, every k-th step instance 0's operator
        executed the negated action, as RobotEnv reports a teleop operator's takeover."""
        executed = np.asarray(action, np.float32)
        intervened = np.zeros(len(executed), bool)
        if self.intervene_every and t % self.intervene_every == 0:
            executed = executed.copy()
            executed[0] = -executed[0]
            intervened[0] = True
        return executed, intervened

    def stop(self) -> None:
        self.events.append("stop")
        self.stops += 1

    def status(self) -> dict:
        return {"steps": self.steps, "resets": self.resets, "stops": self.stops, "closed": self.closed}

    def close(self) -> None:
        self.events.append("close")
        self.closed = True


def make_fake_env(config: Config | None = None, robot_rank: int = 0, **kwargs) -> FakeEnv:
    """Factory with make_env's signature, for ``rlhw serve-env --env rlhw.env.fake_env:make_fake_env``.

    Keyword arguments come from the ``RLHW_FAKE_ENV`` environment variable (``cameras=2,h=128,w=128``)
    so subprocess tests can shape it.
    """
    import os

    opts = dict(kwargs)
    for item in filter(None, os.environ.get("RLHW_FAKE_ENV", "").split(",")):
        key, _, value = item.partition("=")
        opts[key.strip()] = value.strip()
    h = int(opts.pop("h", 128))
    w = int(opts.pop("w", 128))
    return FakeEnv(
        cameras=int(opts.pop("cameras", 0)),
        image_hw=(h, w),
        episode_length=int(opts.pop("episode_length", 50)),
        num_envs=int(opts.pop("num_envs", 1)),
        step_delay_s=float(opts.pop("step_delay_s", 0.0)),
        reset_delay_s=float(opts.pop("reset_delay_s", 0.0)),
        intervene_every=int(opts.pop("intervene_every", 0)),
    )
