"""The Library's sweeps (settings searches): a group of the workspace's sweeps/ folder, each sweep with its trials'
runs under it (SWEEP/trials/trial-NNNN, engine/sweep_folder.py), the best one marked. A trial's run is a run like any
other: its row acts as the Runs' rows do (Show in plots, Resume, Generate, Export, Evaluate), and trial runs selected
together (Ctrl+click) go to Compare…. Read from the folders alone (sweep.json, best.json, the runs): the study's
database is not opened here.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtWidgets import QTreeWidget, QTreeWidgetItem

from desktop_app.engine.methods import method_of
from desktop_app.engine.run_folder import is_run_folder, read_json
from desktop_app.engine.specs import RunConfig
from desktop_app.engine.sweep_folder import SWEEP_FILE, TRIALS_DIR, is_sweep_dir, read_best, read_trial
from desktop_app.ui.widgets.tree_groups import group_item

SWEEPS_KIND = "sweeps"
BEST_MARK = " (best)"


def word(value: Any) -> str:
    """A setting's value or a figure, short."""
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def trial_runs(sweep_dir: Path) -> list[Path]:
    """The sweep's trials that have a run, by number."""
    folder = sweep_dir / TRIALS_DIR
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir() and is_run_folder(p))


def add_sweep_group(tree: QTreeWidget, sweeps: list[Path], make_item: Callable[[Path, str], QTreeWidgetItem | None],
                    columns: tuple[int, int]) -> QTreeWidgetItem | None:
    """A "Sweeps (N)" group right after the Runs group (none without sweeps): each sweep (kind "sweeps"), its trial
    runs (kind "runs", made by `make_item` as the Runs' rows are) under it; `columns`: (method, status)."""
    sweeps = [p for p in sweeps if is_sweep_dir(p)]
    if not sweeps:
        return None
    top = group_item(tree, "Sweeps", len(sweeps))
    tree.insertTopLevelItem(1, tree.takeTopLevelItem(tree.indexOfTopLevelItem(top)))
    for i, sweep in enumerate(sweeps):
        item = make_item(sweep, SWEEPS_KIND)
        if item is None:
            continue
        top.addChild(item)
        best = read_best(sweep) or {}
        trials = trial_runs(sweep)
        for run in trials:
            child = make_item(run, "runs")
            if child is not None:
                _describe_trial(child, run, best)
                item.addChild(child)
        _describe_sweep(item, sweep, len(trials), columns)
        item.setExpanded(i == 0)  # the newest sweep open; the others one click away
    top.setExpanded(True)
    return top


def _describe_trial(item: QTreeWidgetItem, run: Path, best: dict[str, Any]) -> None:
    note = read_trial(run) or {}
    params = note.get("params") if isinstance(note.get("params"), dict) else {}
    settings = ", ".join(f"{k.rpartition('.')[2]}={word(v)}" for k, v in params.items())
    if str(best.get("run_dir", "")) == str(run):
        item.setText(0, item.text(0) + BEST_MARK)
    item.setToolTip(0, f"trial {note.get('trial', '?')}: {settings}\n{run}" if settings else str(run))


def _describe_sweep(item: QTreeWidgetItem, sweep: Path, trials: int, columns: tuple[int, int]) -> None:
    method_column, status_column = columns
    spec = read_json(sweep / SWEEP_FILE)
    spec = spec if isinstance(spec, dict) else {}
    try:
        item.setText(method_column, method_of(RunConfig.from_dict(spec.get("base") or {})).label.split(" (")[0])
    except Exception:  # a damaged sweep.json: the row still lists its trials
        item.setText(method_column, "")
    item.setText(status_column, f"{trials} of {spec.get('trials', '?')} trials")
    item.setToolTip(status_column, "trials that have a run, of the trials the sweep asks for")


def sweep_details_html(sweep: Path) -> str:
    """What a sweep searched, how far it got and its best trial, in words."""
    spec = read_json(sweep / SWEEP_FILE)
    spec = spec if isinstance(spec, dict) else {}
    metric = str(spec.get("metric", "val_loss"))
    rows = [("Settings searched", "; ".join(html.escape(str(v)) for v in spec.get("vary") or [])),
            ("Trials", f"{len(trial_runs(sweep))} with a run, of {spec.get('trials', '?')} asked for"),
            ("Judged by", html.escape(metric))]
    best = read_best(sweep)
    if best:
        way = "highest" if best.get("direction") == "maximize" else "lowest"
        settings = ", ".join(f"{k.rpartition('.')[2]}={word(v)}" for k, v in (best.get("params") or {}).items())
        rows.append(("Best trial", f"<b>{best.get('number')}</b>: {html.escape(metric)} "
                                   f"{word(best.get('value'))} ({way}) with {html.escape(settings)}"))
    cells = "".join(f"<tr><td style='color:#6b7280; padding-right:12px'>{k}</td><td>{v}</td></tr>" for k, v in rows)
    return (f"<table cellspacing='2'>{cells}</table><p>Its trials are runs: select several (Ctrl+click) and "
            f"Compare… to see their curves together. To continue it: <code>python -m desktop_app sweep --resume "
            f"{html.escape(str(sweep))}</code></p>")
