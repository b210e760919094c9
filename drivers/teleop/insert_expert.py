"""A scripted expert for the ``insert`` task: demos in sim, and a baseline for the learned policy.

`insert_expert_action(env)` reads PRIVILEGED state from the env object, the task's recorded goal
(``env.task.goal``) and the arm's last measured state (``env.measured_state``), never the policy's
observations, so a change of observation layout cannot break it. It does what an operator does:
line the peg up over the hole at a safe height (the peg's tip above the hole's top), then go down
the hole's axis, correcting x and y on the way. The safety layer still bounds every step (slow
inside the contact zone), as for any policy.

`drivers.teleop.ScriptedExpert` wraps it (registered for ``insert`` in drivers/teleop/__init__.py), so
`rlhw record-demos --teleop scripted` records insert demos.
"""

from __future__ import annotations

import numpy as np

#: Lined up when the peg's axis is this close to the hole's (m): under half the 2 mm side clearance.
ALIGNED_M = 0.001
#: Height of the peg's tip above the hole's top while lining up (m).
CLEARANCE_M = 0.008


def insert_expert_action(env) -> np.ndarray:
    """The next action (float32 in [-1, 1], shape of ``env.spec.action``) for a `RobotEnv` running insert."""
    task = env.task
    goal = task.goal.position
    hand = np.asarray(env.measured_state.ee_position, dtype=float)
    target = goal.copy()
    if np.linalg.norm(goal[:2] - hand[:2]) > ALIGNED_M:
        # not over the hole: stay (or rise) to where the peg's tip clears the hole's top
        target[2] = max(hand[2], goal[2] + task.depth + CLEARANCE_M)
    action = np.clip((target - hand) / env.config.action.scale_m, -1.0, 1.0)
    return action.astype(np.float32).reshape(env.spec.action.shape)
