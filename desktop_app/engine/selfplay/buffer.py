"""Task buffers of self-play: per task type, deduplicated, sampled as references, saved with checkpoints."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

from desktop_app.engine.tasks.base import Task
from desktop_app.engine.tasks.heldout_protocol import program_key, program_shape


class TaskBuffer:
    """Valid tasks of one type in the order they were found; sampling uses the caller's RNG (resumable)."""

    def __init__(self, capacity: int = 4096):
        self.capacity = capacity
        self.tasks: list[Task] = []
        self._keys: set[tuple[str, tuple[str, ...]]] = set()
        self._programs: Counter[str] = Counter()  # tasks per program (by key), and per shape (equal up to constants)
        self._shapes: Counter[str] = Counter()
        self.history: list[dict[str, Any]] = []  # newest last: proposals with verdicts (the UI browser)

    def __len__(self) -> int:
        return len(self.tasks)

    @property
    def distinct_programs(self) -> int:
        return len(self._programs)

    @property
    def distinct_shapes(self) -> int:
        return len(self._shapes)

    def holds_program(self, program: str) -> bool:
        """Is a task of this program (however it is spelled) in the buffer?"""
        return program_key(program) in self._programs

    def shape_count(self, program: str) -> int:
        """How many of the buffer's tasks have this program's shape (programs equal up to constants)."""
        return self._shapes.get(program_shape(program), 0)

    def add(self, task: Task) -> bool:
        key = (task.program, task.inputs)
        if key in self._keys:
            return False
        self._keys.add(key)
        self.tasks.append(task)
        self._count(task, 1)
        if len(self.tasks) > self.capacity:  # the oldest go first; seeds stay useful as references anyway
            old = self.tasks.pop(0)
            self._keys.discard((old.program, old.inputs))
            self._count(old, -1)
        return True

    def _count(self, task: Task, change: int) -> None:
        for counter, key in ((self._programs, program_key(task.program)), (self._shapes, program_shape(task.program))):
            counter[key] += change
            if counter[key] <= 0:
                del counter[key]

    def sample(self, k: int, rng: random.Random) -> list[Task]:
        if not self.tasks:
            return []
        return [self.tasks[rng.randrange(len(self.tasks))] for _ in range(k)]

    def record(self, entry: dict[str, Any], keep: int = 200) -> None:
        self.history.append(entry)
        del self.history[:-keep]

    def state_dict(self) -> dict[str, Any]:
        return {"capacity": self.capacity, "tasks": [t.to_json() for t in self.tasks], "history": self.history}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.capacity = int(state.get("capacity", self.capacity))
        self.tasks, self._keys = [], set()
        self._programs.clear()
        self._shapes.clear()
        for data in state.get("tasks", []):
            task = Task.from_json(data)
            self.tasks.append(task)
            self._keys.add((task.program, task.inputs))
            self._count(task, 1)
        self.history = list(state.get("history", []))
