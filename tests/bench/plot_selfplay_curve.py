"""Draw the held-out solve rate per task type during self-play and solver-only RL, over one or more demo folders,
into a PNG (docs/selfplay.md): one panel per task type, minutes of the phase across (both arms get the same wall time).

    QT_QPA_PLATFORM=offscreen .venv/bin/python tests/bench/plot_selfplay_curve.py OUT.png DEMO [DEMO ...]

Lines: the mean over the demos of each arm's solve rate on its selection set (the one it picks its best checkpoint
by, measured at every evaluation); solid for self-play, dashed for solver-only RL; thin lines for each demo.
Markers, on the reported set (400 tasks per type, the `eval` verb's, whose programs no run trained on): the base at
0 (o), each arm's final checkpoint at its end: self-play (triangle), solver-only RL (square), continued pretraining
(x).
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
TYPES = ("deduction", "abduction", "induction")
ARMS = {"selfplay": ("self-play", "#1f77b4", "t1"),
        "solver_rl_generator": ("solver-only RL (generator)", "#d62728", "s"),
        "solver_rl_minimal": ("solver-only RL (minimal seed)", "#9467bd", "d"),
        "solver_rl": ("solver-only RL", "#d62728", "s")}  # demos before 2026-11-29 named the generator's arm so
MARKERS = {"pretrain": "o", "selfplay": "t1", "solver_rl_generator": "s", "solver_rl_minimal": "d",
           "solver_rl": "s", "control": "x"}


def curves(run: Path) -> dict[str, list[tuple[float, float]]]:
    """(minutes, selection-set solve rate) per type at each evaluation of a run (minutes of its steps' clock)."""
    out: dict[str, list[tuple[float, float]]] = {t: [] for t in TYPES}
    path = run / "metrics.jsonl"
    if not path.is_file():
        return out
    minutes = 0.0
    for line in path.read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        if record.get("type") == "step" and record.get("elapsed_s") is not None:
            minutes = float(record["elapsed_s"]) / 60.0
        if record.get("type") == "eval":
            for t in TYPES:
                if f"heldout_solve_rate/{t}" in record:
                    out[t].append((minutes, float(record[f"heldout_solve_rate/{t}"])))
    return out


def reported(demo: Path, run: str) -> dict | None:
    """The evaluation record of a demo run's last checkpoint (its evaluations.json), or None."""
    path = demo / run / "evaluations.json"
    if not path.is_file():
        return None
    records = json.loads(path.read_text(encoding="utf-8")).get("results", [])
    return max(records, key=lambda r: r.get("step") or 0) if records else None


def mean_curve(per_demo: list[list[tuple[float, float]]]) -> tuple[list[float], list[float]]:
    """The mean over demos at each evaluation index that all of them reached, at their mean time."""
    common = min((len(c) for c in per_demo), default=0)
    xs = [sum(c[i][0] for c in per_demo) / len(per_demo) for i in range(common)]
    ys = [sum(c[i][1] for c in per_demo) / len(per_demo) for i in range(common)]
    return xs, ys


def panel(plot, demos: list[Path], task_type: str) -> None:
    import pyqtgraph as pg

    ends = {}
    for run, (name, color, _) in ARMS.items():
        per_demo = [curves(d / run)[task_type] for d in demos]
        per_demo = [c for c in per_demo if c]
        for c in per_demo:
            plot.plot([p[0] for p in c], [p[1] for p in c], pen=pg.mkPen(color, width=1, alpha=70,
                                                                        style=_style(run)))
        xs, ys = mean_curve(per_demo)
        if xs:
            plot.plot(xs, ys, pen=pg.mkPen(color, width=3, style=_style(run)), name=f"{name} (mean)")
        ends[run] = max((c[-1][0] for c in per_demo), default=0.0)
    ends["control"] = ends.get("selfplay", 0.0)
    for demo in demos:
        for run, symbol in MARKERS.items():
            record = reported(demo, run)
            if record and f"solve_rate/{task_type}" in record["metrics"]:
                x = 0.0 if run == "pretrain" else ends.get(run, 0.0)
                color = ARMS.get(run, ("", "#555", ""))[1]
                plot.plot([x], [record["metrics"][f"solve_rate/{task_type}"]], pen=None, symbol=symbol,
                          symbolSize=9, symbolBrush=color, symbolPen=color)


def _style(run: str):
    from PySide6.QtCore import Qt

    return Qt.PenStyle.SolidLine if run == "selfplay" else Qt.PenStyle.DashLine


def main() -> None:
    import pyqtgraph as pg
    import pyqtgraph.exporters
    from PySide6.QtWidgets import QApplication

    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("demos", nargs="+")
    args = parser.parse_args()
    app = QApplication.instance() or QApplication([])
    pg.setConfigOptions(antialias=True, background="w", foreground="k")
    demos = [Path(d) for d in args.demos]
    view = pg.GraphicsLayoutWidget()
    view.addLabel(f"Held-out solve rate, self-play vs solver-only RL ({len(demos)} seed(s)); lines: selection set; "
                  "markers: reported set (o base, ▲ self-play, ■ solver-only RL, x continued pretraining)", colspan=3)
    view.nextRow()
    for i, task_type in enumerate(TYPES):
        plot = view.addPlot(title=task_type)
        if i == 0:
            plot.addLegend(offset=(10, 5))
            plot.setLabel("left", "solve rate (greedy)")
        plot.setLabel("bottom", "minutes of the phase")
        for axis in ("left", "bottom"):
            plot.getAxis(axis).enableAutoSIPrefix(False)
        panel(plot, demos, task_type)
    view.resize(1200, 460)
    view.show()
    app.processEvents()
    exporter = pyqtgraph.exporters.ImageExporter(view.scene())
    exporter.parameters()["width"] = 1200
    exporter.export(args.out)


if __name__ == "__main__":
    main()
