"""The task plugins: one module per task, each registering its `Task` subclass (``@register_task``) and its
scripted expert (``@register_expert``) with `rlhw.robot.task_registry`, which imports them by name on first use.

The dependency points one way: a task builds on the robot core (`rlhw.robot.task.Task`, the arm, the camera,
the teleop types); nothing in the core imports this package.
"""
