"""The Library's Compare…: two runs selected, one plot per metric with both runs' curves, a legend naming what
differs, the final and best figures, and the run.json settings that differ highlighted."""

from __future__ import annotations

from compare_runs import write_run
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor

from desktop_app.ui.widgets.compare_view import HIGHLIGHT


def _select_also(lib, name: str) -> None:
    """Ctrl+click on another run: it joins the selection."""
    (item,) = lib.tree.findItems(name, Qt.MatchFlag.MatchExactly | Qt.MatchFlag.MatchRecursive, 0)
    item.setSelected(True)


def _row(table, first: str, figure: str | None = None) -> list[str]:
    for r in range(table.rowCount()):
        cells = [table.item(r, c).text() if table.item(r, c) else "" for c in range(table.columnCount())]
        if cells[0] == first and (figure is None or cells[1] == figure):
            return cells
    raise AssertionError(f"no row {first!r} {figure!r}")


def test_two_selected_runs_compared_in_plots_figures_and_settings(window, workspace, qtbot):
    runs = workspace.folder("runs")
    fast = write_run(runs / "fast", lr=3e-3, losses=[4.0, 2.0, 3.0, 2.5])
    slow = write_run(runs / "slow", lr=3e-4, losses=[4.0, 3.9, 3.8, 3.7])
    window.ctx.workspace_items_changed.emit()
    lib = window.library_tab
    window.tabs.setCurrentWidget(lib)
    assert lib.select(str(fast)) and not lib.compare_btn.isEnabled()  # one run: nothing to compare yet
    _select_also(lib, "slow")
    assert lib.selected_runs() == [str(fast), str(slow)] and lib.compare_btn.isEnabled()
    lib.compare_btn.click()  # the metrics are read in the background: the button waits, the window does not
    assert lib.compare_btn.text() == "Comparing…" and not lib.compare_btn.isEnabled()
    qtbot.waitUntil(lambda: lib.compare_dialog is not None, timeout=10000)
    dialog = lib.compare_dialog
    assert dialog.isVisible() and window.ctx.errors == []
    qtbot.waitUntil(lambda: lib.compare_btn.isEnabled(), timeout=5000)
    assert lib.compare_btn.text() == "Compare…"
    view = dialog.view
    assert list(view.plots)[:2] == ["loss", "val_loss"]
    for name in ("loss", "val_loss", "lr"):
        assert len(view.curves[name]) == 2  # both runs' curves on each plot, each with its points
        assert all(len(curve.getData()[0]) > 0 for curve in view.curves[name])
    assert list(view.curves["loss"][0].getData()[1]) == [4.0, 2.0, 3.0, 2.5]
    legend = [label.text for _sample, label in view.legends["loss"].items]
    assert legend == ["lr=0.003 (fast)", "lr=3e-4 (slow)"]
    assert _row(view.figures, "Training loss", "final")[2:] == ["2.5  (step 4)", "3.7  (step 4)"]
    best = _row(view.figures, "", "best (lowest)")
    assert best[2:] == ["2  (step 2)", "3.7  (step 4)"]
    lr_row = _row(view.settings, "train.lr")
    assert lr_row[1:] == ["0.003", "3e-4"]
    settings = view.settings
    highlighted = [settings.item(r, 0).text() for r in range(settings.rowCount())
                   if settings.item(r, 0).background().color() == QColor(HIGHLIGHT)]
    assert highlighted == ["train.lr"]  # only what differs; the same settings listed below, plain
    assert settings.rowCount() > 10 and view.tables.tabText(1) == "Settings (run.json): 1 differ"
    dialog.close()


def test_a_run_without_metrics_is_reported_and_opens_nothing(window, workspace, qtbot):
    runs = workspace.folder("runs")
    fast = write_run(runs / "fast", lr=3e-3)
    empty = write_run(runs / "empty", lr=1e-3)
    (empty / "metrics.jsonl").unlink()
    window.ctx.workspace_items_changed.emit()
    lib = window.library_tab
    lib.select(str(fast))
    _select_also(lib, "empty")
    assert lib.compare_btn.isEnabled()
    lib.open_compare()
    qtbot.waitUntil(lambda: any("has no training metrics yet" in str(e) for e in window.ctx.errors), timeout=10000)
    qtbot.waitUntil(lambda: lib.compare_btn.isEnabled(), timeout=5000)
    assert lib.compare_dialog is None  # nothing opened
    assert (empty / "run.json").is_file() and (fast / "metrics.jsonl").is_file()  # nothing touched
