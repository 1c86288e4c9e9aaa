"""Live training curves: growing numpy buffers, ~100 ms timer-driven redraw, peak downsampling.

Any named scalar gets a curve: known names go to their panel (loss with val_loss, learning rate, gradient norm,
training speed...), each with a title and a y-axis label in words; an unknown one (reward, kl, ...) gets a panel of
its own. A panel appears only once it has something to show: a metric that is still 0 (a KL penalty that is off,
the epoch of a run with no epochs) is kept for the CSV but draws no empty, flat panel. A panel with several
curves has its legend under the plot, never over the curves. The panels flow in as many columns as the width takes.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QGridLayout, QWidget

from desktop_app.ui import theme

# Panels the "Log scale" toggle applies to (quantities spanning orders of magnitude).
LOG_SCALE_PANELS = ("loss", "lr", "grad_norm")
PANEL_MIN_WIDTH = 380  # narrower, a panel cuts its title and legend: fewer columns instead
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
        columns = max(1, min(self.max_columns, self.width() // PANEL_MIN_WIDTH))
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
            if name in NOT_PLOTTED or not (self.panel_meta(name)[0] in self.panels or (math.isfinite(y) and y != 0)):
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
            panel = pg().PlotWidget()
            panel.setObjectName(f"plot_{key}")
            panel.setTitle(title, color=TITLE_COLOR, size="10pt")
            panel.showGrid(x=True, y=True, alpha=0.15)
            panel.setLabel("bottom", "step")
            if y_label:
                panel.setLabel("left", y_label)
            for side in ("left", "bottom"):
                axis = panel.getAxis(side)
                axis.enableAutoSIPrefix(False)  # "0.0012", not "1.2 (x1e-3)" in a corner
                axis.logTickStrings = log_tick_strings
            panel.getAxis("left").setWidth(56)  # room for "0.0001" and "12,000": no tick value cut off
            panel.setLogMode(y=self.log_y and key in LOG_SCALE_PANELS)
            panel.setMinimumHeight(240 if key == "loss" else 170)  # the loss keeps room beside its legend
            panel.setMinimumWidth(200)
            self.panels[key] = panel
            self._place(key, panel)
        return panel

    def _place(self, key: str, panel: Any) -> None:
        if key == "loss":  # the curve people watch: full width on top
            self._grid.addWidget(panel, 0, 0, 1, self.columns)
            self._grid.setRowStretch(0, 2)
            return
        index = [k for k in self.panels if k != "loss"].index(key)
        row = 1 + index // self.columns
        self._grid.addWidget(panel, row, index % self.columns)
        self._grid.setRowStretch(row, 1)

    def _relayout(self) -> None:
        for panel in self.panels.values():
            self._grid.removeWidget(panel)
        for row in range(self._grid.rowCount()):
            self._grid.setRowStretch(row, 0)
        for key, panel in self.panels.items():
            self._place(key, panel)

    def _new_curve(self, panel: Any, key: str, label: str, **style: Any) -> Any:
        curve = panel.plot([], [], connect="finite", **style)
        curve.setDownsampling(auto=True, method="peak")
        curve.setClipToView(True)
        members = self._members.setdefault(key, [])
        members.append((curve, label))
        if len(members) >= 2:  # a legend once a panel holds several curves: under the plot, off the curves
            legend = self._legends.get(key)
            if legend is None:
                legend = self._legends[key] = pg().LegendItem(labelTextSize="8pt", verSpacing=-6, horSpacing=14)
                panel.getPlotItem().layout.addItem(legend, 4, 1)
                for member, member_label in members:
                    legend.addItem(member, member_label)
            else:
                legend.addItem(curve, label)
            long_labels = max(len(text) for _c, text in members) > 14  # "proposer/abduction": two columns fit
            columns = min(2 if long_labels else 3, len(members))
            legend.setColumnCount(columns)
            rows = -(-len(members) // columns)
            base = 240 if key == "loss" else 170
            panel.setMinimumHeight(base + 16 * (rows - 1))  # the plot keeps its height beside a long legend
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
            from desktop_app.engine.errors import UserError

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
