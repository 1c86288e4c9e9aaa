"""The mini task world: Absolute Zero's three task types over one-line mini programs (see `mini_lang`).

Mini programs run in this process through their own interpreter (no eval, budgets on every run), so
checking costs microseconds and a tiny model trained from scratch can learn the formats within minutes.
Prompts and answers are compact, one answer per line:

    deduction   f = lambda x: x + 1        answer: 4
                f(3)=
    abduction   f = lambda x: x + 1        answer: 3   (any input giving the output is right)
                f(?)=4
                ?=
    induction   f(1)=2                     answer: lambda x: x + 1   (checked on every pair, the held-out
                f(2)=3                                                ones included)
                f(3)=4
                f=

Verdicts: the answer is the first non-empty line. Nothing readable -> unparseable (-1); readable but
followed by more lines -> format (-0.5), whether or not it is right, so junk never pays; otherwise
correct (1) or wrong (0). Answers are read with the bounded literal parser or the mini parser, never
evaluated as Python.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from desktop_app.engine.fileio import atomic_write_text
from desktop_app.engine.sandbox.literal import LiteralError, LiteralLimits, parse_literal, same_value, to_literal
from desktop_app.engine.tasks.base import (
    TASK_TYPES,
    Check,
    Task,
    Validation,
    bad_format,
    check_type,
    correct,
    first_answer_line,
    unparseable,
    wrong,
)
from desktop_app.engine.tasks.mini_lang import MiniError, check_value, parse_program, random_input, random_program
from desktop_app.engine.tasks.seeded import SeededWorld

ANSWER_LIMITS = LiteralLimits(max_chars=2_000, max_depth=8, max_items=1_000, max_int_digits=13, max_str_chars=100)
MAX_OUTPUT_CHARS = 200  # outputs of proposed tasks, as literal text
GEN_OUTPUT_CHARS = 48  # outputs of generated tasks: short, so a tiny model sees whole tasks
MAX_MESSAGE_CHARS = 200
INDUCTION_INPUTS = (4, 10)  # how many inputs a proposed induction task may have (half are shown)


@functools.lru_cache(maxsize=65_536)
def _task_value(text: str) -> Any:
    """A task's own input/output literal, parsed once. Shared objects are safe: mini never mutates values."""
    return parse_literal(text, ANSWER_LIMITS)


@dataclass
class MiniWorld(SeededWorld):
    """Options: depth (max expression depth of generated programs, default 2: a tiny model learns them within
    minutes), references (tasks shown in a propose prompt, default 3), pairs (induction pairs, default 6), shown
    (of them shown, default 3)."""

    name: ClassVar[str] = "mini"
    heldout_size: ClassVar[int] = 400  # checks cost microseconds: enough tasks that 0.05 is outside the noise
    options: dict = field(default_factory=dict)

    @property
    def depth(self) -> int:
        return int(self.options.get("depth", 2))

    # -- generation (generate and heldout_set: SeededWorld) ----------------------------------------------
    def _generate(self, task_type: str, count: int, rng: random.Random, exclude: set[str]) -> list[Task]:
        tasks: list[Task] = []
        seen = set(exclude)  # one task per program: variety matters more than volume for a tiny model
        attempts = 0
        while len(tasks) < count and attempts < 100 * count + 1_000:
            attempts += 1
            task = self._draft(task_type, rng)
            if task is not None and task.program not in seen:
                seen.add(task.program)
                tasks.append(task)
        return tasks

    def _draft(self, task_type: str, rng: random.Random) -> Task | None:
        kind = rng.choice(("int", "list", "list"))  # list inputs allow the more interesting programs
        try:
            program = parse_program(random_program(rng, kind, depth=rng.randint(1, max(1, self.depth))))
        except MiniError:
            return None
        if not program.uses_param:  # a constant function is no task
            return None
        wanted = int(self.options.get("pairs", 6)) if task_type == "induction" else 1
        inputs: dict[str, Any] = {}
        for _ in range(3 * wanted):
            value = random_input(rng, kind)
            inputs.setdefault(to_literal(value), value)
            if len(inputs) == wanted:
                break
        if len(inputs) < wanted:
            return None
        outputs = []
        for value in inputs.values():
            try:
                text = to_literal(program.run(value), ANSWER_LIMITS)
            except (MiniError, LiteralError):
                return None
            if len(text) > GEN_OUTPUT_CHARS:
                return None
            outputs.append(text)
        shown = min(int(self.options.get("shown", 3)), wanted) if task_type == "induction" else 0
        if task_type == "induction" and len(set(outputs[: max(shown, 2)])) == 1:
            return None  # the shown pairs all alike: they would not tell the solver anything
        if trivial_reason(program, dict(zip(inputs, outputs, strict=True)), next(iter(inputs.values()))):
            return None  # what a proposer may not propose is no seed or held-out task either
        return Task(self.name, task_type, program.source, tuple(inputs), tuple(outputs), "", shown)

    # -- prompts -----------------------------------------------------------------------------------
    def solve_prompt(self, task: Task) -> str:
        if task.type == "deduction":
            return f"{task.program}\nf({task.inputs[0]})="
        if task.type == "abduction":
            return f"{task.program}\nf(?)={task.outputs[0]}\n?="
        pairs = "".join(f"f({i})={o}\n" for i, o in zip(task.inputs[: task.shown], task.outputs[: task.shown],
                                                          strict=True))
        hint = f"# {task.message}\n" if task.message else ""
        return f"{pairs}{hint}f="

    def reference_answer(self, task: Task) -> str:
        if task.type == "deduction":
            return task.outputs[0]
        if task.type == "abduction":
            return task.inputs[0]
        return parse_program(task.program).lambda_source

    def proposal_text(self, task: Task) -> str:
        """A task written as a proposer writes it (what `validate` reads back into the same task)."""
        if task.type != "induction":
            return f"{task.program}\ninput: {task.inputs[0]}"
        message = f"\nmessage: {task.message}" if task.message else ""
        return f"{task.program}\ninputs: [{', '.join(task.inputs)}]{message}"

    def propose_prompt(self, task_type: str, references: list[Task], rng: random.Random) -> str:
        check_type(self, task_type)
        k = int(self.options.get("references", 3))
        refs = list(references)
        refs = rng.sample(refs, k) if len(refs) > k else rng.sample(refs, len(refs))
        # single line breaks only: a blank line ends a document in a pretraining corpus
        shown = "".join(self.proposal_text(t) + "\n" for t in refs)
        # The prompt ends where the answer's first word starts after a space (see example_text).
        return f"# mini {task_type} tasks\n{shown}# a new {task_type} task:"

    # -- validation --------------------------------------------------------------------------------
    def validate(self, task_type: str, proposals: list[str]) -> list[Validation]:
        check_type(self, task_type)
        return [self._validate_one(task_type, text) for text in proposals]

    def _validate_one(self, task_type: str, text: str) -> Validation:
        if not isinstance(text, str):
            return Validation(None, "no proposal text", format_error=True)
        # comment lines (an echoed header) and code-fence lines are skipped; anything after the task is ignored
        lines = [s for s in (line.strip() for line in text.splitlines()) if s and not s.startswith(("#", "```"))]
        key = "inputs:" if task_type == "induction" else "input:"
        if len(lines) < 2 or not lines[1].lower().startswith(key):
            return Validation(None, f"a proposal is a program line, then a line starting with {key!r}",
                              format_error=True)
        try:
            program = parse_program(lines[0])
        except MiniError as exc:
            return Validation(None, f"not a mini program: {exc}", format_error=True)
        try:
            given = parse_literal(lines[1][len(key):], ANSWER_LIMITS)
        except LiteralError as exc:
            return Validation(None, f"the input is not a literal value: {exc}", format_error=True)
        message = ""
        if task_type == "induction":
            low, high = INDUCTION_INPUTS
            if type(given) is not list or not low <= len(given) <= high:
                return Validation(None, f"an induction task has a list of {low} to {high} inputs")
            values = given
            if len(lines) > 2 and lines[2].lower().startswith("message:"):
                message = lines[2][len("message:"):].strip()[:MAX_MESSAGE_CHARS]
        else:
            values = [given]
        texts, outputs = [], []
        for value in values:
            try:
                check_value(value)
                result = program.run(value)
                texts.append(to_literal(value, ANSWER_LIMITS))
                out = to_literal(result, ANSWER_LIMITS)
            except MiniError as exc:
                return Validation(None, f"f({_short(value)}) failed: {exc}")
            except LiteralError as exc:
                return Validation(None, f"f({_short(value)}) gives an unusable value: {exc}")
            if len(out) > MAX_OUTPUT_CHARS:
                return Validation(None, f"output too long ({len(out)} > {MAX_OUTPUT_CHARS} characters)")
            outputs.append(out)
        if len(set(texts)) != len(texts):
            return Validation(None, "the inputs must all differ")
        why = trivial_reason(program, dict(zip(texts, outputs, strict=True)), values[0])
        if why:
            return Validation(None, f"trivial: {why}", trivial=True)
        shown = max(1, len(texts) // 2) if task_type == "induction" else 0
        return Validation(Task(self.name, task_type, program.source, tuple(texts), tuple(outputs), message, shown))

    # -- checking ----------------------------------------------------------------------------------
    def check(self, tasks: list[Task], answers: list[str]) -> list[Check]:
        return [self._check_one(task, answer) for task, answer in zip(tasks, answers, strict=True)]

    def _check_one(self, task: Task, answer: str) -> Check:
        if not isinstance(answer, str):
            return unparseable("no answer text")
        line, clean = first_answer_line(answer)
        if not line:
            return unparseable("empty answer")
        try:
            if task.type == "induction":
                return self._check_induction(task, line, clean)
            try:
                value = parse_literal(line, ANSWER_LIMITS)
            except LiteralError as exc:
                return unparseable(f"answer is not a value: {exc}")
            if not clean:
                return bad_format("extra text after the answer")
            if task.type == "deduction":
                return correct() if same_value(value, _task_value(task.outputs[0])) else wrong(
                    f"{_short(line)} is not the output")
            if task.type == "abduction":
                program = parse_program(task.program)  # a broken task is an error, not the solver's fault
                try:
                    got = program.run(value)
                except MiniError as exc:
                    return wrong(f"f({_short(line)}) failed: {exc}")
                return correct() if same_value(got, _task_value(task.outputs[0])) else wrong(
                    f"f({_short(line)}) gives a different output")
            return Check("error", 0.0, f"unknown task type {task.type!r}")
        except (LiteralError, MiniError) as exc:  # the task itself is broken (not from this world)
            return Check("error", 0.0, f"task cannot be checked: {exc}")

    def _check_induction(self, task: Task, line: str, clean: bool) -> Check:
        try:
            program = parse_program(line)
        except MiniError as exc:
            return unparseable(f"answer is not a mini program: {exc}")
        if not clean:
            return bad_format("extra text after the answer")
        for given, expected in zip(task.inputs, task.outputs, strict=True):
            try:
                got = program.run(_task_value(given))
            except MiniError as exc:
                return wrong(f"f({_short(given)}) failed: {exc}")
            if not same_value(got, _task_value(expected)):
                return wrong(f"f({_short(given)}) differs from the expected output")
        return correct()

    # -- corpora -----------------------------------------------------------------------------------
    def example_text(self, task: Task) -> str:
        """A task with its answer, as the seed corpus holds it."""
        # A space between prompt and answer: tokenizers split words at spaces, so a prompt that ends just
        # before it is tokenized exactly as in the corpus (no merge across the boundary, e.g. "=lambda").
        return f"{self.solve_prompt(task)} {self.reference_answer(task)}\n"

    def write_seed_corpus(self, path: str | Path, count: int, seed: int, types: Iterable[str] = TASK_TYPES,
                          proposals: bool = False, exclude: Iterable[str] = ()) -> list[Task]:
        """Write `count` solved tasks (split evenly over `types`, shuffled), one per paragraph, for pretraining.
        With `proposals`, also a quarter as many propose examples (a propose prompt and a new task), so a
        model learns to write tasks too. The tasks per type are `generate(type, n, seed)` less any program in
        `exclude` (pass a held-out set's programs to keep them out of the corpus); they are returned."""

        kinds = [check_type(self, t) for t in types]
        rng = random.Random(f"mini-corpus-{seed}")
        tasks: list[Task] = []
        examples: list[str] = []
        for n, kind in enumerate(kinds):
            share = count // len(kinds) + (1 if n < count % len(kinds) else 0)
            made = self.generate(kind, share, seed, exclude)
            tasks += made
            examples += [self.example_text(t) for t in made]
            if proposals and len(made) > 1:
                for _ in range(max(1, share // 4)):
                    new, *refs = rng.sample(made, min(len(made), 1 + int(self.options.get("references", 3))))
                    examples.append(self.propose_prompt(kind, refs, rng) + " " + self.proposal_text(new) + "\n")
        rng.shuffle(examples)
        atomic_write_text(Path(path), "\n".join(examples))
        return tasks


# Inputs a proposed program also runs on, to tell a real task from a trivial one (of the proposal's input kind).
PROBES: dict[str, tuple[Any, ...]] = {"int": (-7, -1, 0, 1, 2, 5, 13),
                                      "list": ([], [0], [3], [1, 2], [4, -2, 7], [5, 5, 1, 8], [9, 0, 3, 2, 6])}
MIN_INPUTS_TO_JUDGE = 3  # fewer inputs that run tell too little to call a program trivial


def _probes(example: Any) -> tuple[Any, ...]:
    if type(example) is int:
        return PROBES["int"]
    if type(example) is list and all(type(v) is int for v in example):
        return PROBES["list"]
    return ()  # other mini values (None, bools, nested lists): judged on the given inputs alone


def trivial_reason(program: Any, seen: dict[str, str], example: Any) -> str:
    """Why a program is no task ("" when it is one): on its given inputs (literal -> output literal) and the probe
    inputs of their kind that it runs on, its output is always the same (it does not depend on the input), or
    always the input itself (the identity, however it is written, e.g. `x if COND else x`)."""
    runs = dict(seen)
    outputs = set(runs.values())
    identity = all(given == out for given, out in runs.items())
    for value in _probes(example):
        if len(outputs) > 1 and not identity:
            return ""  # the usual case: decided after a probe or two
        try:
            given = to_literal(value, ANSWER_LIMITS)
            out = runs.setdefault(given, to_literal(program.run(value), ANSWER_LIMITS))
        except (MiniError, LiteralError):
            continue
        outputs.add(out)
        identity = identity and given == out
    if len(runs) < MIN_INPUTS_TO_JUDGE:
        return ""
    if len(outputs) == 1:
        return f"the output is {_short(next(iter(outputs)))} whatever the input"
    return "the output is always the input (the identity)" if identity else ""


def _short(text: Any, limit: int = 60) -> str:
    text = text if isinstance(text, str) else repr(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."
