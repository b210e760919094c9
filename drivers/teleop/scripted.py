"""A scripted expert for simulation, behind the `TeleopDevice` interface: demos and interventions without a person.

It reads PRIVILEGED simulator state through the env it is given: the measured hand position
(``env.measured_state``), the task's goal (``env.task.target`` / ``env.task.goal``) and simulator hooks
(``env.arm.object_pose("cube")``). It never sees the policy's observations, so a policy trained on its
demos cannot have learnt from anything the expert alone knew through the observation path.

Experts per task: ``register_expert(task_name, fn)`` with ``fn(env) -> np.ndarray`` the ideal action
(float32 in [-1, 1], the env's action shape). ``reach`` and ``push_cube`` are registered here; e.g. the
insertion task's is registered with
``register_expert("insert", insert_expert_action)`` (drivers/teleop/insert_expert.py).

Modes:

- ``demo``: always active (it drives every step);
- ``intervene``: watches the policy's progress (the task's reward of the measured state, which for
  reach is minus the hand-goal distance; for push_cube its dense shaping of the hand and the simulator's
  cube, whatever reward the policy learns from: minus the cube-goal distance plus half the hand-cube one); when it has not improved for ``patience`` steps it takes over with probability
  ``intervene_prob`` (multiplied by ``intervene_decay`` after every episode, so interventions fade over
  a run), drives for ``takeover_steps`` steps, then gives back.

In a rehearsal (``env.sim_state: hidden``) the demo-mode expert also marks success, as a person at a real cell
presses the success key: when it sees the task clearly done (`Task.operator_sees_success`: for push_cube the cube
well onto the tape), it holds still and sends ``SUCCESS``.

Human imperfection: Gaussian ``noise`` on every action, and ``hesitation``: with that probability per
step it pauses (zero motion) for ``pause_steps`` steps.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from rlhw.config.env import TeleopConfig
from rlhw.errors import ConfigError
from rlhw.robot.registry import register_teleop
from rlhw.robot.teleop import Operator, TeleopDevice, TeleopEvent, TeleopReading

ExpertFn = Callable[[object], np.ndarray]
ProgressFn = Callable[[object], float]
_EXPERTS: dict[str, ExpertFn] = {}
_PROGRESS: dict[str, ProgressFn] = {}


def task_reward_progress(env) -> float:
    """Progress as the task's reward of the measured state (reach, insert: their reward reads nothing hidden)."""
    return float(env.task.reward(env.measured_state))


def register_expert(task_name: str, fn: ExpertFn, progress: ProgressFn | None = None) -> ExpertFn:
    """Make ``fn(env) -> ideal action`` the scripted expert of task ``task_name`` (last one wins); ``progress(env)``
    is how it judges, in intervene mode, whether the policy gets on (default: the task's reward)."""
    _EXPERTS[task_name] = fn
    _PROGRESS[task_name] = progress or task_reward_progress
    return fn


def expert_for(task_name: str) -> ExpertFn:
    if task_name not in _EXPERTS:
        raise ConfigError(
            "env.teleop.device",
            f"no scripted expert for task {task_name!r} (experts: "
            f"{', '.join(sorted(_EXPERTS))}); register one with drivers.teleop.register_expert",
        )
    return _EXPERTS[task_name]


def action_toward(env, target_xyz, gripper: float = 1.0) -> np.ndarray:
    """The action that moves the hand straight at ``target_xyz`` (full speed beyond one action scale)."""
    hand = np.asarray(env.measured_state.ee_position, dtype=float)
    move = (np.asarray(target_xyz, dtype=float) - hand) / env.config.action.scale_m
    action = np.zeros(env.spec.action.shape, dtype=np.float32)
    action[:3] = np.clip(move, -1.0, 1.0)
    if action.shape[0] > 3:
        action[3] = gripper
    return action


def reach_expert(env) -> np.ndarray:
    """Straight to the target, gripper open."""
    return action_toward(env, env.task.target)


PUSH_Z = 0.03  # hand (TCP) height while pushing: fingertips at the cube's mid-height
CLEAR_Z = 0.10  # hand height while moving around the cube
BEHIND_M = 0.06  # start of a push: this far behind the cube centre, on the goal line
ALIGNED_M = 0.015  # lateral tolerance to count as on the goal line


def push_cube_expert(env) -> np.ndarray:
    """Go behind the cube on the cube-goal line (above it), descend, push along the line."""
    hand = np.asarray(env.measured_state.ee_position, dtype=float)
    cube = np.array(env.arm.object_pose("cube").position)
    goal = np.asarray(env.task.goal, dtype=float)
    line = goal[:2] - cube[:2]
    u = line / max(float(np.linalg.norm(line)), 1e-6)
    rel = hand[:2] - cube[:2]
    along = float(rel @ u)
    lateral = rel - along * u
    behind = cube[:2] - u * BEHIND_M
    if along < -0.03 and float(np.linalg.norm(lateral)) < ALIGNED_M and hand[2] < PUSH_Z + 0.02:
        # pushing: follow the line to the goal, pulling back onto it
        target = np.array([*(hand[:2] + u * 0.03 - lateral), PUSH_Z])
    elif float(np.linalg.norm(hand[:2] - behind)) < ALIGNED_M:
        target = np.array([*behind, PUSH_Z])  # above the start of the push: descend
    elif hand[2] < CLEAR_Z - 0.02 and float(np.linalg.norm(rel)) < BEHIND_M + 0.03:
        target = np.array([*hand[:2], CLEAR_Z])  # near the cube and low: rise before crossing
    else:
        target = np.array([*behind, CLEAR_Z])
    return action_toward(env, target, gripper=-1.0)


def push_cube_progress(env) -> float:
    """The operator's sense of progress on push_cube: the task's dense shaping of what it sees (the cube too)."""
    return env.task.shaping(env.measured_state.ee_position, env.arm.object_pose("cube").position)


register_expert("reach", reach_expert)
register_expert("push_cube", push_cube_expert, progress=push_cube_progress)


@register_teleop("scripted")
class ScriptedExpert(TeleopDevice):
    """A simulated operator for ``env``; see the module docstring for the modes."""

    name = "scripted"
    operator = Operator.PROGRAM  # it reads the simulator, not a clock: a simulated env need not pace for it

    def __init__(
        self,
        env,
        *,
        mode: str = "demo",
        noise: float = 0.1,
        hesitation: float = 0.05,
        pause_steps: int = 3,
        patience: int = 5,
        intervene_prob: float = 1.0,
        intervene_decay: float = 0.98,
        takeover_steps: int = 8,
        seed: int = 0,
    ):
        if mode not in ("demo", "intervene"):
            raise ConfigError("env.teleop.mode", f"expected demo or intervene, got {mode!r}")
        self.env = env
        self.expert = expert_for(env.task.name)
        self.progress = _PROGRESS[env.task.name]
        self.mode, self.noise, self.hesitation, self.pause_steps = mode, noise, hesitation, pause_steps
        self.patience, self.prob, self.decay, self.takeover_steps = (
            patience,
            intervene_prob,
            intervene_decay,
            takeover_steps,
        )
        self._rng = np.random.default_rng(seed)
        self._episode = None
        self._best = -math.inf
        self._stale = 0
        self._driving_left = 0
        self._pause_left = 0
        self.interventions = 0
        self._open = False

    @classmethod
    def from_config(cls, config: TeleopConfig, env) -> ScriptedExpert:
        return cls(
            env,
            mode=config.mode,
            noise=config.noise,
            hesitation=config.hesitation,
            pause_steps=config.pause_steps,
            patience=config.patience,
            intervene_prob=config.intervene_prob,
            intervene_decay=config.intervene_decay,
            takeover_steps=config.takeover_steps,
            seed=config.seed + env.seed,  # instances of a batched env differ
        )

    def open(self, timeout_s: float = 5.0) -> None:
        self._open = True

    def close(self) -> None:
        self._open = False

    def read(self, timeout_s: float = 0.05) -> TeleopReading:
        events: set[TeleopEvent] = set()
        if not self.env.episode_active or self.env.measured_state is None:
            # read between episodes (the env's reset checks the device): nothing to drive yet
            return TeleopReading(np.zeros(6, dtype=np.float32), None, (), frozenset(), False, self.now())
        self._new_episode_check()
        if self._sees_success():  # a person's success key: hold still, end the episode labelled
            return TeleopReading(
                np.zeros(6, dtype=np.float32), None, (), frozenset({TeleopEvent.SUCCESS}), True, self.now()
            )
        active = self.mode == "demo" or self._decide(events)
        twist = np.zeros(6, dtype=np.float32)
        gripper = None
        if active:
            action = self._act()
            twist[:3] = action[:3]
            gripper = float(action[3]) if action.shape[0] > 3 else None
        return TeleopReading(twist, gripper, (), frozenset(events), active, self.now())

    @staticmethod
    def now() -> float:
        return time.time()

    def _new_episode_check(self) -> None:
        episode = self.env.episodes
        if episode != self._episode:
            if self._episode is not None:
                self.prob *= self.decay
            self._episode = episode
            self._best, self._stale, self._driving_left, self._pause_left = -math.inf, 0, 0, 0

    def _sees_success(self) -> bool:
        """Demo mode in a rehearsal (``env.sim_state: hidden``): the operator's eyes (the simulator's judge) see
        the task done and mark it, as a person presses the success key; no sensor of a real cell would tell."""
        return (
            self.mode == "demo"
            and self.env.config.sim_state == "hidden"
            and bool(self.env.task.operator_sees_success(self.env.arm, self.env.measured_state))
        )

    def _decide(self, events: set[TeleopEvent]) -> bool:
        """Intervene mode: track progress; take over / give back. Returns whether it drives now."""
        progress = float(self.progress(self.env))
        if progress > self._best + 1e-3:
            self._best, self._stale = progress, 0
        else:
            self._stale += 1
        if self._driving_left > 0:
            self._driving_left -= 1
            if self._driving_left == 0:
                events.add(TeleopEvent.GIVE_BACK)
                self._best, self._stale = progress, 0
                return False
            return True
        if self._stale >= self.patience:
            self._stale = 0
            if self._rng.uniform() < self.prob:
                self._driving_left = self.takeover_steps
                self.interventions += 1
                events.add(TeleopEvent.TAKEOVER)
                return True
        return False

    def _act(self) -> np.ndarray:
        action = np.asarray(self.expert(self.env), dtype=np.float32).copy()
        if self._pause_left > 0 or (self.hesitation > 0 and self._rng.uniform() < self.hesitation):
            self._pause_left = (self._pause_left or self.pause_steps) - 1
            action[:3] = 0.0
            return action
        if self.noise > 0:
            action[:3] += self._rng.normal(0.0, self.noise, size=3).astype(np.float32)
        return np.clip(action, -1.0, 1.0)
