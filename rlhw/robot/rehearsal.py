"""Rehearsal mode (``env.sim_state: hidden``): a simulated cell that measures only what a real one measures.

A task that learns in sim from the simulator's object state (where the cube is) proves nothing about a
real cell, where no sensor reports it. Under ``hidden``:

- the task is bound to a `MeasuredArm`, a view of the simulated arm without its object-state READS
  (`ArmCapability.OBJECT_STATE`: ``object_pose``; ``objects``): observations, reward, success, termination and truncation can only be
  computed from the measured `ArmState` (proprio, measured wrench), camera frames, poses recorded with
  ``rlhw record-pose``, and the classifier's verdict (``env.reward``). The view keeps the scene WRITES a
  person does on a real cell between episodes: placing an object (``set_object_pose``), taping a mark
  (``set_floor_mark``, ``set_target_marker``);
- two readers keep the simulator: the scripted operator (drivers/teleop/scripted.py, a person's eyes) and
  the evaluation judge (`Task.judge`), whose verdict the env reports as ``info["judge_success"]``, apart
  from the reward and the done flags;
- `check_rehearsal` refuses, by config key, a task configured to observe or reward hidden state, and a
  task whose success no sensor measures when nobody judges it (no classifier, no operator labelling demos).
"""

from __future__ import annotations

from typing import Any

from rlhw.config.env import EnvConfig
from rlhw.errors import ConfigError
from rlhw.robot.arm import Arm, ArmCapability

#: The optional abilities a rehearsal task may use: the scene writes a person makes on a real cell.
MEASURED_CAPABILITIES = frozenset(
    {ArmCapability.PLACE_OBJECTS, ArmCapability.TARGET_MARKER, ArmCapability.FLOOR_MARK, ArmCapability.PLACE_HOLE}
)
#: What a task may use of a simulated arm in a rehearsal: the driver's facts and the methods of
#: `MEASURED_CAPABILITIES`. Everything else (``object_pose``, ``objects``, MjData) is the simulator's secret.
MEASURED_ATTRIBUTES = frozenset({"name", "realtime", "max_gripper_width"}).union(
    *(capability.methods for capability in MEASURED_CAPABILITIES)
)


class MeasuredArm:
    """The arm as a rehearsal task sees it: see `MEASURED_ATTRIBUTES`; any other attribute does not exist."""

    def __init__(self, arm: Arm):
        object.__setattr__(self, "_arm", arm)
        object.__setattr__(self, "capabilities", arm.capabilities & MEASURED_CAPABILITIES)

    def has(self, capability: ArmCapability) -> bool:
        """`Arm.has`, less what a real cell cannot do (read object state, restore the world)."""
        return capability in self.capabilities

    def __getattr__(self, name: str) -> Any:
        if name in MEASURED_ATTRIBUTES:
            return getattr(self._arm, name)
        raise AttributeError(f"{name!r} is simulator state a real cell does not measure (env.sim_state=hidden)")

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("a rehearsal task cannot change the arm's attributes")


def check_rehearsal(task, env_config: EnvConfig) -> None:
    """Refuse a rehearsal (``env.sim_state: hidden``) that would need hidden state, naming the key to change."""
    if env_config.sim_state != "hidden":
        return
    for key, why in task.hidden_state_keys():
        raise ConfigError(
            key,
            f"{why}, which a real cell does not measure, but env.sim_state=hidden; "
            "change this key or set env.sim_state=visible",
        )
    someone_judges = env_config.reward.classifier is not None or (
        env_config.teleop.device != "none" and env_config.teleop.always_active
    )
    if not task.success_measured and not someone_judges:
        raise ConfigError(
            "env.reward.classifier",
            f"task {task.name!r} succeeds when an object is in place, which no sensor of a real cell measures, and "
            "env.sim_state=hidden: train a success classifier on demos (`rlhw train-reward DEMOS --out FILE`) and set "
            "env.reward.classifier=FILE (or record demos, where the operator labels success)",
        )
