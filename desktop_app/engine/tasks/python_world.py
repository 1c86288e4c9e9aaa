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
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from desktop_app.engine.sandbox import Executor, Job, Limits
from desktop_app.engine.sandbox.literal import LiteralError, LiteralLimits, parse_literal, same_value, to_literal
from desktop_app.engine.sandbox.screen import ScreenError, screen_source
from desktop_app.engine.tasks.base import (
    Check,
    Task,
    TaskWorld,
    Validation,
    bad_format,
    check_type,
    correct,
    first_answer_line,
    unparseable,
    wrong,
)

ANSWER_LIMITS = LiteralLimits(max_chars=2_000, max_depth=8, max_items=500, max_int_digits=30, max_str_chars=500)
MAX_OUTPUT_CHARS = 1_000
FENCE = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)
CALL = re.compile(r"^\s*f\((.*)\)\s*$", re.S)
TASK_LIMITS = Limits(cpu_seconds=1, wall_seconds=2, memory_mb=128, output_bytes=16384, stdout_chars=256)

# Seed programs: templates with random constants, run through the sandbox to get their outputs.
TEMPLATES: list[tuple[str, str]] = [
    ("int", "def f(x):\n    return x * {a} + {b}\n"),
    ("int", "def f(x):\n    total = 0\n    for i in range(abs(x) % 20):\n        total += i * {a}\n    return total\n"),
    ("int", "def f(x):\n    if x % {m} == 0:\n        return x // {m}\n    return x * {a} - {b}\n"),
    ("int", "def f(n):\n    digits = [int(c) for c in str(abs(n))]\n    return sum(digits) * {a}\n"),
    ("list", "def f(xs):\n    return [v * {a} for v in xs if v % {m} != 0]\n"),
    ("list", "def f(xs):\n    return sorted(xs, reverse=True)[:{k}]\n"),
    ("list", "def f(xs):\n    out = []\n    for v in xs:\n        if not out or v > out[-1]:\n"
             "            out.append(v)\n    return out\n"),
    ("list", "def f(xs):\n    return sum(v for v in xs if v > {b}) - len(xs)\n"),
    ("list", "def f(xs):\n    acc = {b}\n    for i, v in enumerate(xs):\n"
             "        acc = acc * {a} + v if i % 2 else acc - v\n    return acc\n"),
    ("list", "def f(xs):\n    return [xs[i] + xs[i + 1] for i in range(len(xs) - 1)]\n"),
    ("str", "def f(s):\n    return s[::-1].upper() + str(len(s) * {a})\n"),
    ("str", "def f(s):\n    counts = {{}}\n    for ch in s:\n        counts[ch] = counts.get(ch, 0) + 1\n"
            "    return sorted(counts.items())\n"),
    ("str", "def f(s):\n    return ''.join(chr((ord(c) - 97 + {k}) % 26 + 97) for c in s)\n"),
    ("str", "def f(s):\n    vowels = 'aeiou'\n    return tuple(i for i, c in enumerate(s) if c in vowels)\n"),
    ("pair", "def f(a, b):\n    while b:\n        a, b = b, a % b\n    return a * {a}\n"),
    ("pair", "def f(s, n):\n    return [s[i:i + n] for i in range(0, len(s), n)] if n > 0 else [s]\n"),
]


def _random_args(kind: str, rng: random.Random) -> str:
    if kind == "int":
        return repr(rng.randint(-30, 60))
    if kind == "list":
        return repr([rng.randint(-9, 20) for _ in range(rng.randint(0, 7))])
    letters = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(1, 8)))
    if kind == "str":
        return repr(letters)
    if "s, n" in kind:
        return f"{letters!r}, {rng.randint(0, 4)}"
    return f"{rng.randint(1, 200)}, {rng.randint(0, 120)}"


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
class PythonWorld(TaskWorld):
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

    # -- generation --------------------------------------------------------------------------------
    def generate(self, task_type: str, count: int, seed: int, exclude: Iterable[str] = ()) -> list[Task]:
        check_type(self, task_type)
        excluded = set(exclude)
        rng = random.Random(f"python-{task_type}-{seed}")
        tasks: list[Task] = []
        seen: set[tuple[str, tuple[str, ...]]] = set()
        attempts = 0
        while len(tasks) < count and attempts < 50 * count + 50:
            wanted = min(64, 2 * (count - len(tasks)))
            attempts += wanted
            drafts = []
            for _ in range(wanted):
                kind, template = rng.choice(TEMPLATES)
                program = template.format(a=rng.randint(2, 9), b=rng.randint(0, 20), m=rng.randint(2, 5),
                                          k=rng.randint(1, 4))
                if kind == "pair":
                    kind = "pair s, n" if "s, n" in program else "pair"
                n_inputs = 6 if task_type == "induction" else 1
                drafts.append((program, tuple(_random_args(kind, rng) for _ in range(n_inputs))))
            fresh = []
            for draft in drafts:
                if draft not in seen:
                    seen.add(draft)
                    fresh.append(draft)
            drafts = fresh
            for validation in self._validate_drafts(task_type, drafts):
                if validation.valid and len(tasks) < count and validation.task.program not in excluded:
                    tasks.append(validation.task)
        return tasks

    def _validate_drafts(self, task_type: str, drafts: list[tuple[str, tuple[str, ...]]],
                         message: str = "") -> list[Validation]:
        verdicts: list[Validation | None] = [None] * len(drafts)
        jobs, where = [], []
        for i, (program, inputs) in enumerate(drafts):
            try:
                tree = screen_source(program, self.executor.allowed_modules())
                if not any(isinstance(n, ast.FunctionDef) and n.name == "f" for n in tree.body):
                    raise ScreenError("the program does not define a function f")
                for text in inputs:
                    parse_args(text)
            except (ScreenError, LiteralError) as exc:
                verdicts[i] = Validation(None, str(exc))
                continue
            # each input twice in one run: a program that is not deterministic disagrees with itself
            jobs.append(Job(program, calls=tuple(x for text in inputs for x in (text, text)), limits=TASK_LIMITS))
            where.append(i)
        for i, result in zip(where, self.executor.run(jobs) if jobs else [], strict=False):
            program, inputs = drafts[i]
            verdicts[i] = self._task_from_run(task_type, program, inputs, result, message)
        return [v if v is not None else Validation(None, "not checked") for v in verdicts]

    def _task_from_run(self, task_type: str, program: str, inputs: tuple[str, ...], result: Any,
                       message: str) -> Validation:
        if result.status != "ok":
            return Validation(None, f"{result.status}: {result.reason}")
        outputs = []
        for k in range(len(inputs)):
            first, second = result.calls[2 * k], result.calls[2 * k + 1]
            if not (first.ok and second.ok):
                return Validation(None, f"f({inputs[k]}) failed: {first.error or second.error}")
            if not same_value(first.value, second.value):
                return Validation(None, "not deterministic: two runs of the same input disagree")
            try:
                text = to_literal(first.value, ANSWER_LIMITS)
            except LiteralError as exc:
                return Validation(None, f"output not usable: {exc}")
            if len(text) > MAX_OUTPUT_CHARS:
                return Validation(None, f"output too long ({len(text)} > {MAX_OUTPUT_CHARS} characters)")
            outputs.append(text)
        normalized = tuple(_args_text(parse_args(text)) for text in inputs)
        shown = max(1, len(inputs) // 2) if task_type == "induction" else 0
        return Validation(Task("python", task_type, program, normalized, tuple(outputs), message, shown))

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

    def validate(self, task_type: str, proposals: list[str]) -> list[Validation]:
        check_type(self, task_type)
        drafts, where, messages = [], [], []
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
            drafts.append((code, tuple(calls)))
            messages.append(message)
            where.append(i)
        for i, (draft, message) in zip(where, zip(drafts, messages, strict=False), strict=False):
            verdicts[i] = self._validate_drafts(task_type, [draft], message)[0]
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
