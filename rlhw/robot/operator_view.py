"""`EnvOperatorView`: a `RobotEnv`'s `OperatorView`, what the operator at its cell may see and do.

The env builds one and hands it to its teleop device (rlhw/robot/takeover.py); the device never gets the env,
its task or its arm. A person's device ignores it. The scripted expert, a program standing in for the person in
simulation, reads a `Sight` per step: the measured hand, the task's goal as an operator knows it
(`Task.operator_goal`), the scene's objects a person sees (`Task.operator_objects`, read from the simulator:
the unrestricted arm even in a rehearsal, as a person's eyes are not the cell's sensors) and whether the operator
sees the task done (`Task.operator_sees_success`). None of it reaches an observation, a reward or the replay.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from rlhw.config.env import EnvConfig
from rlhw.robot.arm import Arm, ArmState
from rlhw.robot.task import Task
from rlhw.robot.task_registry import expert_for
from rlhw.robot.teleop import Expert, Sight

#: The env's episode now: (episodes so far, steps in this one, the last measured state), or None between episodes.
Moment = Callable[[], tuple[int, int, ArmState] | None]


class EnvOperatorView:
    """The `OperatorView` (rlhw/robot/teleop.py) of one env: ``moment`` says where its episode is."""

    def __init__(
        self, task: Task, sim: Arm, config: EnvConfig, seed: int, action_shape: tuple[int, ...], moment: Moment
    ):
        self._task, self._sim, self._moment = task, sim, moment
        self.seed = int(seed)
        self.rehearsal = config.sim_state == "hidden"
        self.action_scale_m = float(config.action.scale_m)
        self.action_shape = tuple(action_shape)

    def look(self) -> Sight | None:
        moment = self._moment()
        if moment is None:
            return None
        episode, step, state = moment
        task = self._task
        return Sight(
            episode=episode,
            step=step,
            hand=np.asarray(state.ee_position, dtype=float),
            goal=np.asarray(task.operator_goal(), dtype=float),
            objects={name: np.array(self._sim.object_pose(name).position) for name in task.operator_objects},
            sees_success=bool(task.operator_sees_success(self._sim, state)),
            sees_failure=bool(task.operator_sees_failure(self._sim, state)),
        )

    def expert(self) -> Expert:
        return expert_for(self._task)
