"""What the window's settings search runs in the background runner's worker thread (no Qt): an opened sweep's events
(engine/sweep/runner.py), and a time budget kept around them.

A time budget: no trial starts once it is spent; the trial running then finishes (a hopeless one is stopped earlier
by the pruner anyway), so every trial the search ran has its verdict. The sweep's last event then says the budget
ended it, not a Stop.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator
from typing import Any

from desktop_app.engine.events import Controls, Event, Finished
from desktop_app.engine.sweep.events import TrialFinished

SWEEP_KIND = "sweep"  # the background runner's kind of a search: one at a time


def sweep_job(sweep: Any, controls: Controls, budget_s: float = 0.0,
              clock: Callable[[], float] = time.monotonic) -> Iterator[Event]:
    """`sweep.events` (interactive: a core is left to the window), ended after the trial during which `budget_s`
    seconds ran out (0: no budget, the sweep's trials count alone)."""
    start, spent = clock(), False
    for event in sweep.events(controls, interactive=True):
        if (budget_s > 0 and isinstance(event, TrialFinished) and not controls.stop.is_set()
                and clock() - start >= budget_s):
            spent = True
            controls.stop.set()  # checked before the next trial starts: this one has its verdict already
        if spent and isinstance(event, Finished):
            event = dataclasses.replace(event, reason="completed", message=budget_words(budget_s, event.result))
        yield event


def budget_words(budget_s: float, result: dict[str, Any]) -> str:
    """How a sweep the time budget ended stands: its trials by verdict and its best trial."""
    judged = sum(int(result.get(k, 0) or 0) for k in ("complete", "pruned", "failed"))
    text = (f"the time budget of {budget_s / 60:g} min is spent: {judged} trials ({result.get('pruned', 0)} pruned, "
            f"{result.get('failed', 0)} failed), {result.get('steps', 0)} steps in all")
    best = result.get("best")
    if best:
        text += f"; best trial {best['number']}: {best.get('metric', '')} {best['value']:.6g}"
    return text
