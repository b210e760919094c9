"""Teleop devices behind rlhw.robot.teleop.TeleopDevice: SpaceMouse, terminal keyboard, scripted expert.

Each device registers under its ``env.teleop.device`` name (``@register_teleop``, rlhw/robot/registry.py)
and is built by its ``from_config`` from ``env.teleop`` and an `OperatorView` (what a person at the cell may
see and do); `rlhw.robot.takeover.Takeover.from_config` looks it up by name. A task's scripted expert is written
beside the task (``@register_expert``, rlhw/robot/tasks). The SpaceMouse module imports pyspacemouse only when a
SpaceMouse is opened.
"""

from __future__ import annotations

from drivers.teleop.scripted import ScriptedExpert, expert_action

__all__ = ["ScriptedExpert", "expert_action"]
