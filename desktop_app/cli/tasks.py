"""`tasks`: generate verifiable tasks of a task world as JSON lines (training tasks, e.g. GRPO prompts; or, with
--heldout, the held-out set `eval` reports). Training tasks leave out the held-out protocol's programs (the `eval`
verb's set and self-play's selection set), so a model trained on them is measured on programs it never saw."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from desktop_app.engine.errors import UserError
from desktop_app.engine.fileio import atomic_write_text
from desktop_app.engine.tasks import get_world
from desktop_app.engine.tasks.heldout_protocol import REPORTED_SEED, HeldoutProtocol, heldout_tasks


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--world", choices=("mini", "python"), default="mini", help="task world (default mini)")
    parser.add_argument("--type", dest="task_type", choices=("deduction", "abduction", "induction"),
                        default="deduction", help="task type (default deduction)")
    parser.add_argument("--count", type=int, default=100, metavar="N", help="how many tasks (default 100)")
    parser.add_argument("--seed", type=int, default=0, metavar="S", help="the same seed gives the same tasks")
    parser.add_argument("--heldout", action="store_true",
                        help="write the held-out set `eval` reports (seed 9002 unless --seed is given) instead of "
                             "training tasks; never train on it")
    parser.add_argument("--out", metavar="FILE", help="write to this file instead of stdout")
    parser.add_argument("--json", action="store_true", help="JSON lines (the default output; kept for scripts)")


def run(args: argparse.Namespace) -> int:
    if not 1 <= args.count <= 1_000_000:
        raise UserError("--count must be between 1 and 1,000,000")
    world = get_world(args.world)
    try:
        if args.heldout:
            tasks = heldout_tasks(world, args.task_type, args.count, args.seed or REPORTED_SEED)
        else:
            reserved = HeldoutProtocol(world, selection_size=world.heldout_size).reserved
            tasks = world.generate(args.task_type, args.count, args.seed, exclude=reserved)
        lines = []
        for task in tasks:
            record = {"program": task.program, "input": task.inputs[0], "output": task.outputs[0],
                      "prompt": world.solve_prompt(task), "answer": world.reference_answer(task), **task.to_json()}
            lines.append(json.dumps(record))
    finally:
        world.close()
    text = "".join(line + "\n" for line in lines)
    if args.out:
        atomic_write_text(Path(args.out), text)
        what = "held-out" if args.heldout else "training (held-out programs left out)"
        print(f"wrote {len(lines)} {args.world} {args.task_type} {what} tasks to {args.out}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
