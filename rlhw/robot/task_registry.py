"""Tasks by name. ``make_task(name, config)`` imports the task's module on first use.

Add a task: write ``rlhw/robot/tasks/<name>.py`` with ``@register_task("<name>")`` on a `Task`
subclass, and add the name to ``TASK_MODULES`` (or import the module yourself before make_task). The task
plugins build on the robot core and register here; the core (env, factory, operator view) asks this registry
by name and never imports ``rlhw.robot.tasks``, so the dependency points one way.

A task's scripted expert (the program that stands in for a person in simulation, ``env.teleop.device:
scripted``) is written beside it, in the task's module, as ``@register_expert("<name>")`` on ``fn(task) ->
Expert``: it reads the task's settings once (a hole's depth, a reward scale) and then only what an operator
sees (`rlhw.robot.teleop.Sight`). ``expert_for(task)`` builds it.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TypeVar

from rlhw.config.env import EnvConfig
from rlhw.errors import ConfigError
from rlhw.robot.task import Task
from rlhw.robot.teleop import Expert

T = TypeVar("T", bound=type)
ExpertFactory = Callable[[Task], Expert]

TASK_MODULES: dict[str, str] = {
    "reach": "rlhw.robot.tasks.reach",
    "push_cube": "rlhw.robot.tasks.push_cube",
    "insert": "rlhw.robot.tasks.insert",
}
_TASKS: dict[str, type] = {}
_EXPERTS: dict[str, ExpertFactory] = {}


def register_task(name: str) -> Callable[[T], T]:
    def deco(cls: T) -> T:
        cls.name = name
        _TASKS[name] = cls
        return cls

    return deco


def register_expert(name: str) -> Callable[[ExpertFactory], ExpertFactory]:
    """Decorator on ``fn(task) -> Expert``: the scripted stand-in for a person at task ``name`` (last one wins)."""

    def deco(fn: ExpertFactory) -> ExpertFactory:
        _EXPERTS[name] = fn
        return fn

    return deco


def expert_for(task: Task) -> Expert:
    """The scripted expert of ``task``; a ConfigError naming ``env.teleop.device`` when the task has none."""
    if task.name not in _EXPERTS:
        raise ConfigError(
            "env.teleop.device",
            f"no scripted expert for task {task.name!r} (experts: {', '.join(sorted(_EXPERTS))}); write one "
            "beside the task with @register_expert, or choose another teleop device",
        )
    return _EXPERTS[task.name](task)


def known_tasks() -> list[str]:
    return sorted(set(TASK_MODULES) | set(_TASKS))


def task_class(name: str) -> type:
    if name not in _TASKS and name in TASK_MODULES:
        try:
            importlib.import_module(TASK_MODULES[name])
        except ModuleNotFoundError as e:
            if e.name != TASK_MODULES[name]:
                raise
            raise ConfigError(
                "env.task", f"task {name!r} is not available in this installation ({e.name} missing)"
            ) from e
    if name not in _TASKS:
        raise ConfigError("env.task", f"unknown task {name!r}; known tasks: {', '.join(known_tasks())}")
    return _TASKS[name]


def make_task(name: str, config: EnvConfig, options=None) -> Task:
    return task_class(name)(config, options)


__all__ = [
    "register_task",
    "make_task",
    "known_tasks",
    "task_class",
    "TASK_MODULES",
    "register_expert",
    "expert_for",
]
