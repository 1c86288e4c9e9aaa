"""The Evaluate view (Library → Evaluate…): pick models and evaluations, run in the background with a progress bar,
read one table and a bar plot; results kept in the run folder and shown again when the view opens later."""

from __future__ import annotations

import json

from PySide6.QtCore import Qt

from desktop_app.engine.evaluate.results import RESULTS_FILE


def _ready(window, populated_workspace):
    window.ctx.workspace_items_changed.emit()
    return populated_workspace.folder("runs") / "tiny-run"


def _cell(view, row: int, header: str) -> str:
    headers = [view.table.horizontalHeaderItem(c).text() for c in range(view.table.columnCount())]
    return view.table.item(row, headers.index(header)).text()


def test_evaluate_a_library_run_and_see_it_again_later(window, populated_workspace, qtbot):
    run = _ready(window, populated_workspace)
    lib = window.library_tab
    assert lib.select(str(run)) and lib.evaluate_btn.isEnabled()
    dialog = lib.open_evaluate()
    view = dialog.view
    assert view.checked_models() == [str(run)] and view.table.rowCount() == 0  # never measured yet
    view.form.set_values({"world": "mini", "per_type": 4, "task_types": ["deduction", "abduction"],
                          "text": [str(populated_workspace.folder("datasets") / "tiny-data")],
                          "max_text_bytes": 800})
    assert view.start()
    assert not view.run_btn.isEnabled() and view.stop_btn.isEnabled()
    qtbot.waitUntil(lambda: not view.running(), timeout=120000)
    assert not window.ctx.errors, window.ctx.errors
    assert view.table.rowCount() == 1 and view.progress.value() == 1000
    rate = float(_cell(view, 0, "solve_rate/deduction").split()[0])
    assert 0.0 <= rate <= 1.0 and "(" in _cell(view, 0, "solve_rate/deduction")  # with its 95% interval
    assert float(_cell(view, 0, "bits_per_byte")) > 0
    assert view.plotted(["solve_rate/deduction", "solve_rate/abduction", "bits_per_byte"]) == [
        "solve_rate/deduction", "solve_rate/abduction"]
    saved = json.loads((run / RESULTS_FILE).read_text(encoding="utf-8"))["results"]
    assert saved[-1]["metrics"]["solve_rate/deduction"] == rate
    dialog.close()
    # later: the view shows what was measured, without running anything
    again = lib.open_evaluate().view
    assert again.table.rowCount() == 1 and float(_cell(again, 0, "solve_rate/deduction").split()[0]) == rate
    # unticking the model empties the table; evaluating nothing is refused with a message
    again.model_list.item(next(i for i in range(again.model_list.count())
                               if again.model_list.item(i).data(Qt.ItemDataRole.UserRole) == str(run))
                          ).setCheckState(Qt.CheckState.Unchecked)
    assert again.table.rowCount() == 0
    assert not again.start() and "at least one model" in window.ctx.errors[-1][0]
    lib.evaluate_dialog.close()


def test_bad_evaluation_settings_are_shown_and_nothing_runs(window, populated_workspace, qtbot):
    run = _ready(window, populated_workspace)
    view = window.library_tab.open_evaluate().view if window.library_tab.select(str(run)) else None
    view.form.set_values({"world": "none", "qa": "", "text": []})
    assert not view.start()
    assert "nothing to evaluate" in view.form.problems.text() and not view.running()
    assert not (run / RESULTS_FILE).exists()
    window.library_tab.evaluate_dialog.close()
