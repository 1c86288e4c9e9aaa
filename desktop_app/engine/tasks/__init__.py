"""Task worlds for self-play: tasks that an executor can verify (see `base.TaskWorld`)."""

from desktop_app.engine.tasks.base import TASK_TYPES, Check, Task, TaskWorld, Validation, get_world

__all__ = ["TASK_TYPES", "Check", "Task", "TaskWorld", "Validation", "get_world"]
