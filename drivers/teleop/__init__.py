"""Teleop devices behind rlhw.robot.teleop.TeleopDevice: SpaceMouse, terminal keyboard, scripted expert.

``make_teleop(config, env)`` builds the device that ``env.teleop`` names (None for ``device: none``).
``register_expert(task_name, fn)`` adds a scripted expert for a task (see drivers/teleop/scripted.py).
The SpaceMouse module imports pyspacemouse only when a SpaceMouse is opened.
"""

from __future__ import annotations

from drivers.teleop.insert_expert import insert_expert_action
from drivers.teleop.scripted import ScriptedExpert, expert_for, register_expert
from rlhw.robot.teleop import TeleopDevice

register_expert("insert", insert_expert_action)


def make_teleop(config, env=None) -> TeleopDevice | None:
    """The device of ``config`` (an ``env.teleop`` TeleopConfig); ``env`` is needed by the scripted expert."""
    if config.device == "none":
        return None
    if config.device == "spacemouse":
        from drivers.teleop.spacemouse import SpaceMouse

        return SpaceMouse(config.spacemouse_name, deadband=config.deadband, gain=config.gain)
    if config.device == "keyboard":
        from drivers.teleop.keyboard import TerminalKeyboard

        return TerminalKeyboard(hold_s=config.keyboard_hold_s, gain=config.gain)
    return ScriptedExpert(
        env, mode=config.mode, noise=config.noise, hesitation=config.hesitation, pause_steps=config.pause_steps,
        patience=config.patience, intervene_prob=config.intervene_prob, intervene_decay=config.intervene_decay,
        takeover_steps=config.takeover_steps,
        seed=config.seed + int(getattr(env, "seed", 0) or 0),  # instances of a batched env differ
    )


__all__ = ["ScriptedExpert", "make_teleop", "register_expert", "expert_for"]
