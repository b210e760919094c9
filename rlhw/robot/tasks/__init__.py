"""Tasks by name. ``make_task(name, config)`` imports the task's module on first use.

Add a task: write ``rlhw/robot/tasks/<name>.py`` with ``@register_task("<name>")`` on a `Task`
subclass, and add the name to ``TASK_MODULES`` (or import the module yourself before make_task).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import TypeVar

from rlhw.config.env import EnvConfig
from rlhw.errors import ConfigError
from rlhw.robot.tasks.base import Command, Task

T = TypeVar("T", bound=type)

TASK_MODULES: dict[str, str] = {
    "reach": "rlhw.robot.tasks.reach",
    "push_cube": "rlhw.robot.tasks.push_cube",
    "insert": "rlhw.robot.tasks.insert",
}
_TASKS: dict[str, type] = {}


def register_task(name: str) -> Callable[[T], T]:
    def deco(cls: T) -> T:
        cls.name = name
        _TASKS[name] = cls
        return cls

    return deco


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


__all__ = ["Command", "Task", "register_task", "make_task", "known_tasks", "task_class", "TASK_MODULES"]
