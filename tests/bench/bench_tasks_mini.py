"""Benchmark: mini-world programs checked per second, in-process (the issue's goal: >= 5,000/s).

Run by hand:  .venv/bin/python tests/bench/bench_tasks_mini.py [--count 3000] [--repeats 5]

For each task type it generates --count tasks (seed 0) and times `MiniWorld.check` on a batch of answers:
half the reference answers (correct) and half the answers to other tasks (seed 1; mostly wrong, and
never text the batch has seen), so both verdict paths are paid for. Two conditions:
  cold  parse caches cleared first (every program and literal parsed anew: what a batch of fresh model
        answers costs; induction answers are always new programs)
  warm  the same batch again (the task programs and literals are cached, as during self-play where one
        task is answered many times)
It also times `validate` (proposals/s: parse + run + output text) and `generate` (tasks/s). Medians of
--repeats; nothing is asserted (timings on a shared machine are noisy).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from desktop_app.engine.tasks.base import TASK_TYPES
from desktop_app.engine.tasks.mini_lang import parse_program
from desktop_app.engine.tasks.mini_world import MiniWorld, _task_value


def _clear_caches() -> None:
    parse_program.cache_clear()
    _task_value.cache_clear()


def _rate(fn, n: int, repeats: int, cold: bool) -> float:
    times = []
    for _ in range(repeats):
        if cold:
            _clear_caches()
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return n / statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=3000, help="tasks per type (default 3000)")
    parser.add_argument("--repeats", type=int, default=5, help="timed runs per figure (default 5)")
    args = parser.parse_args()

    world = MiniWorld()
    print(f"mini world, {args.count} tasks per type, median of {args.repeats} runs")
    print(f"{'type':<10} {'check cold/s':>13} {'check warm/s':>13} {'validate/s':>11} {'generate/s':>11} "
          f"{'correct':>8}")
    total_tasks, total_cold = 0, 0.0
    for task_type in TASK_TYPES:
        start = time.perf_counter()
        tasks = world.generate(task_type, args.count, seed=0)
        generate_rate = len(tasks) / (time.perf_counter() - start)
        refs = [world.reference_answer(t) for t in tasks]
        others = [world.reference_answer(t) for t in world.generate(task_type, args.count, seed=1)]
        answers = [refs[i] if i % 2 == 0 else others[i % len(others)] for i in range(len(tasks))]
        verdicts = world.check(tasks, answers)
        right = sum(c.correct for c in verdicts) / len(verdicts)
        cold = _rate(lambda tasks=tasks, answers=answers: world.check(tasks, answers), len(tasks), args.repeats,
                     cold=True)
        warm = _rate(lambda tasks=tasks, answers=answers: world.check(tasks, answers), len(tasks), args.repeats,
                     cold=False)
        proposals = [world.proposal_text(t) for t in tasks]
        validate = _rate(lambda task_type=task_type, proposals=proposals: world.validate(task_type, proposals),
                         len(tasks), args.repeats, cold=True)
        print(f"{task_type:<10} {cold:>13,.0f} {warm:>13,.0f} {validate:>11,.0f} {generate_rate:>11,.0f} "
              f"{right:>8.0%}")
        total_tasks += len(tasks)
        total_cold += len(tasks) / cold
    print(f"all types, cold: {total_tasks / total_cold:,.0f} programs checked/s (goal >= 5,000/s)")


if __name__ == "__main__":
    main()
