"""A scripted expert for simulation, behind the `TeleopDevice` interface: demos and interventions without a person.

It stands in for a person and uses a real device's interface: it is built from an `OperatorView`
(rlhw/robot/teleop.py), what a person at the cell may see and do, and sees through its ``look()``: the measured
hand, the task's goal as an operator knows it and the scene's objects a person sees (push_cube's cube, read from
the simulator for it). It never sees the policy's observations, so a policy trained on its demos cannot have
learnt from anything the expert alone knew through the observation path; the policy, the replay and the reward
never see what it reads.

What it does at a task is the task's `Expert`, written beside the task (``@register_expert`` in
rlhw/robot/tasks/reach.py, push_cube.py, insert.py): where to aim the hand, and how to judge a policy's progress.
This device turns an aim into a twist (full deflection beyond one action scale, ``OperatorView.action_scale_m``).

Modes:

- ``demo``: always active (it drives every step);
- ``intervene``: watches the policy's progress (the task expert's measure: for reach minus the hand-goal
  distance; for push_cube the dense shaping of the hand and the cube it sees); when it has not improved for
  ``patience`` steps it takes over with probability ``intervene_prob`` (multiplied by ``intervene_decay`` after
  every episode, so interventions fade over a run), drives for ``takeover_steps`` steps, then gives back.

In a rehearsal (``env.sim_state: hidden``) the demo-mode expert also marks success, as a person at a real cell
presses the success key: when it sees the task clearly done (`Sight.sees_success`: for push_cube the cube well
onto the tape), it holds still and sends ``SUCCESS``.

Human imperfection: Gaussian ``noise`` on every action, and ``hesitation``: with that probability per
step it pauses (zero motion) for ``pause_steps`` steps.
"""

from __future__ import annotations

import math
import time

import numpy as np

from rlhw.config.env import TeleopConfig
from rlhw.errors import ConfigError
from rlhw.robot.registry import register_teleop
from rlhw.robot.teleop import Aim, Operator, OperatorView, Sight, TeleopDevice, TeleopEvent, TeleopReading


def aim_twist(aim: Aim, sight: Sight, scale_m: float) -> np.ndarray:
    """The linear command (3, float32 in [-1, 1]) that moves the hand straight at ``aim.target``: full
    deflection beyond one action scale ``scale_m``."""
    move = (np.asarray(aim.target, dtype=float) - np.asarray(sight.hand, dtype=float)) / scale_m
    return np.clip(move, -1.0, 1.0).astype(np.float32)


def expert_action(view: OperatorView) -> np.ndarray:
    """The task expert's action now, without noise or pauses (float32, the action's shape): a scripted baseline
    policy (tools/bench_insert.py). Zeros between episodes."""
    action = np.zeros(view.action_shape, dtype=np.float32)
    sight = view.look()
    if sight is None:
        return action
    aim = view.expert().aim(sight)
    action[:3] = aim_twist(aim, sight, view.action_scale_m)
    if action.shape[0] > 3:
        action[3] = aim.gripper
    return action


@register_teleop("scripted")
class ScriptedExpert(TeleopDevice):
    """A simulated operator at ``view``; see the module docstring for the modes."""

    name = "scripted"
    operator = Operator.PROGRAM  # it reads the simulator, not a clock: a simulated env need not pace for it

    def __init__(
        self,
        view: OperatorView,
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
        self.view = view
        self.expert = view.expert()
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

    def verdict(self, timeout_s: float) -> bool | None:
        """What a person watching would say of a success the classifier called: no when it sees the task plainly
        not done (`Sight.sees_failure`), else yes; None between episodes. At once: a program needs no time."""
        sight = self.view.look()
        return None if sight is None else not sight.sees_failure

    @classmethod
    def from_config(cls, config: TeleopConfig, view: OperatorView) -> ScriptedExpert:
        return cls(
            view,
            mode=config.mode,
            noise=config.noise,
            hesitation=config.hesitation,
            pause_steps=config.pause_steps,
            patience=config.patience,
            intervene_prob=config.intervene_prob,
            intervene_decay=config.intervene_decay,
            takeover_steps=config.takeover_steps,
            seed=config.seed + view.seed,  # instances of a batched env differ
        )

    def open(self, timeout_s: float = 5.0) -> None:
        self._open = True

    def close(self) -> None:
        self._open = False

    def read(self, timeout_s: float = 0.05) -> TeleopReading:
        events: set[TeleopEvent] = set()
        sight = self.view.look()
        if sight is None:
            # read between episodes (the env's reset checks the device): nothing to drive yet
            return TeleopReading(np.zeros(6, dtype=np.float32), None, (), frozenset(), False, self.now())
        self._new_episode_check(sight)
        if self._marks_success(sight):  # a person's success key: hold still, end the episode labelled
            return TeleopReading(
                np.zeros(6, dtype=np.float32), None, (), frozenset({TeleopEvent.SUCCESS}), True, self.now()
            )
        active = self.mode == "demo" or self._decide(sight, events)
        twist = np.zeros(6, dtype=np.float32)
        gripper = None
        if active:
            twist[:3], gripper = self._act(sight)
        return TeleopReading(twist, gripper, (), frozenset(events), active, self.now())

    @staticmethod
    def now() -> float:
        return time.time()

    def _new_episode_check(self, sight: Sight) -> None:
        episode = sight.episode
        if episode != self._episode:
            if self._episode is not None:
                self.prob *= self.decay
            self._episode = episode
            self._best, self._stale, self._driving_left, self._pause_left = -math.inf, 0, 0, 0

    def _marks_success(self, sight: Sight) -> bool:
        """Demo mode in a rehearsal (``env.sim_state: hidden``): the operator's eyes see the task done and mark it,
        as a person presses the success key; no sensor of a real cell would tell."""
        return self.mode == "demo" and self.view.rehearsal and sight.sees_success

    def _decide(self, sight: Sight, events: set[TeleopEvent]) -> bool:
        """Intervene mode: track progress; take over / give back. Returns whether it drives now."""
        progress = float(self.expert.progress(sight))
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

    def _act(self, sight: Sight) -> tuple[np.ndarray, float]:
        """The hand's linear command and the gripper: the expert's aim, with a person's pauses and noise."""
        aim = self.expert.aim(sight)
        twist = aim_twist(aim, sight, self.view.action_scale_m)
        if self._pause_left > 0 or (self.hesitation > 0 and self._rng.uniform() < self.hesitation):
            self._pause_left = (self._pause_left or self.pause_steps) - 1
            return np.zeros(3, np.float32), aim.gripper
        if self.noise > 0:
            twist += self._rng.normal(0.0, self.noise, size=3).astype(np.float32)
        return np.clip(twist, -1.0, 1.0), aim.gripper
