"""The python task world: Absolute Zero's tasks over deterministic Python functions `f`.

Programs run only in the sandboxed executor; answers are parsed by the bounded literal parser and
compared by value in this process. deduction: program + input -> output; abduction: program + output
-> any input that produces it (checked by running it); induction: input/output pairs + a message ->
a program (checked on every pair, the held-out ones included).
"""

from __future__ import annotations

import ast
import random
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

from desktop_app.engine.sandbox import Executor, Job, Limits
from desktop_app.engine.sandbox.literal import LiteralError, LiteralLimits, parse_literal, same_value, to_literal
from desktop_app.engine.sandbox.screen import ScreenError, screen_source
from desktop_app.engine.tasks.base import (
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
from desktop_app.engine.tasks.python_programs import LETTERS, random_args, random_program
from desktop_app.engine.tasks.seeded import SeededWorld

ANSWER_LIMITS = LiteralLimits(max_chars=2_000, max_depth=8, max_items=500, max_int_digits=30, max_str_chars=500)
MAX_OUTPUT_CHARS = 1_000
FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)
CALL = re.compile(r"^\s*f\((.*)\)\s*$", re.S)
TASK_LIMITS = Limits(cpu_seconds=1, wall_seconds=2, memory_mb=128, output_bytes=16384, stdout_chars=256)

GEN_OUTPUT_CHARS = 120  # outputs of generated tasks, as literal text: short enough to trace and to write
DRAFT_BATCH = 64  # generated drafts validated per sandbox batch (one job each)
PROBES = 4  # extra inputs of a draft's own shape run in its job: a task whose output ignores them is trivial
# The Absolute Zero seed: the identity, which `validate` accepts only when its caller allows it (allow_identity).
IDENTITY_SEED = "def f(x):\n    return x\n"


@dataclass(frozen=True)
class Draft:
    """A program and its inputs before the sandbox has run them: a generated one, or a model's proposal."""

    program: str
    inputs: tuple[str, ...]
    message: str = ""
    generated: bool = False  # generated tasks: short outputs, and induction's shown pairs not all alike
    probes: tuple[str, ...] = ()  # argument lists for the triviality check (default: probe_inputs of the inputs)
    identity_ok: bool = False  # the caller validates the seed (the identity): only a constant output is trivial


def _refused_trivial(reason: str) -> Validation:
    return Validation(None, f"trivial: {reason}", trivial=True)


def probe_inputs(program: str, args: list[tuple]) -> list[tuple]:
    """PROBES argument lists of the first input's shape (as many arguments, of the same types and signs, values at
    most about as large: in the program's domain and no slower to run), from a stream seeded by the draft, so the
    same draft always gets the same probes."""
    if not args:
        return []
    rng = random.Random(f"probe\x00{program}\x00{args[0]!r}")
    return [tuple(mirror(value, rng, turn) for value in args[0]) for turn in range(PROBES)]


def mirror(value: Any, rng: random.Random, turn: int = 0) -> Any:
    """A random value like `value`: the same type, sign, character classes and at most about its size (bools: the
    other one on even turns, so that probes differ from a lone bool)."""
    if isinstance(value, bool):
        return value == bool(turn % 2)
    if isinstance(value, (int, float)):
        size = max(10, abs(value))
        drawn = rng.randint(1, size) if isinstance(value, int) else round(rng.uniform(0, size), 2)
        return -drawn if value < 0 else drawn if value > 0 else rng.randint(0, 10) * type(value)(1)
    if isinstance(value, str):
        kept = value[: rng.randint(max(1, len(value) - 2), max(1, len(value)))]
        return "".join(_like_char(c, rng) for c in kept) if value else rng.choice(LETTERS)
    if isinstance(value, (list, tuple)):
        items = value or [0]
        size = len(value) if isinstance(value, tuple) else rng.randint(1 if value else 0, max(3, len(value)))
        made = [mirror(items[i % len(items)], rng, turn + i) for i in range(size)]
        return made if isinstance(value, list) else tuple(made)
    if isinstance(value, dict):
        return {mirror(k, rng, turn): mirror(v, rng, turn) for k, v in value.items()}
    return value


def _like_char(c: str, rng: random.Random) -> str:
    for group in (LETTERS, LETTERS.upper(), "0123456789"):
        if c in group:
            return rng.choice(group)
    return c


def triviality(args: list[tuple], runs: list[Any], identity_ok: bool = False) -> str:
    """Why a program is trivial, or '': `runs` are its CallResults on the argument lists `args` (a draft's inputs,
    then its probes). Trivial: every call returns the same value (the output ignores the input), or (unless
    identity_ok) every call returns one argument unchanged (the identity; with several arguments, the same one every
    time). A call that fails makes the output depend on the input: not trivial."""
    if not runs or not all(r.ok for r in runs):
        return ""
    if all(same_value(r.value, runs[0].value) for r in runs):
        return f"f returns {to_literal(runs[0].value)[:60]} whatever its input"
    for p in range(0 if identity_ok or not args else len(args[0])):
        if all(len(a) > p and same_value(r.value, a[p]) for a, r in zip(args, runs, strict=False)):
            return "f returns its input unchanged" if len(args[0]) == 1 else f"f returns its argument {p + 1} unchanged"
    return ""


def _output_texts(draft: Draft, calls: tuple[Any, ...]) -> list[str] | str:
    """The output texts of a draft's inputs (each ran twice, first in `calls`), or why they make no task."""
    limit = GEN_OUTPUT_CHARS if draft.generated else MAX_OUTPUT_CHARS
    outputs = []
    for k, given in enumerate(draft.inputs):
        first, second = calls[2 * k], calls[2 * k + 1]
        if not (first.ok and second.ok):
            return f"f({given}) failed: {first.error or second.error}"
        if not same_value(first.value, second.value):
            return "not deterministic: two runs of the same input disagree"
        try:
            text = to_literal(first.value, ANSWER_LIMITS)
        except LiteralError as exc:
            return f"output not usable: {exc}"
        if len(text) > limit:
            return f"output too long ({len(text)} > {limit} characters)"
        outputs.append(text)
    return outputs


def extract_code(text: str) -> str | None:
    """The program in a model's answer: the first fenced block, else the text from its first `def`."""
    match = FENCE.search(text)
    if match:
        return match.group(1)
    start = text.find("def ")
    return text[start:] if start >= 0 else None


def parse_args(text: str) -> tuple:
    """An argument list as written inside f(...) -> a tuple of plain values (bounded; never evaluated)."""
    if not text.strip():
        return ()
    value = parse_literal(f"({text},)", ANSWER_LIMITS)
    if not isinstance(value, tuple):
        raise LiteralError("not an argument list")
    return value


def _args_text(args: tuple) -> str:
    return ", ".join(to_literal(a, ANSWER_LIMITS) for a in args)


@dataclass
class PythonWorld(SeededWorld):
    name: ClassVar[str] = "python"
    options: dict = field(default_factory=dict)
    _executor: Executor | None = field(default=None, init=False, repr=False)

    # -- executor ----------------------------------------------------------------------------------
    @property
    def executor(self) -> Executor:
        if self._executor is None:
            self._executor = self.options.get("executor") or Executor(TASK_LIMITS,
                                                                      strict=bool(self.options.get("strict")))
        return self._executor

    def close(self) -> None:
        if self._executor is not None and "executor" not in self.options:
            self._executor.close()
        self._executor = None

    # -- generation (generate and heldout_set: SeededWorld) ----------------------------------------------
    def _generate(self, task_type: str, count: int, rng: random.Random, exclude: set[str]) -> list[Task]:
        """One task per program, drafted in fixed batches: the first tasks do not depend on `count`."""
        tasks: list[Task] = []
        seen = set(exclude)
        for _ in range(2 + 50 * count // DRAFT_BATCH):
            if len(tasks) >= count:
                break
            drafts = []
            for _ in range(DRAFT_BATCH):
                draft = self._draft(task_type, rng)
                if draft is not None and draft.program not in seen:
                    seen.add(draft.program)
                    drafts.append(draft)
            made = [v.task for v in self._validate_drafts(task_type, drafts) if v.task is not None]
            tasks += made[: count - len(tasks)]
        return tasks

    def _draft(self, task_type: str, rng: random.Random) -> Draft | None:
        program = random_program(rng)
        wanted = 6 if task_type == "induction" else 1
        inputs: dict[str, None] = {}
        for _ in range(3 * wanted):
            inputs.setdefault(random_args(program.kind, rng))
            if len(inputs) == wanted:
                # probes from the kind's own inputs: in the program's domain (a pair's k stays positive)
                probe_rng = random.Random(f"probe\x00{program.source}")
                probes = tuple(random_args(program.kind, probe_rng) for _ in range(PROBES))
                return Draft(program.source, tuple(inputs), generated=True, probes=probes)
        return None

    def _validate_drafts(self, task_type: str, drafts: list[Draft]) -> list[Validation]:
        """Screen every draft, then run them all in one batch: one job per draft with each input twice (a program
        that is not deterministic disagrees with itself) and PROBES inputs of the same shape (triviality)."""
        verdicts: list[Validation | None] = [None] * len(drafts)
        jobs, where = [], []
        for i, draft in enumerate(drafts):
            try:
                tree = screen_source(draft.program, self.executor.allowed_modules())
                if not any(isinstance(n, ast.FunctionDef) and n.name == "f" for n in tree.body):
                    raise ScreenError("the program does not define a function f")
                args = [parse_args(text) for text in draft.inputs]
                probes = [parse_args(text) for text in draft.probes] or probe_inputs(draft.program, args)
                calls = tuple(x for text in draft.inputs for x in (text, text)) + tuple(map(_args_text, probes))
            except (ScreenError, LiteralError) as exc:
                verdicts[i] = Validation(None, str(exc))
                continue
            jobs.append(Job(draft.program, calls=calls, limits=TASK_LIMITS))
            where.append((i, args + probes))
        for (i, args), result in zip(where, self.executor.run(jobs) if jobs else [], strict=False):
            verdicts[i] = self._task_from_run(task_type, drafts[i], result, args)
        return [v if v is not None else Validation(None, "not checked") for v in verdicts]

    def _task_from_run(self, task_type: str, draft: Draft, result: Any, args: list[tuple]) -> Validation:
        """The task of a draft's run (`args`: its inputs' argument lists, then its probes'), or why there is none."""
        if result.status != "ok":
            return Validation(None, f"{result.status}: {result.reason}")
        outputs = _output_texts(draft, result.calls)
        if isinstance(outputs, str):
            return Validation(None, outputs)
        shown = max(1, len(draft.inputs) // 2) if task_type == "induction" else 0
        if draft.generated and task_type == "induction" and len(set(outputs[: max(shown, 2)])) == 1:
            return Validation(None, "the shown pairs are all alike: they tell the solver nothing")
        n = len(draft.inputs)
        why = triviality(args, [result.calls[2 * k] for k in range(n)] + list(result.calls[2 * n:]),
                         identity_ok=draft.identity_ok)
        if why:
            return _refused_trivial(why)
        normalized = tuple(_args_text(parse_args(text)) for text in draft.inputs)
        return Validation(Task("python", task_type, draft.program, normalized, tuple(outputs), draft.message, shown))

    # -- prompts -----------------------------------------------------------------------------------
    def _render(self, task: Task) -> str:
        return f"```python\n{task.program.rstrip()}\n```\nInput: f({task.inputs[0]})\nOutput: {task.outputs[0]}"

    def propose_prompt(self, task_type: str, references: list[Task], rng: random.Random) -> str:
        check_type(self, task_type)
        shown = "\n\n".join(self._render(t) for t in references[: int(self.options.get("references", 3))])
        if task_type == "induction":
            ask = ("Write a new Python function f, different from the examples, and 6 inputs for it, one per "
                   "line as `f(ARGS)`, then a line `Message: ` with a hint about what f does.")
        else:
            ask = ("Write a new Python function f, different from the examples, and one input for it as "
                   "`Input: f(ARGS)`. f must be deterministic and use only the standard library.")
        return f"Examples:\n\n{shown}\n\n{ask}\n"

    def validate(self, task_type: str, proposals: list[str], *, allow_identity: bool = False) -> list[Validation]:
        """Parse every proposal and validate them all in one sandbox batch. A trivial program is refused: its output
        ignores its input, or it returns its input unchanged; allow_identity (the caller's own seed, IDENTITY_SEED,
        never a model's proposal) lets the identity through."""
        check_type(self, task_type)
        drafts, where = [], []
        verdicts: list[Validation | None] = [None] * len(proposals)
        for i, text in enumerate(proposals):
            code = extract_code(text)
            calls = [m.group(1) for m in (CALL.match(line.split(":", 1)[-1]) for line in text.splitlines()
                                          if line.strip().startswith(("Input", "f(")) and "def " not in line)
                     if m]
            if code is None or not calls:
                verdicts[i] = Validation(None, "no program or no input found", format_error=True)
                continue
            calls = calls[:6] if task_type == "induction" else calls[:1]
            message = next((line.split(":", 1)[1].strip() for line in text.splitlines()
                            if line.startswith("Message:")), "")
            drafts.append(Draft(code, tuple(calls), message, identity_ok=allow_identity))
            where.append(i)
        for i, verdict in zip(where, self._validate_drafts(task_type, drafts), strict=True):
            verdicts[i] = verdict
        return [v if v is not None else Validation(None, "not checked") for v in verdicts]

    def solve_prompt(self, task: Task) -> str:
        code = f"```python\n{task.program.rstrip()}\n```"
        if task.type == "deduction":
            return f"{code}\nWhat does f return?\nInput: f({task.inputs[0]})\nOutput:"
        if task.type == "abduction":
            return f"{code}\nFind an input for which f returns this output.\nOutput: {task.outputs[0]}\nInput:"
        shown = zip(task.inputs[: task.shown], task.outputs[: task.shown], strict=True)
        pairs = "\n".join(f"f({i}) = {o}" for i, o in shown)
        hint = f"\nMessage: {task.message}" if task.message else ""
        return f"Write a Python function f that gives these outputs.\n{pairs}{hint}\nProgram:"

    def reference_answer(self, task: Task) -> str:
        if task.type == "deduction":
            return task.outputs[0]
        if task.type == "abduction":
            return f"f({task.inputs[0]})"
        return f"```python\n{task.program.rstrip()}\n```"

    def answer_kind(self, task_type: str) -> str:
        return {"deduction": "value", "abduction": "call"}.get(task_type, "program")

    # -- checking ----------------------------------------------------------------------------------
    def check(self, tasks: list[Task], answers: list[str]) -> list[Check]:
        checks: list[Check | None] = [None] * len(tasks)
        jobs, pending = [], []
        for i, (task, answer) in enumerate(zip(tasks, answers, strict=False)):
            verdict, job, expected = self._prepare(task, answer)
            if verdict is not None:
                checks[i] = verdict
            else:
                jobs.append(job)
                pending.append((i, expected, verdict_clean(task, answer)))
        for (i, expected, clean), result in zip(pending, self.executor.run(jobs) if jobs else [], strict=False):
            checks[i] = _judge(result, expected, clean)
        return [c if c is not None else unparseable("not checked") for c in checks]

    def _prepare(self, task: Task, answer: str) -> tuple[Check | None, Job | None, list]:
        if task.type == "induction":
            code = extract_code(answer)
            if code is None:
                return unparseable("no program in the answer"), None, []
            try:
                screen_source(code, self.executor.allowed_modules())
            except ScreenError as exc:
                return unparseable(str(exc)), None, []
            expected = [parse_literal(o, ANSWER_LIMITS) for o in task.outputs]
            return None, Job(code, calls=task.inputs, limits=TASK_LIMITS), expected
        line, clean = first_answer_line(answer)
        if task.type == "deduction":
            try:
                value = parse_literal(line, ANSWER_LIMITS)
            except LiteralError as exc:
                return unparseable(f"answer is not a value: {exc}"), None, []
            if not same_value(value, parse_literal(task.outputs[0], ANSWER_LIMITS)):
                return wrong(f"{line[:80]} is not the output"), None, []
            return (correct() if clean else bad_format("extra text after the answer")), None, []
        match = CALL.match(line)
        try:
            args = parse_args(match.group(1) if match else line)
        except LiteralError as exc:
            return unparseable(f"answer is not an argument list: {exc}"), None, []
        expected = [parse_literal(task.outputs[0], ANSWER_LIMITS)]
        return None, Job(task.program, calls=(_args_text(args),), limits=TASK_LIMITS), expected


def verdict_clean(task: Task, answer: str) -> bool:
    if task.type == "induction":
        return True
    return first_answer_line(answer)[1]


def _judge(result: Any, expected: list, clean: bool) -> Check:
    if result.status != "ok":
        return wrong(f"{result.status}: {result.reason}")
    for call, want in zip(result.calls, expected, strict=False):
        if not call.ok:
            return wrong(call.error)
        if not same_value(call.value, want):
            return wrong("a result differs from the expected output")
    return correct() if clean else bad_format("extra text after the answer")
