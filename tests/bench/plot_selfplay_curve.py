"""Draw the held-out solve rate per task type during self-play, over one or more demo folders, into a PNG (README).

    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/bench/plot_selfplay_curve.py OUT.png DEMO [DEMO ...]

Thin lines: each demo's self-play run, on its own held-out set (the one it picks its best checkpoint by, measured
at every evaluation). Thick lines: their mean. Markers: the base (step 0) and the final checkpoint on the reported
held-out set (400 tasks per type, the `eval` verb's), and the control's final checkpoint (x), when the demo ran one.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
TYPES = ("deduction", "abduction", "induction")
COLORS = dict(zip(TYPES, ("#1f77b4", "#d62728", "#2ca02c"), strict=True))


def curves(demo: Path) -> dict[str, list[tuple[int, float]]]:
    out: dict[str, list[tuple[int, float]]] = {t: [] for t in TYPES}
    for line in (demo / "selfplay" / "metrics.jsonl").read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record.get("type") == "eval":
            for t in TYPES:
                if f"heldout_solve_rate/{t}" in record:
                    out[t].append((int(record["step"]), float(record[f"heldout_solve_rate/{t}"])))
    return out


def reported(demo: Path, run: str) -> dict | None:
    """The evaluation record of a demo run's last checkpoint (its evaluations.json), or None."""
    path = demo / run / "evaluations.json"
    if not path.is_file():
        return None
    records = json.loads(path.read_text(encoding="utf-8")).get("results", [])
    return max(records, key=lambda r: r.get("step") or 0) if records else None


def main() -> None:
    import numpy as np
    import pyqtgraph as pg
    import pyqtgraph.exporters
    from PySide6.QtWidgets import QApplication

    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("demos", nargs="+")
    args = parser.parse_args()
    app = QApplication.instance() or QApplication([])
    pg.setConfigOptions(antialias=True, background="w", foreground="k")
    plot = pg.PlotWidget(title=f"Held-out solve rate during self-play ({len(args.demos)} seed(s); step 0 = base)")
    plot.addLegend(offset=(60, 5), colCount=3)  # two rows across the top, above the curves (see the y range)
    plot.setLabel("bottom", "self-play step")
    plot.setLabel("left", "solve rate (greedy)")
    plot.getAxis("left").enableAutoSIPrefix(False)
    demos = [Path(d) for d in args.demos]
    per_demo = [curves(d) for d in demos]
    for t in TYPES:
        color = COLORS[t]
        for c in per_demo:
            if c[t]:
                plot.plot([p[0] for p in c[t]], [p[1] for p in c[t]], pen=pg.mkPen(color, width=1, alpha=80))
        common = min((len(c[t]) for c in per_demo), default=0)
        if common:
            xs = [per_demo[0][t][i][0] for i in range(common)]
            ys = np.mean([[c[t][i][1] for i in range(common)] for c in per_demo], axis=0)
            plot.plot(xs, ys, pen=pg.mkPen(color, width=3), name=f"{t} (mean)")
        for demo, c in zip(demos, per_demo, strict=True):
            base, final = reported(demo, "pretrain"), reported(demo, "selfplay")
            last = c[t][-1][0] if c[t] else 0
            for record, x, symbol in ((base, 0, "o"), (final, last, "t")):
                if record and f"solve_rate/{t}" in record["metrics"]:
                    plot.plot([x], [record["metrics"][f"solve_rate/{t}"]], pen=None, symbol=symbol, symbolSize=9,
                              symbolBrush=color)
            control = reported(demo, "control")
            if control and f"solve_rate/{t}" in control["metrics"]:
                plot.plot([last], [control["metrics"][f"solve_rate/{t}"]], pen=None, symbol="x", symbolSize=11,
                          symbolBrush=color, symbolPen=color)
    for symbol, name in (("o", "base (reported set)"), ("t", "self-play final (reported set)"),
                         ("x", "control final (reported set)")):  # the markers' key, in grey
        plot.plot([], [], pen=None, symbol=symbol, symbolSize=9, symbolBrush="#777", symbolPen="#777", name=name)
    top = max((y for item in plot.listDataItems() for y in (item.getData()[1] if item.getData()[1] is not None
                                                              else [])), default=0.5)
    plot.setYRange(0, top + 0.12)  # room for the legend
    plot.resize(960, 460)
    plot.show()
    app.processEvents()
    exporter = pyqtgraph.exporters.ImageExporter(plot.plotItem)
    exporter.parameters()["width"] = 960
    exporter.export(args.out)


if __name__ == "__main__":
    main()
