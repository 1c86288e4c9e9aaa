"""`runs`: training runs side by side.

    python -m desktop_app runs compare RUN RUN [RUN ...] [--metric NAME] [--json]

`compare` prints each metric's final and best figures per run (best: the lowest loss, the highest reward or
accuracy; none for a learning rate) and the run.json settings that differ, each run headed by what differs
("lr=3e-4"). --json prints one object: {"runs": [{"path", "name", "label", "legend"}], "differences": [{"key",
"values"}], "metrics": [{"name", "better", "runs": [{"final", "final_step", "best", "best_step", "steps",
"values"}]}]}. The comparison is the engine's (engine/run_compare.py); this module prints it.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from desktop_app.engine.run_compare import compare_runs, number_text, value_text

WORDS = {"min": "best (lowest)", "max": "best (highest)"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    compare = actions.add_parser("compare", help="final and best figures of several runs, and how their settings "
                                 "differ", description="Compare training runs: each metric's final and best "
                                 "figures per run and the run.json settings that differ.")
    compare.add_argument("runs", nargs="+", metavar="RUN", help="run folders (two or more), e.g. WORKSPACE/runs/NAME")
    compare.add_argument("--metric", metavar="NAME", help="only this metric (e.g. loss, val_loss, reward)")
    compare.add_argument("--json", action="store_true", help="print the comparison as one JSON object (with the "
                         "curves)")


def run(args: argparse.Namespace) -> int:
    result = compare_runs(args.runs, metric=args.metric)
    if args.json:
        print(json.dumps(result.to_dict()))
        return 0
    print(comparison_text(result))
    return 0


def comparison_text(result: Any) -> str:
    """The runs, a table of final and best figures, and the settings that differ."""
    heads = [f"{i}. {r.name}" for i, r in enumerate(result.runs, start=1)]
    lines = ["runs compared:", table([], [[f"  {head}", run.label if run.label != run.name else "(same settings)",
                                            run.path] for head, run in zip(heads, result.runs, strict=True)])]
    rows = []
    for metric in result.metrics:
        finals = [_figure(c.final()) for c in metric.curves]
        rows.append([metric.name, "final", *finals])
        if metric.better:
            rows.append(["", WORDS[metric.better], *(_figure(c.best(metric.better)) for c in metric.curves)])
    lines += ["", table(["metric", "", *heads], rows)]
    if result.differences:

        diff_rows = [[key, *(value_text(v) for v in values)] for key, values in result.differences.items()]
        lines += ["", table(["setting that differs (run.json)", *heads], diff_rows)]
    else:
        lines += ["", "run.json: every setting is the same in these runs"]
    return "\n".join(lines)


def _figure(point: tuple[int, float] | None) -> str:
    return "—" if point is None else f"{number_text(point[1])} (step {point[0]})"


def table(header: list[str], rows: list[list[str]]) -> str:
    """Columns padded to their widest cell."""
    lines = [header, *rows] if header else rows
    widths = [max(len(r[i]) for r in lines) for i in range(len(lines[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in lines)
