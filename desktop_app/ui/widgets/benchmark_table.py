"""How the Evaluate view's table writes standard benchmarks' figures: one column per task and metric ("arc_easy
acc_norm"), each cell "value ± standard error", the items and few-shot count in its tooltip; and the rows of
differences against each model's base (the engine's baselines.differences decides which base and computes them).

The keys are the engine's (contract of issue 40): `bench/{task}/{metric}` (a float), `bench/{task}/{metric}/stderr`
(a float or None), `bench/{task}/items` and `bench/{task}/fewshot` (ints), and `benchmark_harness`."""

from __future__ import annotations

import math
from typing import Any

PREFIX = "bench/"
CELL_KEYS = ("items", "fewshot")  # a task's counts: said in its cells' tooltips, no columns of their own


def is_bench(column: str) -> bool:
    return column.startswith(PREFIX)


def in_cell_only(key: str) -> bool:
    """A benchmark key shown inside another column's cell (a standard error, a task's item and few-shot counts)."""
    if not is_bench(key):
        return False
    parts = key[len(PREFIX):].split("/")
    return parts[-1] == "stderr" or (len(parts) == 2 and parts[-1] in CELL_KEYS)


def split_column(column: str) -> tuple[str, str]:
    """"bench/arc_easy/acc_norm" -> ("arc_easy", "acc_norm"); a filter stays in the metric ("exact_match[strict]")."""
    task, _, metric = column[len(PREFIX):].rpartition("/")
    return task, metric


def bench_label(column: str) -> str:
    """A column's header: the task and its metric in words a harness user knows."""
    task, metric = split_column(column)
    return f"{task} {metric}"


def number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(float(value)):
        return None
    return float(value)


def bench_cell(metrics: dict[str, Any], column: str) -> str:
    """"0.512 ± 0.011": the harness's figure and its standard error (the figure alone when the harness gives none)."""
    value = number(metrics.get(column))
    if value is None:
        return ""
    stderr = number(metrics.get(f"{column}/stderr"))
    return f"{value:.3f} ± {stderr:.3f}" if stderr is not None else f"{value:.3f}"


def bench_tip(metrics: dict[str, Any], column: str) -> str:
    """What the figure was measured on: items, worked examples, the harness's version."""
    task, metric = split_column(column)
    items, fewshot = metrics.get(f"{PREFIX}{task}/items"), metrics.get(f"{PREFIX}{task}/fewshot")
    parts = [f"{task}: {metric}"]
    if isinstance(items, int):
        parts.append(f"{items:,} items")
    if isinstance(fewshot, int):
        parts.append(f"{fewshot}-shot")
    if metrics.get(f"{column}/stderr") is not None:
        parts.append("± its standard error")
    if metrics.get("benchmark_harness"):
        parts.append(f"scored by {metrics['benchmark_harness']}")
    return ", ".join(parts)


def delta_text(difference: Any) -> str:
    """A difference against the base, signed: "+0.012", "−0.034" ("" when there is none)."""
    value = number(difference)
    if value is None:
        return ""
    if value == 0:
        return "0"
    return f"{value:+.3g}".replace("-", "−")
