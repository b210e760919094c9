"""What a `RobotEnv` observes: its spec, and the last observation with its measured state and capture times.

An observation is the task's (proprio, `Task.observe`) plus, with ``env.images``, each camera's colour image
fitted to ``env.image_size`` under ``image_<camera>``. Every read of the arm goes through the safety layer's
state check, and a camera frame older than ``env.safety.camera_max_age_s`` is a fault (the driver raises).
The last observation is kept: a fault step reports it again, its capture times saying how old it is.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from rlhw.config.env import EnvConfig
from rlhw.robot.arm import Arm, ArmState
from rlhw.robot.camera import Camera, Frame
from rlhw.robot.clock import Clock
from rlhw.robot.images import fit_image
from rlhw.robot.safety import SafetyLayer
from rlhw.robot.spec import EnvSpec, TensorSpec
from rlhw.robot.task import Task

IMAGE_PREFIX = "image_"


def image_key(camera: str) -> str:
    """Observation name of a camera's color image."""
    return IMAGE_PREFIX + camera


def env_spec(task: Task, arm: Arm, cameras: Mapping[str, Camera], config: EnvConfig, robot: str) -> EnvSpec:
    """The spec of one env (``num_envs`` 1): the task's observations, one image per camera with ``env.images``."""
    obs_specs = dict(task.observation_specs())
    if config.images:
        h, w = config.image_size
        for cam in cameras:
            obs_specs[image_key(cam)] = TensorSpec(image_key(cam), "uint8", (h, w, 3), 0, 255)
    return EnvSpec(
        observations=obs_specs,
        action=task.action_spec(),
        control_hz=config.control_hz,
        num_envs=1,
        robot=robot or arm.name,
        cameras=tuple(cameras),
        description=f"{task.name} on {type(arm).__name__}" + (" (simulated time)" if not arm.realtime else ""),
    )


class Observer:
    """Reads the arm (checked) and the cameras and keeps the last observation.

    ``state``: the last measured arm state; ``obs``: the last observation; ``stamps``: each observation's capture
    time (wall clock); ``frame_index``: each camera's frame index; ``observed_at``: the env clock's time of it."""

    def __init__(
        self,
        task: Task,
        arm: Arm,
        cameras: Mapping[str, Camera],
        safety: SafetyLayer,
        config: EnvConfig,
        clock: Clock,
    ):
        self.task, self.arm, self.cameras, self.safety, self.config = task, arm, cameras, safety, config
        self.clock = clock  # the env's (RobotEnv.clock sets it)
        self.state: ArmState | None = None
        self.obs: dict[str, np.ndarray] | None = None
        self.stamps: dict[str, float] = {}
        self.frame_index: dict[str, int] = {}
        self.observed_at = 0.0

    def read_state(self) -> ArmState:
        """The arm's state, checked by the safety layer (a `RobotFault` when out of its bounds)."""
        state = self.arm.state()
        self.safety.check_state(state)
        return state

    def read_frames(self) -> dict[str, Frame]:
        if not self.config.images:
            return {}
        max_age = self.config.safety.camera_max_age_s
        frames = {name: cam.latest(max_age_s=max_age) for name, cam in self.cameras.items()}
        # Index gaps between observations are normal (a 30 fps camera under a 10 Hz policy); the
        # driver, which sees every frame, is the one that can count real drops.
        self.frame_index = {name: frame.index for name, frame in frames.items()}
        return frames

    def observe(self, state: ArmState, frames: Mapping[str, Frame]) -> None:
        """Make ``state`` and ``frames`` the last observation."""
        obs = self.task.observe(state, frames)
        stamps = dict.fromkeys(obs, state.timestamp)
        h, w = self.config.image_size
        for name, frame in frames.items():
            key = image_key(name)
            obs[key] = fit_image(frame.color, h, w)
            stamps[key] = frame.timestamp
        self.state, self.obs, self.stamps = state, obs, stamps
        self.observed_at = self.clock.now()

    def take(self) -> ArmState:
        """Read the arm and the cameras and observe them; returns the measured state."""
        state = self.read_state()
        self.observe(state, self.read_frames())
        return state

    def copy(self) -> dict[str, np.ndarray]:
        """The last observation, copied (a task may hand out views of one buffer)."""
        return {k: v.copy() for k, v in self.obs.items()}
