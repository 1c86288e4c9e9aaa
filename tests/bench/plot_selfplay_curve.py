"""Draw a self-play run's held-out solve rate per task type (metrics.jsonl) into a PNG (for the README).

    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/bench/plot_selfplay_curve.py RUN_DIR OUT.png \
        [--before deduction=0.21,abduction=0.35,induction=0.12]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def main() -> None:
    import pyqtgraph as pg
    import pyqtgraph.exporters
    from PySide6.QtWidgets import QApplication

    parser = argparse.ArgumentParser()
    parser.add_argument("run")
    parser.add_argument("out")
    parser.add_argument("--before", default="", help="held-out rates of the base, plotted at step 0")
    args = parser.parse_args()
    app = QApplication.instance() or QApplication([])
    curves: dict[str, list[tuple[int, float]]] = {}
    for text in args.before.split(","):
        if "=" in text:
            kind, value = text.split("=")
            curves.setdefault(kind, []).append((0, float(value)))
    for line in Path(args.run, "metrics.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record.get("type") != "eval":
            continue
        for key, value in record.items():
            if key.startswith("heldout_solve_rate/"):
                curves.setdefault(key.split("/", 1)[1], []).append((record["step"], value))
    pg.setConfigOptions(antialias=True, background="w", foreground="k")
    plot = pg.PlotWidget(title="Held-out solve rate during self-play (step 0 = the pretrained base)")
    plot.addLegend()
    plot.setLabel("bottom", "self-play step")
    plot.setLabel("left", "solve rate (greedy, 48 tasks per type)")
    plot.getAxis("left").enableAutoSIPrefix(False)
    for (kind, points), color in zip(sorted(curves.items()), ("#1f77b4", "#d62728", "#2ca02c"), strict=False):
        plot.plot([p[0] for p in points], [p[1] for p in points], pen=pg.mkPen(color, width=2), name=kind)
    plot.resize(900, 420)
    plot.show()
    app.processEvents()
    exporter = pyqtgraph.exporters.ImageExporter(plot.plotItem)
    exporter.parameters()["width"] = 900
    exporter.export(args.out)


if __name__ == "__main__":
    main()
