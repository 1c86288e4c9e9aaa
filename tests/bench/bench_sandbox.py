"""Benchmark: programs checked per second by the sandboxed executor vs a naive executor.

    .venv/bin/python tests/bench/bench_sandbox.py            # 400 python-world programs
    .venv/bin/python tests/bench/bench_sandbox.py --count 2000

Programs are the python world's seed tasks (AZR-sized functions, one call each).
    naive:     one `python -c ...` subprocess per program (what simple executors do), run 2 at a time
    executor:  Executor.run on the whole batch (warm fork server, a fork per program, every layer on)
    mini:      the mini world's in-process interpreter on its own tasks (checks per second)
Figures are printed; nothing is asserted.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def naive(program: str, call: str) -> str:
    # a plain interpreter per program, as simple executors do (site packages load at every start)
    code = f"{program}\nprint(repr(f({call})))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=10)
    return done.stdout.strip()


def main() -> None:
    from desktop_app.engine.sandbox import Executor, Job
    from desktop_app.engine.tasks import get_world

    parser = argparse.ArgumentParser()
    parser.add_argument("--count", type=int, default=400)
    args = parser.parse_args()
    world = get_world("python")
    tasks = world.generate("deduction", args.count, seed=1)
    world.close()
    cpu = platform.processor() or platform.machine()
    print(f"CPU: {cpu}, {len(tasks)} programs")

    sample = tasks[: min(100, len(tasks))]
    start = time.perf_counter()
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda t: naive(t.program, t.inputs[0]), sample))
    naive_rate = len(sample) / (time.perf_counter() - start)
    print(f"naive subprocess per program : {naive_rate:8.1f} programs/s")

    with Executor() as executor:
        executor.state()  # start the fork server outside the timing
        jobs = [Job(t.program, calls=(t.inputs[0],)) for t in tasks]
        start = time.perf_counter()
        results = executor.run(jobs)
        rate = len(jobs) / (time.perf_counter() - start)
    ok = sum(r.status == "ok" for r in results)
    print(f"executor, batched            : {rate:8.1f} programs/s ({ok}/{len(jobs)} ok), "
          f"{rate / naive_rate:.1f}x naive")

    try:
        mini = get_world("mini")
    except Exception as exc:
        print(f"mini world unavailable: {exc}")
        return
    mini_tasks = mini.generate("deduction", 2000, seed=1)
    answers = [mini.reference_answer(t) for t in mini_tasks]
    start = time.perf_counter()
    checks = mini.check(mini_tasks, answers)
    mini_rate = len(mini_tasks) / (time.perf_counter() - start)
    print(f"mini world, in-process       : {mini_rate:8.1f} checks/s ({sum(c.correct for c in checks)} correct)")


if __name__ == "__main__":
    main()
