"""HumanEval-style code benchmarks scored in our sandbox, never by the harness's unsandboxed `exec`.

lm-evaluation-harness scores code tasks (humaneval, mbpp, ...: marked `unsafe_code: true`) with HF evaluate's
`code_eval`, which runs the model's programs in a plain subprocess of this one. `take_over_code_tasks` replaces
that metric, on the loaded task objects before anything is evaluated, with `sandboxed_pass_at_k`: each program
(the model's completion as the task's filters built it) is joined with the task's test (its `doc_to_target`:
the tests and `check(entry_point)`) and run by the sandbox's executor (engine/sandbox: static screen, separate
isolated interpreter, memory/CPU/wall limits, no network, no new processes). A program passes when it runs to
the end without an error; pass@k is code_eval's unbiased estimator. A program the sandbox refuses (an import
outside its allowed modules, say) fails, as it would in a stricter grader.

A code task whose scoring cannot be taken over (its own `process_results` code, or no recognisable pass@k
metric) is refused with a UserError naming the task and why; it never runs.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from desktop_app.engine.errors import UserError
from desktop_app.engine.sandbox import Executor, Job, Limits

# Code_eval gives each program 3 s; ours: the same order of CPU time, some slack on the clock for a busy machine.
CODE_LIMITS = Limits(cpu_seconds=5.0, memory_mb=512, wall_seconds=15.0, output_bytes=1 << 20)
CODE_METRIC_NAMES = ("code_eval", "pass_at_k", "pass_at_1")


class CodeTaskRefused(UserError):
    """A code benchmark this app cannot score in its sandbox."""


class CodeSandbox:
    """One executor for every code task of an evaluation, started on first use (its fork server and folder go
    away with it)."""

    def __init__(self, limits: Limits = CODE_LIMITS) -> None:
        self.limits = limits
        self._executor: Executor | None = None
        self._lock = threading.Lock()

    def run(self, sources: list[str]) -> list[bool]:
        with self._lock:
            if self._executor is None:
                self._executor = Executor(self.limits)
            executor = self._executor
        return [r.status == "ok" for r in executor.run([Job(source) for source in sources])]


def pass_at_k(n: int, correct: int, k: int) -> float:
    """code_eval's unbiased estimate of pass@k from n samples of which `correct` passed."""
    if n - correct < k:
        return 1.0
    estimate = 1.0
    for i in range(n - correct + 1, n + 1):
        estimate *= 1.0 - k / i
    return 1.0 - estimate


def program_with_tests(program: str, test: str) -> str:
    """What runs for one sample: the program, then the task's test code (which calls check(entry_point))."""
    return f"{program}\n\n{test}\n"


def sandboxed_pass_at_k(references: list[str], predictions: list[list[str]], k: int | list[int] = 1,
                        sandbox: CodeSandbox | None = None) -> dict[str, float]:
    """The harness's pass_at_k metric, sandboxed: {"pass@K": mean over the references} for each K no larger
    than the number of programs per reference (as code_eval reports)."""
    ks = [k] if isinstance(k, int) else list(k)
    box = sandbox or CodeSandbox()
    passed: list[tuple[int, int]] = []
    for test, programs in zip(references, predictions, strict=True):
        programs = [programs] if isinstance(programs, str) else list(programs)
        results = box.run([program_with_tests(p, test) for p in programs])
        passed.append((len(programs), sum(results)))
    return {f"pass@{kk}": sum(pass_at_k(n, c, kk) for n, c in passed) / len(passed)
            for kk in ks if passed and all(n >= kk for n, _ in passed)}


def _leaves(task_dict: dict, seen: set[int] | None = None) -> Iterator[tuple[str, Any]]:
    """(name, task) of every task, once, in the harness's task dict: TaskManager.load()'s flat {"tasks": ...,
    "groups": ...} or get_task_dict's nesting (groups hold dicts)."""
    seen = set() if seen is None else seen
    for key, value in task_dict.items():
        if isinstance(value, dict):
            yield from _leaves(value, seen)
        elif hasattr(value, "OUTPUT_TYPE") and hasattr(value, "config") and id(value) not in seen:
            seen.add(id(value))
            yield str(getattr(value.config, "task", None) or key), value


def _code_metric(name: str) -> bool:
    return name in CODE_METRIC_NAMES or name.startswith("pass@")


def is_code_task(task: Any) -> bool:
    """True for a task that would run the model's programs: marked unsafe_code, or scored by a pass@k metric."""
    if getattr(task.config, "unsafe_code", False) or getattr(task, "UNSAFE_CODE", False):
        return True
    return any(_code_metric(name) for name in getattr(task, "_metric_fn_list", {}))


def _refusal(name: str, task: Any) -> str | None:
    """Why the task's scoring cannot be moved into the sandbox, or None when it can."""
    metrics = getattr(task, "_metric_fn_list", None)
    if not isinstance(metrics, dict):
        return "this version of the harness keeps its metrics where the app cannot replace them"
    if task.config.process_results is not None:
        return "it scores answers with its own Python code (process_results), which could run the programs"
    if getattr(task, "OUTPUT_TYPE", None) != "generate_until":
        return f"its output type is {task.OUTPUT_TYPE!r}, not generated programs"
    if not any(_code_metric(m) for m in metrics):
        return f"none of its metrics ({', '.join(metrics) or 'none'}) is a pass@k the sandbox can compute"
    return None


def take_over_code_tasks(task_dict: dict, limits: Limits = CODE_LIMITS) -> list[str]:
    """Score every code task of `task_dict` (the harness's: TaskManager.load() or get_task_dict) in our sandbox:
    their pass@k metrics replaced, their unsafe mark cleared. Returns the names taken over; CodeTaskRefused (a
    UserError) naming the task when one cannot be, before anything runs. `limits`: each program's (CODE_LIMITS)."""
    code = [(name, task) for name, task in _leaves(task_dict) if is_code_task(task)]
    for name, task in code:
        reason = _refusal(name, task)
        if reason is not None:
            raise CodeTaskRefused(f"benchmark {name} runs the model's programs, and this app runs them only in "
                                  f"its sandbox, which it cannot do here: {reason}; leave {name} out")
    sandbox = CodeSandbox(limits)
    for _, task in code:
        for metric in list(task._metric_fn_list):
            if _code_metric(metric):
                task._metric_fn_list[metric] = _bound(sandbox)
                kwargs = task._metric_fn_kwargs.get(metric, {})
                task._metric_fn_kwargs[metric] = {"k": kwargs.get("k", 1)}
        task.config.unsafe_code = False  # scored in the sandbox now: the harness's unsafe-code guard no longer applies
        task.UNSAFE_CODE = False
    return [name for name, _ in code]


def _bound(sandbox: CodeSandbox) -> Any:
    def metric(references: list[str], predictions: list[list[str]], k: int | list[int] = 1) -> dict[str, float]:
        return sandboxed_pass_at_k(references, predictions, k, sandbox)

    return metric
