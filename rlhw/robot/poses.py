"""Poses recorded on the robot (`rlhw record-pose`): the goal of a pose-goal task such as ``insert``.

A real task's target is where the operator put the hand, not a number typed into a config: the
operator brings the arm there (hand-guiding, or teleop) and `rlhw record-pose` writes one JSON file,

    {"format": "rlhw-pose/1", "name": "goal_pose", "robot": "franka@172.16.0.2",
     "time": 1795000000.0, "time_iso": "2026-11-24T08:00:00+00:00",
     "ee_pose": [x, y, z, qx, qy, qz, qw], "q": [7 joint angles], "gripper_width": 0.02,
     "frame": "base"}

(metres, radians, quaternion x-y-z-w, the arm's base frame: the frame `ArmState.pose` is in). The file
keeps the 7-vector; in memory the hand pose is a `Pose` (rlhw/robot/pose.py), converted here, at the edge.
A config names the file (e.g. ``env.task_options.goal_pose``); `load_pose` checks it once, at the
edge, and a missing or garbled file is a ConfigError that names the option and the command to fix it.
"""

from __future__ import annotations

import datetime
import json
import os
from dataclasses import dataclass

import numpy as np

from rlhw.errors import ConfigError
from rlhw.robot.arm import ArmState
from rlhw.robot.pose import Pose

FORMAT = "rlhw-pose/1"


@dataclass(frozen=True)
class RecordedPose:
    name: str
    robot: str
    time: float
    pose: Pose  # the hand's, in the base frame
    q: np.ndarray
    gripper_width: float

    @classmethod
    def from_state(cls, name: str, robot: str, state: ArmState) -> RecordedPose:
        return cls(
            name, robot, float(state.timestamp), state.pose, np.array(state.q, dtype=float), float(state.gripper_width)
        )

    def to_json(self) -> dict:
        stamp = datetime.datetime.fromtimestamp(self.time, datetime.timezone.utc).isoformat(timespec="seconds")
        return {
            "format": FORMAT,
            "name": self.name,
            "robot": self.robot,
            "time": self.time,
            "time_iso": stamp,
            "ee_pose": self.pose.vector.tolist(),
            "q": self.q.tolist(),
            "gripper_width": self.gripper_width,
            "frame": "base",
        }


def save_pose(path: str, pose: RecordedPose) -> None:
    """Write ``pose`` to ``path`` atomically (a reader never sees half a file); makes the folder."""
    folder = os.path.dirname(os.path.abspath(path))
    os.makedirs(folder, exist_ok=True)
    tmp = f"{path}.{os.getpid()}.tmp"
    with open(tmp, "w") as f:
        json.dump(pose.to_json(), f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


def load_pose(path: str, option: str, config_hint: str = "CONFIG") -> RecordedPose:
    """Read and check a pose file. ``option`` is the config field that names it (for the error)."""
    name = option.rsplit(".", 1)[-1]
    fix = f"record it with `rlhw record-pose {config_hint} {name}` (see docs/real_tasks.md)"
    try:
        with open(path) as f:
            data = json.load(f)
    except FileNotFoundError:
        raise ConfigError(option, f"pose file {path!r} does not exist; {fix}") from None
    except (OSError, ValueError) as e:
        raise ConfigError(option, f"pose file {path!r} is unreadable ({type(e).__name__}: {e}); {fix}") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ConfigError(option, f"{path!r} is not an rlhw pose file (format {FORMAT!r}); {fix}")
    try:
        ee = np.array(data["ee_pose"], dtype=float)
        q = np.array(data["q"], dtype=float)
        name, robot, time, width = (
            str(data["name"]),
            str(data["robot"]),
            float(data["time"]),
            float(data["gripper_width"]),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(option, f"pose file {path!r} is garbled ({type(e).__name__}: {e}); {fix}") from None
    norm = float(np.linalg.norm(ee[3:])) if ee.shape == (7,) else 0.0
    if ee.shape != (7,) or q.shape != (7,) or not np.all(np.isfinite(ee)) or abs(norm - 1.0) > 1e-3:
        raise ConfigError(
            option,
            f"pose file {path!r} is garbled: ee_pose needs 7 finite numbers with a unit "
            f"quaternion and q 7 angles; {fix}",
        )
    return RecordedPose(name, robot, time, Pose.from_vector(ee), q, width)
