"""The settings search's plots: the optimisation history (each trial's value, the best so far) and each varied
setting's effect (the value against the setting: a log axis where the range is a log scale, the values' names along
the axis of a choice). Complete trials are dots; pruned ones hollow grey dots (the figure they stopped at, judged
early); failed and running trials have no value to show.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from PySide6.QtWidgets import QGridLayout, QScrollArea, QWidget

from desktop_app.engine.sweep.events import COMPLETE, PRUNED
from desktop_app.engine.sweep.goal import MINIMIZE
from desktop_app.engine.sweep.space import Dimension
from desktop_app.ui import theme
from desktop_app.ui.sweep_rows import word
from desktop_app.ui.widgets.live_plot import TITLE_COLOR, WheelToPage, log_tick_strings, pg

PLOT_HEIGHT = 200
COLUMNS = 3
PRUNED_COLOR = "#9ca3af"


@dataclass
class TrialRecord:
    """What the view knows of one trial."""

    number: int
    params: dict[str, Any] = field(default_factory=dict)
    value: float | None = None
    state: str = "running"
    message: str = ""
    step: int = 0


class SweepPlots(QScrollArea):
    """The history plot, then one plot per varied setting, three to a row; the page scrolls (Ctrl+wheel zooms)."""

    def __init__(self, dims: list[Dimension], labels: dict[str, str], metric_words: str, direction: str,
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.dims, self.direction = dims, direction
        self.wheel = WheelToPage(self)
        page = QWidget()
        grid = QGridLayout(page)
        grid.setContentsMargins(0, 0, 0, 0)
        self.history = self._plot("Optimisation history", "trial", metric_words)
        self.done_dots = self.history.plot([], [], name="complete", **_dots(theme.PLOT_COLORS[0]))
        self.pruned_dots = self.history.plot([], [], name="pruned", **_dots(PRUNED_COLOR, hollow=True))
        self.best_line = self.history.plot([], [], name="best so far", pen=pg().mkPen(theme.PLOT_COLORS[2], width=2))
        self._legend(self.history, (self.done_dots, self.pruned_dots, self.best_line))
        grid.addWidget(self.history, 0, 0)
        self.effects: dict[str, tuple[Any, Any, Any]] = {}  # path -> (plot, complete dots, pruned dots)
        for i, dim in enumerate(dims, start=1):
            plot = self._plot(labels.get(dim.path, dim.name), labels.get(dim.path, dim.name), metric_words)
            if dim.log:
                plot.setLogMode(x=True, y=False)
                axis = plot.getAxis("bottom")
                axis.enableAutoSIPrefix(False)  # "0.001", not "1 (x0.001)" in a corner
                axis.logTickStrings = log_tick_strings
            if dim.choices:
                plot.getAxis("bottom").setTicks([[(j, word(c)) for j, c in enumerate(dim.choices)]])
            self.effects[dim.path] = (plot, plot.plot([], [], **_dots(theme.PLOT_COLORS[0])),
                                      plot.plot([], [], **_dots(PRUNED_COLOR, hollow=True)))
            grid.addWidget(plot, i // COLUMNS, i % COLUMNS)
        for column in range(COLUMNS):
            grid.setColumnStretch(column, 1)
        self.setWidgetResizable(True)
        self.setFrameShape(QScrollArea.Shape.NoFrame)
        self.setWidget(page)

    def _plot(self, title: str, x_label: str, y_label: str) -> Any:
        plot = pg().PlotWidget()
        plot.setMinimumHeight(PLOT_HEIGHT)
        plot.setMinimumWidth(220)
        plot.setTitle(title, color=TITLE_COLOR, size="10pt")
        plot.setLabel("bottom", x_label)
        plot.setLabel("left", y_label)
        plot.showGrid(x=True, y=True, alpha=0.15)
        plot.viewport().installEventFilter(self.wheel)
        return plot

    @staticmethod
    def _legend(plot: Any, items: tuple[Any, ...]) -> None:
        """Under the plot, never over its points."""
        legend = pg().LegendItem(labelTextSize="8pt", colCount=len(items))
        plot.getPlotItem().layout.addItem(legend, 4, 0, 1, 3)
        for item in items:
            legend.addItem(item, item.name())

    def show_trials(self, trials: list[TrialRecord]) -> None:
        """Draw every trial that has a value, by its number."""
        shown = [t for t in sorted(trials, key=lambda t: t.number) if _finite(t.value) and t.state in (COMPLETE,
                                                                                                      PRUNED)]
        done = [t for t in shown if t.state == COMPLETE]
        pruned = [t for t in shown if t.state == PRUNED]
        self.done_dots.setData([t.number for t in done], [t.value for t in done])
        self.pruned_dots.setData([t.number for t in pruned], [t.value for t in pruned])
        self.best_line.setData(*self.best_so_far(done))
        for dim in self.dims:
            _plot, done_item, pruned_item = self.effects[dim.path]
            done_item.setData(*self._effect(dim, done))
            pruned_item.setData(*self._effect(dim, pruned))

    def best_so_far(self, done: list[TrialRecord]) -> tuple[list[int], list[float]]:
        xs, ys, best = [], [], None
        for t in done:
            assert t.value is not None
            if best is None or (t.value < best if self.direction == MINIMIZE else t.value > best):
                best = t.value
            xs.append(t.number)
            ys.append(best)
        return xs, ys

    @staticmethod
    def _effect(dim: Dimension, trials: list[TrialRecord]) -> tuple[list[float], list[float]]:
        xs, ys = [], []
        for t in trials:
            value = t.params.get(dim.path)
            if dim.choices:
                if value not in dim.choices:
                    continue
                value = dim.choices.index(value)
            if isinstance(value, (int, float)) and (not dim.log or value > 0):
                xs.append(float(value))
                ys.append(float(t.value))  # type: ignore[arg-type]
        return xs, ys

    def history_points(self) -> list[tuple[int, float]]:
        """(trial, value) of the dots of the history plot, complete then pruned (for tests and a screen reader)."""
        out = []
        for item in (self.done_dots, self.pruned_dots):
            xs, ys = item.getData()
            out += [(int(x), float(y)) for x, y in zip(xs if xs is not None else [], ys if ys is not None else [],
                                                       strict=True)]
        return out


def _dots(color: str, *, hollow: bool = False) -> dict[str, Any]:
    return dict(pen=None, symbol="o", symbolSize=8, symbolPen=pg().mkPen(color, width=1.5),
                symbolBrush=None if hollow else pg().mkBrush(color))


def _finite(value: float | None) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)
