"""How a `RobotEnv` starts an episode: out of the task's way, home, a random offset, fingers open, the task's scene.

One attempt (`ResetProcedure.run`), in order:

1. a simulator that can restores its initial state (``ArmCapability.RESTORE_INITIAL_STATE``), so that
   ``reset(seed=s)`` does not depend on what the previous episode left;
2. the task's ``retreat_path`` (insert: up out of the hole), slow straight moves through the safety layer;
3. the homing joint move (``env.reset``), skipped when the arm is already within ``at_home_tolerance_rad``;
4. a random hand offset within ``randomize_radius_m`` (seeded by the env's generator);
5. the fingers opened when the action moves them or the task asks (`Task.opens_gripper_at_reset`);
6. ``task.reset`` (goal, scene), its ``contact_zone`` to the safety layer, its ``approach_path``;
7. the first observation.

A `RobotFault` on the way propagates: the env handles it and tries again (rlhw/robot/env.py). Nothing here
moves faster than the safety layer's slow moves (``env.reset.speed_factor``, ``Task.path_speed_mps``).
"""

from __future__ import annotations

import numpy as np

from rlhw.config.env import EnvConfig
from rlhw.robot.arm import Arm, ArmCapability, ArmState
from rlhw.robot.clock import Clock
from rlhw.robot.observation import Observer
from rlhw.robot.pose import Pose
from rlhw.robot.safety import SafetyLayer
from rlhw.robot.task import Task

#: Fingers this close (m) to fully open count as open: a task that opens them at reset skips the move.
GRIPPER_OPEN_M = 0.002


class ResetProcedure:
    """One reset attempt of an env's arm and task; ``clock`` and ``realtime`` are the env's (it sets them)."""

    def __init__(
        self,
        task: Task,
        arm: Arm,
        safety: SafetyLayer,
        observer: Observer,
        config: EnvConfig,
        clock: Clock,
        realtime: bool,
    ):
        self.task, self.arm, self.safety, self.observer, self.config = task, arm, safety, observer, config
        self.clock, self.realtime = clock, realtime

    def run(self, rng: np.random.Generator) -> dict[str, float]:
        """One attempt; returns its phase timings (``move_home``, ``observe``, seconds)."""
        rc = self.config.reset
        t0 = self.clock.now()
        home = np.array(rc.home_q)
        # Unchecked read: a joint parked at its limit must not block the move that takes it away.
        state = self.arm.state()
        if self.arm.has(ArmCapability.RESTORE_INITIAL_STATE) and not self.realtime and not state.errors:
            # Bit for bit from the initial state (skipping the move when near home, or a move that stops within
            # 5 mrad, left seeded resets millimetres apart). A latched fault is still handled below, as on a real arm.
            self.arm.restore_initial_state()
            state = self.arm.state()
        self.safety.set_contact_zone(*(self.task.contact_zone or (None,)))  # slow out of it too
        state = self.follow(self.task.retreat_path(state), state)
        if state.errors or np.max(np.abs(state.q - home)) > rc.at_home_tolerance_rad:
            self.safety.move_home(home, rc.speed_factor, rc.timeout_s)
            state = self.observer.read_state()
        else:
            self.safety.check_state(state)
        if rc.randomize_radius_m > 0:
            state = self._randomize(state, rng)
        state = self._open_gripper(state)
        self.safety.sync_gripper(state)
        t1 = self.clock.now()
        self.task.reset(state, rng)
        self.safety.set_contact_zone(*(self.task.contact_zone or (None,)))
        state = self.follow(self.task.approach_path(state), state)
        self.observer.observe(state, self.observer.read_frames())
        return {"move_home": t1 - t0, "observe": self.clock.now() - t1}

    def follow(self, path: list[Pose], state: ArmState) -> ArmState:
        """A task's reset path: slow straight moves through the safety layer (checked reads)."""
        for pose in path:
            state = self.safety.approach(
                pose,
                state,
                self.observer.read_state,
                self.wait,
                self.task.path_speed_mps,
                timeout_s=self.config.reset.timeout_s,
            )
        return state

    def _randomize(self, state: ArmState, rng: np.random.Generator) -> ArmState:
        """The hand to a point drawn uniformly in a ball of ``randomize_radius_m`` (within the workspace)."""
        rc = self.config.reset
        direction = rng.normal(size=3)
        offset = direction / max(np.linalg.norm(direction), 1e-9) * rc.randomize_radius_m * rng.uniform() ** (1 / 3)
        target = np.clip(state.ee_position + offset, self.safety.low, self.safety.high)
        self.arm.command_pose(state.pose.with_position(target))
        self.wait(rc.settle_s)
        return self.observer.read_state()

    def _open_gripper(self, state: ArmState) -> ArmState:
        """Open the fingers when the action moves them, or the task wants them open and they are not."""
        arm = self.arm
        if self.config.action.gripper or (
            self.task.opens_gripper_at_reset and state.gripper_width < arm.max_gripper_width - GRIPPER_OPEN_M
        ):
            arm.open_gripper()
            self.wait(min(self.config.reset.settle_s, arm.max_gripper_width / self.config.safety.gripper_max_speed_mps))
            return self.observer.read_state()
        return state

    def wait(self, seconds: float) -> None:
        """Let ``seconds`` pass: on the clock for a real-time arm, in the simulator otherwise."""
        if self.realtime:
            self.clock.sleep(seconds)
        else:
            self.arm.advance(seconds)
