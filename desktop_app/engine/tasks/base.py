"""The task-world interface: what self-play needs from a world of verifiable tasks.

A world generates tasks (seed corpora, held-out sets), writes the prompts a model sees as proposer and
as solver, validates what a proposer wrote, and checks what a solver answered. Checking is by value:
answers are parsed with a bounded literal parser and compared by the parent, never evaluated.
Adding a world (arithmetic word problems, regex, ...) is one module with one `TaskWorld` subclass,
registered in `WORLDS`.
"""

from __future__ import annotations

import importlib
import random
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import ClassVar

from desktop_app.engine.errors import UserError
from desktop_app.engine.method_options import TASK_TYPES

# Rewards for a solver's answer, as in the Absolute Zero paper.
REWARD_CORRECT = 1.0
REWARD_WRONG = 0.0
PENALTY_FORMAT = -0.5  # an answer is there but wrongly formatted (trailing junk, several lines)
PENALTY_UNPARSEABLE = -1.0  # no answer could be read at all


@dataclass(frozen=True)
class Task:
    """One verified task. Values are literal texts (`repr` of plain Python values), never objects.

    deduction: given program + inputs[0], answer outputs[0].
    abduction: given program + outputs[0], answer any input x with f(x) == outputs[0].
    induction: given the first `shown` pairs (and message), answer a program that maps every pair.
    """

    world: str
    type: str
    program: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    message: str = ""
    shown: int = 0  # induction: how many pairs the solver sees; the rest are held out

    def to_json(self) -> dict:
        data = asdict(self)
        data["inputs"], data["outputs"] = list(self.inputs), list(self.outputs)
        return data

    @classmethod
    def from_json(cls, data: dict) -> Task:
        return cls(world=str(data["world"]), type=str(data["type"]), program=str(data["program"]),
                   inputs=tuple(str(x) for x in data["inputs"]),
                   outputs=tuple(str(x) for x in data["outputs"]),
                   message=str(data.get("message", "")), shown=int(data.get("shown", 0)))


@dataclass(frozen=True)
class Validation:
    """The verdict on a proposal: a valid task, or the reason it is not one."""

    task: Task | None
    reason: str = ""
    format_error: bool = False  # the proposal could not even be parsed (gets the format penalty)
    trivial: bool = False  # a runnable program refused as trivial (constant output, or the identity in disguise)

    @property
    def valid(self) -> bool:
        return self.task is not None

    def to_json(self) -> dict:
        """Plain values (a verdict made in one process, sent to the others of a run)."""
        return {"task": self.task.to_json() if self.task is not None else None, "reason": self.reason,
                "format_error": self.format_error, "trivial": self.trivial}

    @classmethod
    def from_json(cls, data: dict) -> Validation:
        task = Task.from_json(data["task"]) if data.get("task") is not None else None
        return cls(task, str(data.get("reason", "")), bool(data.get("format_error")), bool(data.get("trivial")))


@dataclass(frozen=True)
class Check:
    """The verdict on one answer: status is correct | wrong | format | unparseable | error."""

    status: str
    reward: float
    reason: str = ""

    @property
    def correct(self) -> bool:
        return self.status == "correct"

    def to_json(self) -> list:
        return [self.status, self.reward, self.reason]

    @classmethod
    def from_json(cls, data: list) -> Check:
        return cls(str(data[0]), float(data[1]), str(data[2]))


def correct() -> Check:
    return Check("correct", REWARD_CORRECT)


def wrong(reason: str) -> Check:
    return Check("wrong", REWARD_WRONG, reason)


def bad_format(reason: str) -> Check:
    return Check("format", PENALTY_FORMAT, reason)


def unparseable(reason: str) -> Check:
    return Check("unparseable", PENALTY_UNPARSEABLE, reason)


def first_answer_line(text: str) -> tuple[str, bool]:
    """(answer, clean): the answer is the first non-empty line; clean is False when more text follows."""
    lines = [line.strip() for line in text.strip().splitlines()]
    lines = [line for line in lines if line]
    if not lines:
        return "", True
    return lines[0], len(lines) == 1


@dataclass
class TaskWorld:
    """Base class of a task world. Subclasses implement the six methods; everything is batched."""

    name: ClassVar[str] = ""
    types: ClassVar[tuple[str, ...]] = TASK_TYPES
    heldout_size: ClassVar[int] = 100  # held-out tasks per type an evaluation takes unless told otherwise
    options: dict = field(default_factory=dict)

    def generate(self, task_type: str, count: int, seed: int, exclude: Iterable[str] = ()) -> list[Task]:
        """`count` valid random tasks of one type, the same for the same seed, none with a program in `exclude`
        (a held-out set's programs: the tasks a model trains on stay apart from those it is measured on)."""
        raise NotImplementedError

    def propose_prompt(self, task_type: str, references: list[Task], rng: random.Random) -> str:
        """The prompt that asks the model to propose a new task, showing K reference tasks."""
        raise NotImplementedError

    def validate(self, task_type: str, proposals: list[str]) -> list[Validation]:
        """Parse and validate model-written proposals (program + input(s)); run them to get outputs."""
        raise NotImplementedError

    def solve_prompt(self, task: Task) -> str:
        """The prompt that asks the model to solve a task."""
        raise NotImplementedError

    def check(self, tasks: list[Task], answers: list[str]) -> list[Check]:
        """Judge answers by value (parent-side parse, never eval)."""
        raise NotImplementedError

    def reference_answer(self, task: Task) -> str:
        """The answer text a perfect solver would write (seed corpora and tests)."""
        raise NotImplementedError

    def answer_kind(self, task_type: str) -> str:
        """What an answer of the type is (tasks/answers.py finds it in a chat reply): value | call | program."""
        return "program" if task_type == "induction" else "value"

    def close(self) -> None:
        """Release workers (sandbox processes) the world holds."""


WORLDS: dict[str, str] = {
    "mini": "desktop_app.engine.tasks.mini_world:MiniWorld",
    "python": "desktop_app.engine.tasks.python_world:PythonWorld",
}


def get_world(name: str, **options) -> TaskWorld:
    if name not in WORLDS:
        raise UserError(f"unknown task world {name!r}; choose one of: {', '.join(WORLDS)}")
    module_name, class_name = WORLDS[name].split(":")
    return getattr(importlib.import_module(module_name), class_name)(options=dict(options))


def check_type(world: TaskWorld, task_type: str) -> str:
    if task_type not in world.types:
        raise UserError(f"unknown task type {task_type!r} for world {world.name!r}; "
                        f"choose one of: {', '.join(world.types)}")
    return task_type
