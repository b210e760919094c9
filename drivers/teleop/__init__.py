"""Teleop devices behind rlhw.robot.teleop.TeleopDevice: SpaceMouse, terminal keyboard, scripted expert.

Each device registers under its ``env.teleop.device`` name (``@register_teleop``, rlhw/robot/registry.py)
and is built by its ``from_config``; `rlhw.robot.takeover.Takeover.from_config` looks it up by name.
``register_expert(task_name, fn)`` adds a scripted expert for a task (see drivers/teleop/scripted.py).
The SpaceMouse module imports pyspacemouse only when a SpaceMouse is opened.
"""

from __future__ import annotations

from drivers.teleop.insert_expert import insert_expert_action
from drivers.teleop.scripted import ScriptedExpert, expert_for, register_expert

register_expert("insert", insert_expert_action)


__all__ = ["ScriptedExpert", "register_expert", "expert_for"]
