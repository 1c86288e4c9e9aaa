"""Live training curves: growing numpy buffers, ~100 ms timer-driven redraw, peak downsampling.

Any named scalar gets a curve: known names go to their panel (loss with val_loss, learning rate, gradient norm,
training speed...), each with a title and a y-axis label in words; an unknown one (reward, kl, ...) gets a panel of
its own. A panel appears only once it has something to show: a metric that is still 0 (a KL penalty that is off,
the epoch of a run with no epochs) is kept for the CSV but draws no empty, flat panel. A panel with several
curves has its legend under the plot, never over the curves. The panels flow in as many columns as the width takes;
the loss spans the width on top while the other panels fit in one row under it. Panels are short enough that a
method's panels fit a 1366x768 window without scrolling, and grow with the room there is.

The plots sit in a scrolling page: the mouse wheel scrolls the page, and zooms a plot only with Ctrl held. The step
axis never goes below 0 (dragging cannot show negative steps).
"""

from __future__ import annotations

import csv
import functools
import math
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEvent, QObject, Qt, QTimer
from PySide6.QtGui import QFont, QFontMetrics, QWheelEvent
from PySide6.QtWidgets import QApplication, QGridLayout, QScrollArea, QWidget

from desktop_app.engine.errors import UserError
from desktop_app.ui import theme

# Panels the "Log scale" toggle applies to (quantities spanning orders of magnitude).
LOG_SCALE_PANELS = ("loss", "lr", "grad_norm")
PANEL_MIN_WIDTH = 290  # narrower, a panel cuts its title and legend: fewer columns instead
# Panel heights at least: three rows of panels fit the ~345 px the curves get in a 1366x768 window.
PANEL_MIN_HEIGHT = 105
LOSS_MIN_HEIGHT = 150  # the loss on its own row, full width
LEGEND_ROW_HEIGHT = 16
ZOOM_MODIFIER = Qt.KeyboardModifier.ControlModifier  # the wheel zooms a plot only with it held
TITLE_COLOR = "#111827"


def pg() -> Any:
    """pyqtgraph (and numpy), imported on first use: ~0.4 s the window does not wait for at start-up."""
    import pyqtgraph

    if not getattr(pyqtgraph, "_azr_configured", False):
        pyqtgraph.setConfigOptions(antialias=False, background="w", foreground="#374151")
        pyqtgraph._azr_configured = True
    return pyqtgraph


# series name -> (panel key, panel title, y-axis label)
_PANELS = {
    "loss": ("loss", "Loss", "loss"),
    "train_loss": ("loss", "Loss", "loss"),
    "val_loss": ("loss", "Loss", "loss"),
    "lr": ("lr", "Learning rate", "learning rate"),
    "grad_norm": ("grad_norm", "Gradient norm (before clipping)", "norm"),
    "tokens_per_s": ("tokens_per_s", "Training speed", "tokens / s"),
    "mfu": ("mfu", "Model FLOPs utilisation", "share of peak"),
    "epoch": ("epoch", "Epochs over the data", "epochs"),
    "val_ppl": ("val_ppl", "Validation perplexity", "perplexity"),
    "val_bpb": ("val_bpb", "Validation bits per byte", "bits / byte"),
}
SMOOTHED = {"loss", "train_loss"}
# Reported, kept for the CSV, never a panel: the progress bar shows the first, the step axis tells the second.
NOT_PLOTTED = {"progress", "tokens"}
CURVE_LABELS = {"loss": "training", "train_loss": "training", "val_loss": "validation"}


def readable(name: str) -> str:
    """A metric's name as words, for panels nobody planned for ("val_acc" -> "Val acc")."""
    return name.replace("/", " / ").replace("_", " ").capitalize().replace(" per s", " / s")


def log_tick_strings(values: list[float], scale: float, spacing: float | None) -> list[str]:
    """Log-axis ticks as plain numbers (0.001, 0.5, 1, 10) rather than tiny superscripts. Of the in-between ticks
    (spacing None: 1, 2, ... 9 times a power of ten) only 1, 2 and 5 are labelled, and only across two decades or less:
    labelled all, they ran into each other."""
    out = []
    for v in values:
        x = (10 ** float(v)) * scale
        text = f"{x:.3g}" if 1e-4 <= abs(x) < 1e5 else f"{x:.0e}"
        if spacing is None:
            mantissa = round(x / 10 ** math.floor(math.log10(abs(x)))) if x else 0
            text = text if mantissa in (1, 2, 5) and len(values) <= 16 else ""
        out.append(text)
    return out


class WheelToPage(QObject):
    """An event filter for a plot's viewport: a wheel turn without Ctrl scrolls the page around the plot (the nearest
    QScrollArea above it) instead of zooming the plot under the pointer."""

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() != QEvent.Type.Wheel or event.modifiers() & ZOOM_MODIFIER:
            return False
        page = watched.parent()
        while page is not None and not isinstance(page, QScrollArea):
            page = page.parent()
        if page is None:
            event.ignore()  # no page: Qt offers an ignored wheel event to the widgets around
            return True
        turn = QWheelEvent(event.position(), event.globalPosition(), event.pixelDelta(), event.angleDelta(),
                           event.buttons(), event.modifiers(), event.phase(), event.inverted())
        QApplication.sendEvent(page.verticalScrollBar(), turn)
        return True


def curve_style(color: str, *, dots: bool = False) -> dict[str, Any]:
    """A curve's pyqtgraph style: a 2 px line, with a dot at each point for evaluation metrics (they come seldom,
    a lone one would not show as a line)."""
    style: dict[str, Any] = dict(pen=pg().mkPen(color, width=2))
    if dots:
        style.update(symbol="o", symbolSize=5, symbolBrush=color, symbolPen=None)
    return style


class Series:
    """x/y buffers that grow by doubling (amortised O(1) appends, no per-point Python lists)."""

    def __init__(self, capacity: int = 256):
        import numpy as np

        self.x = np.empty(capacity, dtype=np.float64)
        self.y = np.empty(capacity, dtype=np.float64)
        self.n = 0

    def append(self, x: float, y: float) -> None:
        if self.n == len(self.x):
            import numpy as np

            self.x = np.resize(self.x, 2 * self.n)
            self.y = np.resize(self.y, 2 * self.n)
        self.x[self.n] = x
        self.y[self.n] = y if math.isfinite(y) else math.nan  # NaN/Inf loss: a gap, never a crash
        self.n += 1

    def data(self) -> tuple[Any, Any]:
        return self.x[: self.n], self.y[: self.n]


@functools.cache
def step_axis_class() -> type:
    """pyqtgraph's bottom axis with whole steps only: a short run's axis reads 1, 2, 3, never 1.5."""

    class StepAxis(pg().AxisItem):
        def tickValues(self, minVal: float, maxVal: float, size: float) -> list:
            levels = super().tickValues(minVal, maxVal, size)
            return [(max(1.0, spacing), [v for v in values if float(v).is_integer()]) for spacing, values in levels]

    return StepAxis


def fit_unit(panel: Any, title: str, unit: str) -> None:
    """The y-axis label beside the plot when the plot is tall enough for all of it, else after the panel's title
    ("Model FLOPs utilisation · share of peak"): never cut to "are of peak"."""
    font = QFont()
    font.setPointSize(8)
    fits = QFontMetrics(font).horizontalAdvance(unit) + 8 <= panel.getViewBox().height()
    axis = panel.getAxis("left")
    if fits == axis.label.isVisible():
        return
    axis.showLabel(fits)
    said = unit.lower() in title.lower()  # "Validation perplexity": no "· perplexity" after it
    panel.setTitle(title if fits or said else f"{title} · {unit}", color=TITLE_COLOR, size="10pt")


class LivePlots(QWidget):
    def __init__(self, parent: QWidget | None = None, columns: int = 3):
        super().__init__(parent)
        self.max_columns = columns
        self.columns = columns
        self.series: dict[str, Series] = {}
        self.smoothed: dict[str, Series] = {}
        self._ema: dict[str, tuple[float, int]] = {}  # name -> (EMA, points in it) for the debiased average
        self.curves: dict[str, Any] = {}  # pyqtgraph PlotDataItems
        self.panels: dict[str, Any] = {}  # pyqtgraph PlotWidgets, in the order they appeared
        self._members: dict[str, list[tuple[Any, str]]] = {}  # panel key -> its curves and their legend labels
        self._legends: dict[str, Any] = {}
        self._dirty: set[str] = set()
        self.hidden: set[str] = set()  # series kept for the CSV but not drawn (see MethodPlots)
        self._wheel = WheelToPage(self)
        self._watching_viewport = False  # its scroll area's viewport, once inside one (see _fit_columns)
        self.smoothing = 0.6  # EMA weight of the past (0 = off)
        self.log_y = False
        self.redraws = 0
        self._grid = QGridLayout(self)
        self._grid.setContentsMargins(0, 0, 0, 0)
        self._grid.setSpacing(8)
        self._timer = QTimer(self)
        self._timer.setObjectName("azr-plot-redraw")
        self._timer.setInterval(100)
        self._timer.timeout.connect(self._redraw)

    def showEvent(self, event) -> None:
        super().showEvent(event)
        if not self.panels:  # after the window is up, not before
            QTimer.singleShot(0, self._default_panels)

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self._fit_columns()

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Resize and watched is self.parentWidget():
            self._fit_columns()  # the scroll area's viewport shrank: this widget may not, at its minimum width
        return super().eventFilter(watched, event)

    def _fit_columns(self) -> None:
        """As many columns as the width the panels can really have: the scroll area's viewport when inside one,
        so that a column never ends up past its right edge."""
        viewport = self.parentWidget()
        inside = viewport is not None and viewport.objectName() == "qt_scrollarea_viewport"
        if inside and not self._watching_viewport:
            viewport.installEventFilter(self)
            self._watching_viewport = True
        room = min(self.width(), viewport.width()) if inside else self.width()
        spacing = self._grid.spacing()
        columns = max(1, min(self.max_columns, (room + spacing) // (PANEL_MIN_WIDTH + spacing)))
        if columns != self.columns:
            self.columns = columns
            self._relayout()

    def _default_panels(self) -> None:
        # Empty panels up front: the window shows where curves will appear before a run starts.
        for name in ("loss", "lr", "grad_norm", "tokens_per_s"):
            self._panel(name)

    # --- where a metric goes ---
    def panel_meta(self, name: str) -> tuple[str, str, str]:
        """(panel key, title, y-axis label) of a metric."""
        return _PANELS.get(name, (name, readable(name), ""))

    def curve_label(self, name: str) -> str:
        return CURVE_LABELS.get(name, readable(name).lower())

    # --- data in ---
    def add_point(self, name: str, x: float, y: float) -> None:
        try:
            y = float(y)
        except (TypeError, ValueError):
            return
        s = self.series.get(name)
        if s is None:
            s = self.series[name] = Series()
        s.append(x, y)
        if name in SMOOTHED:
            self._append_smoothed(name, x, y)
        if name not in self.curves:
            # A panel only once there is something to show in it; a curve joins a panel that is already there.
            shown = self.panel_meta(name)[0] in self.panels or (math.isfinite(y) and y != 0)
            if name in NOT_PLOTTED or name in self.hidden or not shown:
                return
            self._ensure_curve(name)
        self._dirty.add(name)
        if not self._timer.isActive():
            self._timer.start()

    def add_metrics(self, step: float, metrics: dict[str, float]) -> None:
        for name, value in metrics.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self.add_point(name, step, value)

    def _append_smoothed(self, name: str, x: float, y: float) -> None:
        sm = self.smoothed.setdefault(name, Series())
        if not math.isfinite(y):
            sm.append(x, math.nan)
            return
        w = self.smoothing
        ema, n = self._ema.get(name, (0.0, 0))
        ema, n = w * ema + (1 - w) * y, n + 1
        self._ema[name] = (ema, n)
        # Debiased (as TensorBoard does): the early points are not pulled towards 0, nor the curve towards its start.
        sm.append(x, y if n == 1 or w <= 0 else ema / (1 - w ** n))

    # --- panels and curves ---
    def _panel(self, name: str) -> Any:
        key, title, y_label = self.panel_meta(name)
        panel = self.panels.get(key)
        if panel is None:
            panel = pg().PlotWidget(axisItems={"bottom": step_axis_class()("bottom")})
            panel.setObjectName(f"plot_{key}")
            panel.setTitle(title, color=TITLE_COLOR, size="10pt")
            panel.showGrid(x=True, y=True, alpha=0.15)
            panel.setLabel("bottom", "step")
            if y_label:  # small; where even so the plot is too short for it, it goes after the title (fit_unit)
                panel.setLabel("left", y_label, **{"font-size": "8pt"})
                panel.getViewBox().sigResized.connect(lambda _box, p=panel, t=title, u=y_label: fit_unit(p, t, u))
            for side in ("left", "bottom"):
                axis = panel.getAxis(side)
                axis.enableAutoSIPrefix(False)  # "0.0012", not "1.2 (x1e-3)" in a corner
                axis.logTickStrings = log_tick_strings
            # The left axis as wide as its widest tick value plus its label ("0.00012" beside "learning rate"): a
            # fixed width cut one or the other.
            panel.getAxis("left").setStyle(autoExpandTextSpace=True, autoReduceTextSpace=False)
            panel.getViewBox().setLimits(xMin=0)  # no negative steps, however the view is dragged
            panel.viewport().installEventFilter(self._wheel)
            panel.setLogMode(y=self.log_y and key in LOG_SCALE_PANELS)
            panel.setMinimumWidth(200)
            self.panels[key] = panel
            self._relayout()
        return panel

    def loss_on_top(self) -> bool:
        """The loss spans the width on a row of its own while the other panels fit one row under it."""
        return "loss" in self.panels and len(self.panels) - 1 <= self.columns

    def _relayout(self) -> None:
        for panel in self.panels.values():
            self._grid.removeWidget(panel)
        for row in range(self._grid.rowCount()):
            self._grid.setRowStretch(row, 0)
        for column in range(max(self._grid.columnCount(), self.max_columns)):
            # equal columns: by their size hints alone, the last one was squeezed to its minimum and cut its plot
            self._grid.setColumnStretch(column, 1 if column < self.columns else 0)
        on_top = self.loss_on_top()
        if on_top:  # the curve people watch
            self._grid.addWidget(self.panels["loss"], 0, 0, 1, self.columns)
            self._grid.setRowStretch(0, 1)
        others = [key for key in self.panels if not (on_top and key == "loss")]
        last_row = int(on_top) + (len(others) - 1) // self.columns
        for index, key in enumerate(others):
            row = int(on_top) + index // self.columns
            self._grid.addWidget(self.panels[key], row, index % self.columns)
            self._grid.setRowStretch(row, 1)
            # "step" under the bottom row only: the rows above keep that line for their curves
            self.panels[key].getAxis("bottom").showLabel(row == last_row)
        if on_top:
            self.panels["loss"].getAxis("bottom").showLabel(not others)
        for key, panel in self.panels.items():
            self._fit_height(key, panel)

    def _fit_height(self, key: str, panel: Any) -> None:
        """A panel's least height: short enough for a method's panels to fit a small window, plus its legend's
        extra rows (the plot keeps its height beside a long legend)."""
        base = LOSS_MIN_HEIGHT if key == "loss" and self.loss_on_top() else PANEL_MIN_HEIGHT
        members = self._members.get(key, [])
        rows = -(-len(members) // self._legend_columns(members)) if len(members) >= 2 else 0
        panel.setMinimumHeight(base + LEGEND_ROW_HEIGHT * rows)

    @staticmethod
    def _legend_columns(members: list[tuple[Any, str]]) -> int:
        long_labels = any(len(text) > 14 for _c, text in members)  # "proposer/abduction": two columns fit
        return max(1, min(2 if long_labels else 3, len(members)))

    def _new_curve(self, panel: Any, key: str, label: str, **style: Any) -> Any:
        curve = panel.plot([], [], connect="finite", **style)
        curve.setDownsampling(auto=True, method="peak")
        curve.setClipToView(True)
        members = self._members.setdefault(key, [])
        members.append((curve, label))
        if len(members) >= 2:  # a legend once a panel holds several curves: under the plot, off the curves
            legend = self._legends.get(key)
            if legend is None:
                legend = self._legends[key] = pg().LegendItem(labelTextSize="7pt", verSpacing=-6, horSpacing=8)
                panel.getPlotItem().layout.addItem(legend, 4, 0, 1, 3)  # the panel's whole width, axis included
                for member, member_label in members:
                    legend.addItem(member, member_label)
            else:
                legend.addItem(curve, label)
            legend.setColumnCount(self._legend_columns(members))
            self._fit_height(key, panel)
        return curve

    def _next_color(self, key: str) -> str:
        """The palette's colour for the next curve of panel `key`: each curve of a panel its own."""
        return theme.PLOT_COLORS[len(self._members.get(key, [])) % len(theme.PLOT_COLORS)]

    def _ensure_curve(self, name: str) -> None:
        panel = self._panel(name)
        key = self.panel_meta(name)[0]
        if name in SMOOTHED:
            raw = self._new_curve(panel, key, f"{self.curve_label(name)} (raw)", pen=pg().mkPen("#c7d2fe", width=1))
            self.curves[f"{name}~smoothed"] = self._new_curve(panel, key, f"{self.curve_label(name)} (smoothed)",
                                                              **curve_style(theme.ACCENT))
            curve = raw
        elif name.startswith("val_"):
            curve = self._new_curve(panel, key, self.curve_label(name), **curve_style("#dc2626", dots=True))
        else:
            curve = self._new_curve(panel, key, self.curve_label(name), **curve_style(self._next_color(key)))
        self.curves[name] = curve

    # --- drawing ---
    def _redraw(self) -> None:
        if not self._dirty:
            self._timer.stop()  # idle: no timer left running between runs
            return
        for name in list(self._dirty):
            x, y = self.series[name].data()
            self.curves[name].setData(x, y)
            if name in self.smoothed:
                sx, sy = self.smoothed[name].data()
                self.curves[f"{name}~smoothed"].setData(sx, sy)
        self._dirty.clear()
        self.redraws += 1

    def flush(self) -> None:
        """Redraw now (tests, screenshots, export)."""
        self._redraw()

    def set_smoothing(self, value: float) -> None:
        self.smoothing = max(0.0, min(0.999, value))
        for name in list(self.smoothed):
            self.smoothed[name] = Series()
            self._ema.pop(name, None)
            x, y = self.series[name].data()
            for xi, yi in zip(x.tolist(), y.tolist(), strict=True):
                self._append_smoothed(name, xi, yi)
            if name in self.curves:
                self._dirty.add(name)
        self._redraw()

    def set_log_y(self, on: bool) -> None:
        self.log_y = on
        for key, panel in self.panels.items():
            if key in LOG_SCALE_PANELS:
                panel.setLogMode(y=on)
        self._dirty.update(n for n in self.series if n in self.curves)
        self._redraw()

    def clear(self) -> None:
        self._timer.stop()
        for panel in self.panels.values():
            self._grid.removeWidget(panel)
            panel.close()
            panel.deleteLater()
        for row in range(self._grid.rowCount()):
            self._grid.setRowStretch(row, 0)
        self.panels.clear()
        self.curves.clear()
        self._members.clear()
        self._legends.clear()
        self.hidden.clear()
        self.series.clear()
        self.smoothed.clear()
        self._ema.clear()
        self._dirty.clear()
        self._default_panels()

    def point_count(self, name: str) -> int:
        s = self.series.get(name)
        return s.n if s else 0

    def stop_timers(self) -> None:
        self._timer.stop()

    # --- export ---
    def export_png(self, path: str | Path) -> None:
        self._redraw()
        if not self.grab().save(str(path)):

            raise UserError(f"could not write the image {path}")

    def export_csv(self, path: str | Path) -> None:
        """One row per step, one column per series (empty where a series has no value at that step)."""
        names = sorted(self.series)
        table: dict[float, dict[str, float]] = {}
        for name in names:
            x, y = self.series[name].data()
            for xi, yi in zip(x.tolist(), y.tolist(), strict=True):
                table.setdefault(xi, {})[name] = yi
        with open(path, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow(["step", *names])
            for step in sorted(table):
                row = table[step]
                writer.writerow([int(step) if float(step).is_integer() else step,
                                 *[("" if n not in row else repr(row[n])) for n in names]])
