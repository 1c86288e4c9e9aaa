"""Live training curves: growing numpy buffers, ~100 ms timer-driven redraw, peak downsampling.

Any named scalar gets a curve: known names go to their panel (loss with val_loss, lr, grad norm,
tokens/s); an unknown one (reward, kl, ...) gets a new panel the first time it shows up.
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


def pg() -> Any:
    """pyqtgraph (and numpy), imported on first use: ~0.4 s the window does not wait for at start-up."""
    import pyqtgraph

    if not getattr(pyqtgraph, "_azr_configured", False):
        pyqtgraph.setConfigOptions(antialias=False, background="w", foreground="#374151")
        pyqtgraph._azr_configured = True
    return pyqtgraph

# series name -> (panel key, panel title)
_PANELS = {
    "loss": ("loss", "Loss"),
    "train_loss": ("loss", "Loss"),
    "val_loss": ("loss", "Loss"),
    "lr": ("lr", "Learning rate"),
    "grad_norm": ("grad_norm", "Gradient norm"),
    "tokens_per_s": ("tokens_per_s", "Tokens / s"),
}
SMOOTHED = {"loss", "train_loss"}


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
        self.columns = columns
        self.series: dict[str, Series] = {}
        self.smoothed: dict[str, Series] = {}
        self._ema: dict[str, float] = {}
        self.curves: dict[str, Any] = {}  # pyqtgraph PlotDataItems
        self.panels: dict[str, Any] = {}  # pyqtgraph PlotWidgets
        self._dirty: set[str] = set()
        self.smoothing = 0.9  # EMA weight of the past (0 = off)
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

    def _default_panels(self) -> None:
        # Empty panels up front: the window shows where curves will appear before a run starts.
        for name in ("loss", "lr", "grad_norm", "tokens_per_s"):
            self._panel(name)

    # --- data in ---
    def add_point(self, name: str, x: float, y: float) -> None:
        try:
            y = float(y)
        except (TypeError, ValueError):
            return
        s = self.series.get(name)
        if s is None:
            s = self.series[name] = Series()
            self._ensure_curve(name)
        s.append(x, y)
        if name in SMOOTHED:
            self._append_smoothed(name, x, y)
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
        prev = self._ema.get(name)
        ema = y if prev is None or self.smoothing <= 0 else self.smoothing * prev + (1 - self.smoothing) * y
        self._ema[name] = ema
        sm.append(x, ema)

    def _panel(self, name: str) -> Any:
        key, title = _PANELS.get(name, (name, name.replace("_", " ")))
        panel = self.panels.get(key)
        if panel is None:
            panel = pg().PlotWidget()
            panel.setObjectName(f"plot_{key}")
            panel.setTitle(title, color="#111827", size="10pt")
            panel.showGrid(x=True, y=True, alpha=0.15)
            panel.setLabel("bottom", "step")
            if key == "loss":  # several curves share this panel; others have one and a title
                panel.addLegend(offset=(-8, 8), labelTextSize="8pt")
            panel.setLogMode(y=self.log_y and key in LOG_SCALE_PANELS)
            panel.setMinimumHeight(150)
            if key == "loss":  # the curve people watch: full width on top
                self._grid.addWidget(panel, 0, 0, 1, self.columns)
                self._grid.setRowStretch(0, 2)
            else:
                index = sum(1 for k in self.panels if k != "loss")
                row = 1 + index // self.columns
                self._grid.addWidget(panel, row, index % self.columns)
                self._grid.setRowStretch(row, 1)
            self.panels[key] = panel
        return panel

    def _ensure_curve(self, name: str) -> None:
        panel = self._panel(name)
        pg_ = pg()
        color = theme.PLOT_COLORS[len(self.curves) % len(theme.PLOT_COLORS)]
        if name in SMOOTHED:
            raw = panel.plot([], [], pen=pg_.mkPen("#a5b4fc", width=1), name=f"{name} (raw)", connect="finite")
            sm = panel.plot([], [], pen=pg_.mkPen(theme.ACCENT, width=2), name=f"{name} (smoothed)",
                            connect="finite")
            self.curves[f"{name}~smoothed"] = sm
            curve = raw
        elif name.startswith("val_"):
            curve = panel.plot([], [], pen=pg_.mkPen("#dc2626", width=2), symbol="o", symbolSize=5,
                               symbolBrush="#dc2626", symbolPen=None, name=name, connect="finite")
        else:
            curve = panel.plot([], [], pen=pg_.mkPen(color, width=2), name=name, connect="finite")
        self.curves[name] = curve
        for c in (curve, self.curves.get(f"{name}~smoothed")):
            if c is not None:
                c.setDownsampling(auto=True, method="peak")
                c.setClipToView(True)

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
            self._dirty.add(name)
        self._redraw()

    def set_log_y(self, on: bool) -> None:
        self.log_y = on
        for key, panel in self.panels.items():
            if key in LOG_SCALE_PANELS:
                panel.setLogMode(y=on)
        self._dirty.update(self.series)
        self._redraw()

    def clear(self) -> None:
        self._timer.stop()
        for panel in self.panels.values():
            self._grid.removeWidget(panel)
            panel.close()
            panel.deleteLater()
        self.panels.clear()
        self.curves.clear()
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
