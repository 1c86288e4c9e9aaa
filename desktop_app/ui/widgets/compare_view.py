"""Runs compared side by side (the Library's Compare… button): one plot per metric with every run's curve, a legend
naming each run by what differs ("lr=3e-4 (run name)"), a table of final and best figures (the best run's figure in
bold), and the run.json settings, those that differ first and highlighted.

Everything shown comes from engine/run_compare.py (the same comparison `runs compare` prints); this module draws it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtGui import QBrush, QColor, QFont
from PySide6.QtWidgets import (
    QDialog,
    QGridLayout,
    QHeaderView,
    QLabel,
    QScrollArea,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from desktop_app.engine.run_compare import RunComparison, compare_runs, number_text, value_text
from desktop_app.ui import theme
from desktop_app.ui.background import Task
from desktop_app.ui.context import AppContext
from desktop_app.ui.widgets.layouts import add_items, splitter
from desktop_app.ui.widgets.live_plot import WheelToPage, curve_style, pg, readable

HIGHLIGHT = "#fef3c7"  # a setting that differs: pale amber, the text stays dark and readable
PLOT_COLUMNS = 2
PLOT_HEIGHT = 230
COLUMN_MAX_WIDTH = 320
EVAL_PREFIXES = ("val_", "eval_", "heldout_")  # evaluated now and then: dots on the line
BETTER_WORDS = {"min": "lower is better", "max": "higher is better"}
# Titles in words for the usual metrics; another metric's title is its name made readable.
TITLES = {"loss": "Training loss", "val_loss": "Validation loss", "lr": "Learning rate", "grad_norm": "Gradient norm",
          "tokens_per_s": "Training speed (tokens / s)", "mfu": "Model FLOPs utilisation",
          "val_ppl": "Validation perplexity", "val_bpb": "Validation bits per byte"}
COMPARE_TIP = "Select two runs or more (Ctrl+click or Shift+click) to see their curves on the same plots"


def title_of(metric: str) -> str:
    return TITLES.get(metric, readable(metric))


def color_of(index: int) -> str:
    return theme.PLOT_COLORS[index % len(theme.PLOT_COLORS)]


class CompareView(QWidget):
    """Plots, figures and settings of a RunComparison."""

    def __init__(self, result: RunComparison, parent: QWidget | None = None):
        super().__init__(parent)
        self.result = result
        self.plots: dict[str, Any] = {}  # metric -> its PlotWidget
        self.curves: dict[str, list[Any]] = {}  # metric -> each run's curve
        self.legends: dict[str, Any] = {}
        self.wheel = WheelToPage(self)
        differ = len(result.differences)
        same = ". Their settings are the same."
        heading = QLabel(f"{len(result.runs)} runs: " + ", ".join(r.name for r in result.runs) + (
            f". {differ} setting(s) differ: highlighted under Settings." if differ else same))
        heading.setWordWrap(True)
        heading.setProperty("role", "muted")
        self.figures = self._figures_table()
        self.settings = self._settings_table()
        self.tables = QTabWidget()
        self.tables.addTab(self.figures, "Final and best figures")
        self.tables.addTab(self.settings, f"Settings (run.json): {len(result.differences)} differ")
        split = splitter(Qt.Orientation.Vertical, [self._plots_page(), self.tables], stretch=(3, 2),
                         sizes=(430, 230))
        add_items(QVBoxLayout(self), heading, (split, 1), margins=6)

    def _plots_page(self) -> QScrollArea:
        page = QWidget()
        grid = QGridLayout(page)
        for i, metric in enumerate(self.result.metrics):
            grid.addWidget(self._plot(metric), i // PLOT_COLUMNS, i % PLOT_COLUMNS)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(page)
        return scroll

    def _plot(self, metric: Any) -> Any:
        """One metric: every run's curve in its colour, the legend under the plot (off the curves)."""
        widget = pg().PlotWidget()
        widget.setMinimumHeight(PLOT_HEIGHT + 16 * len(self.result.runs))
        widget.viewport().installEventFilter(self.wheel)  # the wheel scrolls the page; Ctrl+wheel zooms
        way = BETTER_WORDS.get(metric.better, "")
        widget.setTitle(title_of(metric.name) + (f" <span style='color:#6b7280'>({way})</span>" if way else ""),
                        color="#111827", size="10pt")
        widget.setLabel("bottom", "step")
        widget.showGrid(x=True, y=True, alpha=0.15)
        legend = pg().LegendItem(labelTextSize="8pt", verSpacing=-6)
        widget.getPlotItem().layout.addItem(legend, 4, 0, 1, 3)
        dots = metric.name.startswith(EVAL_PREFIXES)
        curves = []
        for i, (run, curve) in enumerate(zip(self.result.runs, metric.curves, strict=True)):
            item = widget.plot(curve.steps, curve.values, **curve_style(color_of(i), dots=dots))
            legend.addItem(item, run.legend)
            curves.append(item)
        self.plots[metric.name], self.curves[metric.name], self.legends[metric.name] = widget, curves, legend
        return widget

    def _figures_table(self) -> QTableWidget:
        """A row per metric and figure (final, best), a column per run; the leading run's figure in bold."""
        runs = self.result.runs
        rows = [(m, fig) for m in self.result.metrics for fig in (("final", "best") if m.better else ("final",))]
        table = _table(len(rows), ["Metric", "Figure"], runs)
        table.setObjectName("compareFigures")
        for row, (metric, figure) in enumerate(rows):
            table.setItem(row, 0, QTableWidgetItem(title_of(metric.name) if figure == "final" else ""))
            words = "final" if figure == "final" else f"best ({'lowest' if metric.better == 'min' else 'highest'})"
            table.setItem(row, 1, QTableWidgetItem(words))
            leader = metric.leader(figure)
            for i, curve in enumerate(metric.curves):
                point = curve.final() if figure == "final" else curve.best(metric.better)
                cell = QTableWidgetItem("—" if point is None else f"{number_text(point[1])}  (step {point[0]})")
                cell.setToolTip("" if point is None else f"{point[1]!r} at step {point[0]}")
                if leader == i:
                    _bold(cell)
                table.setItem(row, 2 + i, cell)
        _fit_columns(table)
        return table

    def _settings_table(self) -> QTableWidget:
        """Every run.json setting, a column per run: those that differ first, highlighted; the same ones below."""
        result = self.result
        keys = list(result.differences) + [k for k in result.settings if k not in result.differences]
        table = _table(len(keys), ["Setting"], result.runs)
        table.setObjectName("compareSettings")
        for row, key in enumerate(keys):
            differs = key in result.differences
            cells = [QTableWidgetItem(key), *(QTableWidgetItem(value_text(v)) for v in result.settings[key])]
            for column, cell in enumerate(cells):
                if differs:
                    cell.setBackground(QBrush(QColor(HIGHLIGHT)))
                    _bold(cell)
                    cell.setToolTip("differs between the runs")
                table.setItem(row, column, cell)
        _fit_columns(table)
        return table


def _table(rows: int, header: list[str], runs: list[Any]) -> QTableWidget:
    """A read-only table: `header`'s columns, then one per run headed by its name over what differs."""
    table = QTableWidget(rows, len(header) + len(runs))
    table.setHorizontalHeaderLabels(header + [r.name if r.label == r.name else f"{r.name}\n{r.label}" for r in runs])
    for i, run in enumerate(runs):
        table.horizontalHeaderItem(len(header) + i).setToolTip(f"{run.legend}\n{run.path}")
    table.verticalHeader().setVisible(False)
    table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
    header = table.horizontalHeader()
    header.setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
    header.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)  # cut: keeps its start
    header.setTextElideMode(Qt.TextElideMode.ElideRight)
    header.setStretchLastSection(True)
    return table


def _fit_columns(table: QTableWidget) -> None:
    """Columns as wide as their text, up to COLUMN_MAX_WIDTH (a long label is whole in the header's tooltip)."""
    table.resizeColumnsToContents()
    for column in range(table.columnCount()):
        table.setColumnWidth(column, min(table.columnWidth(column), COLUMN_MAX_WIDTH))


def _bold(cell: QTableWidgetItem) -> None:
    font = QFont(cell.font())
    font.setBold(True)
    cell.setFont(font)


class CompareDialog(QDialog):
    """The comparison in a window of its own."""

    def __init__(self, result: RunComparison, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle(f"Compare runs ({len(result.runs)})")
        self.resize(1200, 720)
        self.view = CompareView(result, self)
        add_items(QVBoxLayout(self), self.view, margins=0)


def open_compare(ctx: AppContext, runs: list[str], parent: QWidget | None = None,
                 opened: Callable[[CompareDialog], None] | None = None) -> Task:
    """Compare `runs` in a new window once their metrics are read (in the background: a long run's metrics.jsonl
    takes seconds); `opened` gets the dialog. A comparison the engine refuses (one run, a run with no metrics yet) is
    reported in its words and opens nothing."""

    def show(result: RunComparison) -> None:
        dialog = CompareDialog(result, parent)
        dialog.show()
        if opened is not None:
            opened(dialog)

    task = ctx.runner.start("compare", lambda: [compare_runs(runs)])
    task.produced.connect(show)
    task.failed.connect(lambda message, details: ctx.report_error(message, details, title="Compare runs"))
    return task
