"""The held-out protocol, in one place: which programs measure a model, and so which no run may train on.

Two kinds of held-out sets per task world, both fixed by seeds:
  reported   the figures a comparison shows (the `eval` verb's set, seed 9002, the world's default size);
  selection  the set a run picks its best checkpoint and stops early by (self-play's `heldout_seed`, 9001).
The selection set is drawn with the reported set's programs left out, so choosing a checkpoint never looks at a
reported program. Both sets' programs, of every task type at once (a deduction program practised as an induction
task is practised all the same), are *reserved*: the seed corpus, the seed tasks, the tasks the proposer adds to
the buffer, the controls' data and `tasks` files leave them out, and `eval` counts any that a run's records hold.

Programs are compared by `program_key` (the text as Python's parser prints it: spacing and comments do not make
a held-out program new). `program_shape` further blanks out constants: programs equal up to constants share it.
"""

from __future__ import annotations

import ast
import functools
import re
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from desktop_app.engine.tasks.base import Task, TaskWorld

REPORTED_SEED = 9002  # the `eval` verb's default set: the figures docs/selfplay.md and the demo report
SELECTION_SEED = 9001  # self-play's default `heldout_seed`: its best checkpoint and early stopping


@functools.lru_cache(maxsize=65_536)
def _tree(program: str) -> ast.AST | None:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SyntaxWarning)
            return ast.parse(program)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def program_key(program: str) -> str:
    """The program as Python's parser prints it (its text, stripped, when it does not parse)."""
    tree = _tree(program)
    return ast.unparse(tree) if tree is not None else program.strip()


class _Blank(ast.NodeTransformer):
    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        if isinstance(node.value, bool) or node.value is None:
            return node
        if isinstance(node.value, (int, float, complex)):
            return ast.copy_location(ast.Name("N"), node)
        if isinstance(node.value, str):
            return ast.copy_location(ast.Name("S"), node)
        return node


@functools.lru_cache(maxsize=65_536)
def program_shape(program: str) -> str:
    """The program with its numbers blanked to N and its strings to S: equal shapes differ only in constants."""
    tree = _tree(program)
    if tree is None:
        return program.strip()
    return ast.unparse(_Blank().visit(ast.parse(ast.unparse(tree))))


def heldout_tasks(world: TaskWorld, task_type: str, count: int, seed: int, exclude: Iterable[str] = ()) -> list[Task]:
    """The first `count` tasks of a type's held-out stream for `seed` (the world's own stream when it has one, else
    its generator), none with a program in `exclude`."""
    maker = getattr(world, "heldout_set", None)
    if callable(maker):
        return maker(task_type, count, seed, exclude=exclude)
    return world.generate(task_type, count, seed, exclude=exclude)


@dataclass(frozen=True, eq=False)
class HeldoutProtocol:
    """The reported sets (`reported_seeds`, `reported_size` tasks per type: 0 = the world's default) and the
    selection set (`selection_seed`, `selection_size` per type: 0 = none) of one world, over all its task types."""

    world: TaskWorld
    reported_seeds: tuple[int, ...] = (REPORTED_SEED,)
    selection_seed: int = SELECTION_SEED
    reported_size: int = 0
    selection_size: int = 0

    @classmethod
    def of_run(cls, world: TaskWorld, options: Any) -> HeldoutProtocol:
        """The protocol of a self-play run's options: its `heldout_seed` set (`heldout_per_type` tasks) selects,
        the `eval` verb's set and every `exclude_heldout` seed are reported."""
        seeds = tuple(dict.fromkeys((REPORTED_SEED, *(int(s) for s in options.exclude_heldout))))
        return cls(world, seeds, int(options.heldout_seed), 0, int(options.heldout_per_type))

    @property
    def reported_count(self) -> int:
        return max(int(self.reported_size), int(self.world.heldout_size))

    def reported(self, task_type: str, count: int = 0, seed: int = REPORTED_SEED) -> list[Task]:
        """A reported set: the first `count` tasks (default: the protocol's size) of its seed's stream."""
        return heldout_tasks(self.world, task_type, int(count) or self.reported_count, int(seed))

    @functools.cached_property
    def reported_programs(self) -> frozenset[str]:
        """The programs of every reported set, of every type."""
        return frozenset(t.program for seed in self.reported_seeds if seed != self.selection_seed
                         for task_type in self.world.types for t in self.reported(task_type, seed=seed))

    @functools.cached_property
    def selection_sets(self) -> dict[str, list[Task]]:
        """The selection set of every type: its seed's stream with every reported program left out."""
        return {task_type: heldout_tasks(self.world, task_type, int(self.selection_size), self.selection_seed,
                                         exclude=self.reported_programs) if self.selection_size else []
                for task_type in self.world.types}

    @functools.cached_property
    def reserved(self) -> frozenset[str]:
        """Every program of the reported and selection sets, of every type: what no training stream holds."""
        return self.reported_programs | {t.program for tasks in self.selection_sets.values() for t in tasks}

    @functools.cached_property
    def reserved_keys(self) -> frozenset[str]:
        return frozenset(program_key(p) for p in self.reserved)

    def holds(self, program: str) -> bool:
        """Is this program (in any spelling the parser reads alike) a reserved one?"""
        return program in self.reserved or program_key(program) in self.reserved_keys

    def count_in(self, programs: Iterable[str]) -> int:
        """How many distinct reserved programs occur among `programs`."""
        return len({program_key(p) for p in programs} & self.reserved_keys)


FENCED = re.compile(r"```[A-Za-z]*[ \t]*\n(.*?)```", re.S)


def programs_in_text(text: str) -> set[str]:
    """The keys of the programs a text shows (a corpus, a chat file, a task file): code blocks, and any line's
    `lambda ...` from its first `lambda` on (a mini program, however the line goes on before it)."""
    found = {program_key(block) for block in FENCED.findall(text)}
    for line in text.splitlines():
        at = line.find("lambda ")
        if at >= 0:
            found.add(program_key("f = " + line[at:].strip()))
    return found
