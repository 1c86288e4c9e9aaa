"""Held-out tasks of a task world, solved by a model: greedy pass@1 and sampled pass@k per type, with 95% intervals.

Which tasks are held out, and so kept out of every training stream, is tasks/heldout_protocol.py's to say. Self-play
measures itself with this module at each evaluation (objectives/selfplay.py), and the `eval` verb measures any model
with it, so the figures of a run and of `eval` on its checkpoint agree.

`solve_heldout` is a generator of Progress events that returns its results (`results = yield from ...`); `drain`
runs it without reporting (inside a training step's evaluation).
"""

from __future__ import annotations

import math
from collections.abc import Generator, Iterator
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import torch

from desktop_app.engine.events import Progress
from desktop_app.engine.selfplay.prompting import TaskPrompter
from desktop_app.engine.selfplay.rollout import RolloutOptions, sample_completions
from desktop_app.engine.tasks.base import Task, TaskWorld

T = TypeVar("T")
Z95 = 1.959964


def wilson(successes: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion (95% by default): honest at 0, 1 and small n."""
    if n <= 0:
        return 0.0, 1.0
    p = successes / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denominator
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass
class TypeResult:
    """One task type: greedy solves of n tasks, and (samples > 1) tasks solved by at least one of k samples."""

    task_type: str
    n: int
    solved: int
    k: int = 0
    solved_at_k: int = 0
    format_errors: int = 0

    @property
    def rate(self) -> float:
        return self.solved / self.n if self.n else 0.0

    def metrics(self, prefix: str = "solve_rate") -> dict[str, Any]:
        """{prefix}/TYPE, its 95% interval, the task count and pass@k/TYPE (when sampled)."""
        low, high = wilson(self.solved, self.n)
        out: dict[str, Any] = {f"{prefix}/{self.task_type}": self.rate, f"{prefix}/{self.task_type}/ci95": [low, high],
                               f"tasks/{self.task_type}": self.n}
        if self.k > 1:
            out[f"pass@{self.k}/{self.task_type}"] = self.solved_at_k / self.n if self.n else 0.0
            low_k, high_k = wilson(self.solved_at_k, self.n)
            out[f"pass@{self.k}/{self.task_type}/ci95"] = [low_k, high_k]
        return out


def drain(work: Generator[Any, None, T]) -> T:
    """Run a generator of progress events to its end and return its value."""
    while True:
        try:
            next(work)
        except StopIteration as done:
            return done.value


@dataclass(frozen=True)
class HeldoutSettings:
    """How solve_heldout decodes: replies of at most `max_new_tokens` within a `max_len` context, greedy, and
    (`samples` > 1) that many sampled at `temperature` from `seed`, in batches of at most `batch` prompts."""

    max_len: int
    max_new_tokens: int
    samples: int = 0
    temperature: float = 0.8
    seed: int = 0
    batch: int = 64

    def rollout(self, samples: int, temperature: float, seed: int) -> RolloutOptions:
        """One pass's decoding: `samples` replies per task at `temperature` (top-p 0.95 when sampled)."""
        return RolloutOptions(samples=samples, max_new_tokens=self.max_new_tokens, temperature=temperature,
                              top_p=0.95 if temperature > 0 else 1.0, seed=seed, max_len=self.max_len)


@torch.no_grad()
def _replies(model: Any, prompter: TaskPrompter, world: TaskWorld, tasks: list[Task],
             rollout: RolloutOptions) -> list[str]:
    """`rollout.samples` answers per task (task-major), as the world checks them. The tasks' types may differ, as
    long as their answers are cut after the same number of lines (`_batches`)."""
    prompts = [prompter.solve_ids(world, t) for t in tasks]
    lines = prompter.answer_lines(world, tasks[0].type) if tasks else 0
    rollout = replace(rollout, stop_ids=prompter.stop_ids, newline_ids=prompter.codec.newline_ids() if lines else set(),
                      max_lines=lines, finished=[prompter.finished(world.answer_kind(t.type)) for t in tasks],
                      tokens=prompter.codec.vocab_size())
    ids = sample_completions(model, prompts, rollout)
    return [prompter.answer(world, tasks[i // rollout.samples], prompter.codec.decode(c)) for i, c in enumerate(ids)]


def _batches(prompter: TaskPrompter, world: TaskWorld, heldout: dict[str, list[Task]],
             size: int) -> list[list[tuple[str, int]]]:
    """(type, index) batches of at most `size` tasks. Types whose answers are cut alike share batches (chat replies:
    every type), prompts sorted by length: less padding, and the few replies that run to the longest answer decode
    once for all types instead of once per type."""
    groups: dict[int, list[tuple[str, int]]] = {}
    for task_type, tasks in heldout.items():
        groups.setdefault(prompter.answer_lines(world, task_type), []).extend(
            (task_type, i) for i in range(len(tasks)))
    out = []
    for items in groups.values():
        items.sort(key=lambda item: len(world.solve_prompt(heldout[item[0]][item[1]])))
        out += [items[start:start + size] for start in range(0, len(items), size)]
    return out


def _names(part: list[tuple[str, int]]) -> str:
    return ", ".join(dict.fromkeys(task_type for task_type, _ in part))


def solve_heldout(model: Any, prompter: TaskPrompter, world: TaskWorld, heldout: dict[str, list[Task]],
                  settings: HeldoutSettings | None = None, **keywords: Any) -> Iterator[Progress]:
    """Solve every held-out task greedily (and `samples` times sampled when above 1) in batches of `batch` prompts
    (`_batches`); yields Progress per batch, returns {type: TypeResult}. `settings` (HeldoutSettings) or its
    fields as keywords (`max_len=..., max_new_tokens=..., samples=...`), which override it when both are given."""
    s = replace(settings, **keywords) if settings is not None else HeldoutSettings(**keywords)
    heldout = {t: tasks for t, tasks in heldout.items() if tasks}
    total = sum(len(t) for t in heldout.values()) * (1 + (s.samples if s.samples > 1 else 0))
    done = 0
    results = {t: TypeResult(t, len(tasks), 0) for t, tasks in heldout.items()}
    for part in _batches(prompter, world, heldout, max(1, s.batch)):
        tasks = [heldout[t][i] for t, i in part]
        answers = _replies(model, prompter, world, tasks, s.rollout(1, 0.0, s.seed))
        for (task_type, _), check in zip(part, world.check(tasks, answers), strict=True):
            results[task_type].solved += bool(check.correct)
            results[task_type].format_errors += check.status in ("format", "unparseable")
        done += len(part)
        yield Progress("held-out tasks", done, total, "answers", f"{_names(part)}: greedy")
    if s.samples > 1:
        for result in results.values():
            result.k = s.samples
        for part in _batches(prompter, world, heldout, max(1, s.batch // s.samples)):
            tasks = [heldout[t][i] for t, i in part]
            answers = _replies(model, prompter, world, tasks, s.rollout(s.samples, s.temperature, s.seed + done))
            checks = world.check([t for t in tasks for _ in range(s.samples)], answers)
            for j, (task_type, _) in enumerate(part):
                results[task_type].solved_at_k += any(c.correct for c in checks[j * s.samples:(j + 1) * s.samples])
            done += len(part) * s.samples
            yield Progress("held-out tasks", done, total, "answers", f"{_names(part)}: {s.samples} samples each")
    return results


def mean_rate(results: dict[str, TypeResult]) -> float:
    """The solve rate averaged over types (each type counts the same, whatever its task count)."""
    rates = [r.rate for r in results.values()]
    return sum(rates) / len(rates) if rates else 0.0
