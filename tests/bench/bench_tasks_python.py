"""Benchmark: the python world's variety and generation speed (run by hand; ~1 minute).

    .venv/bin/python tests/bench/bench_tasks_python.py [--programs 2000] [--tasks 1000] [--json OUT]

Variety: for seeds 0-3, --programs generated programs (no sandbox): how many distinct texts and distinct shapes
(tasks/heldout_protocol.program_shape: numbers and strings blanked). Held-out room: of the first 100 held-out
programs per type (seed 9002), how many shapes also occur among --tasks training tasks (seed 0) generated with the
held-out programs left out (the program texts never do, by construction). Speed: seconds to generate --tasks tasks
per type through the sandbox (validation, outputs, the triviality probes). Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from desktop_app.engine.tasks.base import TASK_TYPES
from desktop_app.engine.tasks.heldout_protocol import program_shape
from desktop_app.engine.tasks.python_programs import random_program
from desktop_app.engine.tasks.python_world import PythonWorld


def variety(count: int, seed: int) -> dict[str, int]:
    rng = random.Random(f"bench-{seed}")
    programs = [random_program(rng).source for _ in range(count)]
    return {"programs": count, "texts": len(set(programs)), "shapes": len({program_shape(p) for p in programs})}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--programs", type=int, default=2000)
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    out: dict = {"date": time.strftime("%Y-%m-%d %H:%M"), "cores": os.cpu_count(), "variety": {}, "types": {}}
    for seed in range(4):
        out["variety"][seed] = v = variety(args.programs, seed)
        print(f"seed {seed}: {v['texts']} distinct texts, {v['shapes']} distinct shapes of {v['programs']}")
    world = PythonWorld()
    try:
        for task_type in TASK_TYPES:
            held = world.heldout_set(task_type, 100, 9002)
            start = time.perf_counter()
            tasks = world.generate(task_type, args.tasks, 0, exclude={t.program for t in held})
            seconds = time.perf_counter() - start
            shared = {program_shape(t.program) for t in held} & {program_shape(t.program) for t in tasks}
            out["types"][task_type] = {"tasks": len(tasks), "seconds": round(seconds, 2),
                                       "heldout_programs_in_training": len({t.program for t in held} &
                                                                           {t.program for t in tasks}),
                                       "heldout_shapes_in_training": len(shared)}
            print(f"{task_type}: {len(tasks)} tasks in {seconds:.1f} s; of 100 held-out programs, "
                  f"{len(shared)} share a shape with a training task")
    finally:
        world.close()
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
