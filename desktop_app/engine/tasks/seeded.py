"""Seeded task generation, shared by the worlds: the same tasks for the same world, type and seed, and the held-out
sets on random streams of their own (so never the training stream's tasks for the same seed)."""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass

from desktop_app.engine.tasks.base import Task, TaskWorld, check_type


@dataclass
class SeededWorld(TaskWorld):
    """A world that drafts tasks from a random stream (`_generate`); the streams are named after the world."""

    def generate(self, task_type: str, count: int, seed: int, exclude: Iterable[str] = ()) -> list[Task]:
        check_type(self, task_type)
        return self._generate(task_type, count, random.Random(f"{self.name}-{task_type}-{seed}"), set(exclude))

    def heldout_set(self, task_type: str, count: int, seed: int, exclude: Iterable[str] = ()) -> list[Task]:
        """Fixed evaluation tasks: their own random stream (so never the training stream's for the same seed), and
        no program in `exclude` (pass the programs of the seed corpus, or of the training stream, to keep the two
        apart)."""
        check_type(self, task_type)
        return self._generate(task_type, count, random.Random(f"{self.name}-heldout-{task_type}-{seed}"),
                              set(exclude))

    def _generate(self, task_type: str, count: int, rng: random.Random, exclude: set[str]) -> list[Task]:
        """`count` tasks of one type drafted from `rng`, none with a program in `exclude`."""
        raise NotImplementedError
