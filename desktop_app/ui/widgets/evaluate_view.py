"""Evaluate models side by side: pick models and evaluations, run them in the background, read one table and a bar
plot. The work is the engine's `evaluate_models` (the `eval` verb's); each result is kept in the model's folder
(evaluations.json) and shown again the next time the model is picked. The form starts from what fits the ticked
models (the engine's `default_measures`: perplexity for a language model, its task world for a self-play model,
questions for a chat model), and follows them when they change, in the fields the person has not changed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QListWidgetItem,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from desktop_app.engine.errors import UserError
from desktop_app.engine.evaluate.baselines import differences
from desktop_app.engine.evaluate.defaults import default_measures, fields_to_refill
from desktop_app.engine.evaluate.results import latest_result
from desktop_app.engine.evaluate.spec import EvalSpec
from desktop_app.engine.events import Controls, Finished, Log, ModelEvaluated, Progress
from desktop_app.ui.context import AppContext
from desktop_app.ui.widgets import benchmark_table as bench
from desktop_app.ui.widgets.base_picker import every_model
from desktop_app.ui.widgets.benchmark_section import BenchmarkSection
from desktop_app.ui.widgets.layouts import note_label
from desktop_app.ui.widgets.live_plot import pg
from desktop_app.ui.widgets.opened_ggufs import window_settings
from desktop_app.ui.widgets.spec_form import SpecForm

PATH_ROLE = Qt.ItemDataRole.UserRole
COLORS = ("#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#4b5563")
# Figures a person reads, in this order; anything else numeric follows.
IDLE = "results are kept in each model's folder (evaluations.json)"
CHECKING = "checking the evaluations and the benchmarks' data…"  # before any model loads (the runner's first step)
NOT_EVALUATED = "not evaluated: the reason is above the Evaluate button"
COLUMN_ORDER = ("solve_rate", "solve_rate/deduction", "solve_rate/abduction", "solve_rate/induction", "qa_accuracy",
                "qa_exact", "qa_contains", "bits_per_byte", "perplexity")


def _evaluate_job(models: list[str], spec: EvalSpec, controls: Controls) -> Any:
    from desktop_app.engine.evaluate.runner import evaluate_models  # lazy: torch

    yield from evaluate_models(models, spec, controls)


def columns_of(rows: dict[str, dict[str, Any]]) -> list[str]:
    """The numeric figures any row has, the familiar ones first, the benchmarks' next (intervals, standard errors
    and counts go into their cells)."""
    found = {k for metrics in rows.values() for k, v in metrics.items()
             if isinstance(v, (int, float)) and not isinstance(v, bool) and not k.startswith("tasks/")
             and k not in ("questions", "text_tokens", "text_bytes", "text_documents") and not bench.in_cell_only(k)}
    benchmarks = sorted(c for c in found if bench.is_bench(c))
    return [c for c in COLUMN_ORDER if c in found] + benchmarks + sorted(found - set(COLUMN_ORDER) - set(benchmarks))


# Figures in words (the column's tooltip keeps the name the results file and `eval --json` use).
FIGURE_WORDS = {"solve_rate": "solved", "qa_accuracy": "questions right", "qa_exact": "questions right (exact)",
                "qa_contains": "questions right (contains)", "bits_per_byte": "bits per byte",
                "perplexity": "perplexity", "heldout_in_training": "held-out programs it trained on"}


def column_label(rows: dict[str, dict[str, Any]], column: str) -> str:
    """A column's header in words: "deduction solved", "bits per byte"; a benchmark's task and metric; questions
    right says which match counted them (exact or contains)."""
    if bench.is_bench(column):
        return bench.bench_label(column)
    figure, _, part = column.partition("/")
    words = FIGURE_WORDS.get(figure, figure.replace("_", " "))
    if part:
        return f"{part} {words}" if figure == "solve_rate" else f"{words}: {part}"
    matched = sorted({str(m["qa_match"]) for m in rows.values() if m.get("qa_match")})
    return f"{words} ({' / '.join(matched)})" if column == "qa_accuracy" and matched else words


def cell_text(metrics: dict[str, Any], column: str) -> str:
    if bench.is_bench(column):
        return bench.bench_cell(metrics, column)
    value = metrics.get(column)
    if not isinstance(value, (int, float)):
        return ""
    if isinstance(value, int) and not isinstance(value, bool):  # counts: held-out programs the run trained on
        return str(value)
    text = f"{value:.4g}" if column in ("perplexity", "bits_per_byte") else f"{value:.3f}"
    interval = metrics.get(f"{column}/ci95")
    if isinstance(interval, list) and len(interval) == 2:
        text += f"  ({interval[0]:.2f}–{interval[1]:.2f})"
    return text


class EvaluateView(QWidget):
    """Models (the Library's, or any folder) × evaluations (EvalSpec's form) -> a table and a grouped bar plot."""

    def __init__(self, ctx: AppContext, models: list[str] | None = None, parent: QWidget | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self.task: Any = None
        self.rows: dict[str, dict[str, Any]] = {}  # model path -> its newest figures
        self.names: dict[str, str] = {}
        self.model_list = QListWidget()
        self.model_list.setObjectName("evaluateModels")
        self.add_btn = QPushButton("Add folder…")
        self.form = SpecForm(EvalSpec)
        self.filled: dict[str, Any] = {}  # the fields as this view last filled them in from the ticked models
        self.qa_seen = ""  # the question file the fitting measures were chosen with
        self.note = QLabel("")  # what the ticked models are and why these evaluations fit them
        self.note.setObjectName("evaluateNote")
        self.note.setProperty("role", "muted")
        self.note.setWordWrap(True)
        self.run_btn = QPushButton("Evaluate")
        self.run_btn.setObjectName("evaluateRun")
        self.run_btn.setProperty("primary", True)
        self.stop_btn = QPushButton("Stop")
        self.stop_btn.setEnabled(False)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setFormat(IDLE)
        self.progress.setValue(0)
        self.error = note_label("", "error")  # why the last evaluation did not run; cleared by any change
        self.error.setObjectName("evaluateError")
        self.error.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.error.hide()
        self.table = QTableWidget(0, 0)
        self.table.setObjectName("evaluateTable")
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.plot = pg().PlotWidget()
        self.plot.setMinimumHeight(180)
        self.plot.addLegend(offset=(-10, 10))

        self._lay_out()

        self.add_btn.clicked.connect(lambda _=False: self._choose_folder())
        self.run_btn.clicked.connect(lambda _=False: self.start())
        self.stop_btn.clicked.connect(lambda _=False: self.stop())
        self.model_list.itemChanged.connect(lambda _item: self._models_changed())
        self.form.changed.connect(self._form_changed)
        self.benchmarks = BenchmarkSection(ctx, self.form.editors["benchmarks"], self.form.editors["benchmark_dir"],
                                           self)
        self.refresh_models(models or [])

    def _lay_out(self) -> None:
        """Models, the note and the evaluations' form on the left; the table over the bar plot on the right."""
        left = QWidget()
        ll = QVBoxLayout(left)
        ll.setContentsMargins(0, 0, 0, 0)
        ll.addWidget(QLabel("Models"))
        ll.addWidget(self.model_list, 1)
        ll.addWidget(self.add_btn)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setWidget(self.form)
        ll.addWidget(QLabel("Evaluations"))
        ll.addWidget(self.note)
        ll.addWidget(scroll, 2)
        ll.addWidget(self.error)
        buttons = QHBoxLayout()
        buttons.addWidget(self.run_btn)
        buttons.addWidget(self.stop_btn)
        ll.addLayout(buttons)
        right = QSplitter(Qt.Orientation.Vertical)
        right.addWidget(self.table)
        right.addWidget(self.plot)
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(left)
        split.addWidget(right)
        split.setSizes([380, 640])
        root = QVBoxLayout(self)
        root.addWidget(split, 1)
        root.addWidget(self.progress)

    # --- models ---
    def refresh_models(self, checked: list[str]) -> None:
        """Every model the Library shows (and the given paths), the given ones checked."""
        self.model_list.blockSignals(True)
        self.model_list.clear()
        entries = every_model(self.ctx.workspace, window_settings(self))
        known = {path for _, path in entries}
        entries += [(Path(p).name, p) for p in checked if p not in known]
        for label, path in entries:
            self.add_model(path, label, checked=path in checked)
        self.model_list.blockSignals(False)
        self._models_changed()

    def add_model(self, path: str, label: str = "", *, checked: bool = True) -> None:
        item = QListWidgetItem(label or Path(path).name)
        item.setData(PATH_ROLE, str(path))
        item.setToolTip(str(path))
        item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
        item.setCheckState(Qt.CheckState.Checked if checked else Qt.CheckState.Unchecked)
        self.model_list.addItem(item)
        self.names[str(path)] = item.text()

    def checked_models(self) -> list[str]:
        return [self.model_list.item(i).data(PATH_ROLE) for i in range(self.model_list.count())
                if self.model_list.item(i).checkState() == Qt.CheckState.Checked]

    def _choose_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "A model folder (run, checkpoint, export or Hugging Face)")
        if folder:
            self.add_model(folder)
            self._models_changed()

    def _models_changed(self) -> None:
        self.show_error("")
        self.fill_defaults()
        self.show_saved()

    def _form_changed(self) -> None:
        self.show_error("")
        self.benchmarks.form_changed()
        qa = str(self.form.values().get("qa", ""))
        if qa != self.qa_seen:  # a question file given (or taken away) changes what fits a chat model
            self.fill_defaults()

    def fill_defaults(self) -> None:
        """The evaluations that fit the ticked models (the engine's default_measures), in every field the person
        has not changed since they were last filled in."""
        shown = self.form.values()
        self.qa_seen = str(shown.get("qa", ""))
        try:
            fitting = default_measures(self.checked_models(), qa=self.qa_seen)
        except UserError as exc:  # a model folder gone since the list was made
            self.note.setText(str(exc))
            return
        self.note.setText(fitting.note + "." if fitting.note else "")
        changes = fields_to_refill(shown, self.filled, fitting.fields)
        self.filled = dict(fitting.fields)
        if changes:
            self.form.set_values(changes)

    # --- results ---
    def show_saved(self) -> None:
        """The newest saved figures of each checked model (what an earlier evaluation measured)."""
        if self.running():
            return
        self.rows = {}
        for path in self.checked_models():
            record = latest_result(path)
            if record is not None:
                self.rows[path] = dict(record.get("metrics", {}))
        self.render()

    def name_of(self, path: str) -> str:
        return self.names.get(path, Path(path).name)

    def render(self) -> None:
        """One row per model, then one per model compared with its base: "Δ vs <base>" and the differences."""
        columns = columns_of(self.rows)
        deltas = self.deltas()
        self.table.clear()
        self.table.setColumnCount(1 + len(columns))
        self.table.setHorizontalHeaderLabels(["model", *(column_label(self.rows, c) for c in columns)])
        for c, column in enumerate(columns, 1):
            self.table.horizontalHeaderItem(c).setToolTip(column)  # the figure's name in files and the CLI
        self.table.setRowCount(len(self.rows) + len(deltas))
        for r, (path, metrics) in enumerate(self.rows.items()):
            self.table.setItem(r, 0, QTableWidgetItem(self.name_of(path)))
            for c, column in enumerate(columns, 1):
                item = QTableWidgetItem(cell_text(metrics, column))
                if bench.is_bench(column):
                    item.setToolTip(bench.bench_tip(metrics, column))
                self.table.setItem(r, c, item)
        for r, (path, base, changes) in enumerate(deltas, len(self.rows)):
            self._delta_row(r, f"{self.name_of(path)}: Δ vs {self.name_of(base)}", changes, columns)
        self.table.resizeColumnsToContents()
        self._plot(columns)

    def deltas(self) -> list[tuple[str, str, dict[str, Any]]]:
        """(model, its base, metric -> difference) for each model the engine compares with another one shown."""
        if len(self.rows) < 2:
            return []

        found = differences([{"model": path, **metrics} for path, metrics in self.rows.items()])
        return [(path, base, changes) for path, (base, changes) in found.items()
                if base != path and path in self.rows and changes]

    def _delta_row(self, row: int, label: str, changes: dict[str, Any], columns: list[str]) -> None:
        muted = self.palette().placeholderText()
        for c, text in enumerate([label, *(bench.delta_text(changes.get(col)) for col in columns)]):
            item = QTableWidgetItem(text)
            item.setForeground(muted)
            font = item.font()
            font.setItalic(True)
            item.setFont(font)
            self.table.setItem(row, c, item)

    def plotted(self, columns: list[str]) -> list[str]:
        """The figures the bar plot groups: solve rates per type, else pass@k, else QA, else the standard
        benchmarks, else bits per byte."""
        for prefix in ("solve_rate/", "pass@", "qa_", bench.PREFIX, "bits_per_byte"):
            chosen = [c for c in columns if c.startswith(prefix)]
            if chosen:
                return chosen
        return []

    def _plot(self, columns: list[str]) -> None:
        self.plot.clear()
        groups = self.plotted(columns)
        if not groups or not self.rows:
            return
        n = len(self.rows)
        width = 0.8 / n
        for m, (path, metrics) in enumerate(self.rows.items()):
            # only the figures this model has: a measure it was not given is no bar of height 0
            have = [(g, c) for g, c in enumerate(groups) if isinstance(metrics.get(c), (int, float))]
            if not have:
                continue
            xs = [g + (m - (n - 1) / 2) * width for g, _ in have]
            ys = [float(metrics[c]) for _, c in have]
            color = COLORS[m % len(COLORS)]
            bars = pg().BarGraphItem(x=xs, height=ys, width=width * 0.9, brush=color,
                                     name=self.names.get(path, Path(path).name))
            self.plot.addItem(bars)
            self._error_bars(metrics, [c for _, c in have], xs, ys, width)
        ticks = [(g, bench.bench_label(c) if bench.is_bench(c) else c.split("/", 1)[-1] if c.startswith("solve_rate/")
                  else c) for g, c in enumerate(groups)]
        self.plot.getAxis("bottom").setTicks([ticks])

    def _error_bars(self, metrics: dict[str, Any], columns: list[str], xs: list[float], ys: list[float],
                    width: float) -> None:
        """The 95% intervals of the bars that have one, a benchmark's standard error."""
        lows, highs = [], []
        for c, y in zip(columns, ys, strict=True):
            stderr = bench.number(metrics.get(f"{c}/stderr")) if bench.is_bench(c) else None
            interval = [y - stderr, y + stderr] if stderr is not None else metrics.get(f"{c}/ci95")
            ok = isinstance(interval, list) and len(interval) == 2
            lows.append(y - interval[0] if ok else 0.0)
            highs.append(interval[1] - y if ok else 0.0)
        if any(lows) or any(highs):
            import numpy as np

            self.plot.addItem(pg().ErrorBarItem(x=np.array(xs), y=np.array(ys), top=np.array(highs),
                                                bottom=np.array(lows), beam=width * 0.3))

    # --- running ---
    def running(self) -> bool:
        return self.task is not None and self.task.running

    def start(self) -> bool:
        models = self.checked_models()
        if not models:
            self.ctx.report_error("Tick at least one model to evaluate.", title="Evaluate")
            return False
        problems = self.form.validate()
        if problems:
            return False
        controls = Controls()
        spec = self.form.spec()
        self.rows = {}
        self.render()
        self.task = self.ctx.runner.start("evaluate", lambda: _evaluate_job(models, spec, controls), controls)
        self.task.produced.connect(self._on_item)
        self.task.failed.connect(self._on_failed)
        self.task.finished.connect(self._on_finished)
        self.run_btn.setEnabled(False)
        self.stop_btn.setEnabled(True)
        self.show_error("")
        self.benchmarks.picker.clear_error()
        self.progress.setValue(0)
        self.progress.setFormat(CHECKING)
        return True

    def show_error(self, message: str) -> None:
        """Why the last evaluation did not run, in red above the buttons ("": none, the line hidden)."""
        if message == self.error.text():
            return
        self.error.setText(message)
        self.error.setVisible(bool(message))
        if not message and self.progress.format() == NOT_EVALUATED:
            self.progress.setFormat(IDLE)

    def _on_failed(self, message: str, details: str) -> None:
        self.progress.setValue(0)
        self.progress.setFormat(NOT_EVALUATED)
        self.show_error(message)
        self.ctx.report_error(message, details, title="Evaluation failed")

    def stop(self) -> None:
        if self.running():
            self.task.stop()

    def _on_item(self, item: object) -> None:
        if isinstance(item, Progress) and item.total:
            self.progress.setValue(int(1000 * min(1.0, item.done / item.total)))
            self.progress.setFormat(f"{item.stage} {int(item.done)}/{int(item.total)} {item.unit} {item.message}")
        elif isinstance(item, ModelEvaluated):
            self.rows[item.model] = dict(item.metrics)
            self.names.setdefault(item.model, item.name)
            self.render()
        elif isinstance(item, Log) and item.level != "info":
            self.ctx.info(item.message)
        elif isinstance(item, Finished):
            self.progress.setValue(1000 if item.reason == "completed" else self.progress.value())
            self.progress.setFormat(item.message or item.reason)
            if item.reason == "completed":
                self.show_error("")
                self.benchmarks.picker.clear_error()

    def _on_finished(self) -> None:
        self.run_btn.setEnabled(True)
        self.stop_btn.setEnabled(False)


class EvaluateDialog(QDialog):
    """The Evaluate view in a window of its own (the Library's Evaluate… button)."""

    def __init__(self, ctx: AppContext, models: list[str], parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Evaluate models")
        self.resize(1100, 720)
        self.view = EvaluateView(ctx, models, self)
        layout = QVBoxLayout(self)
        layout.addWidget(self.view)

    def closeEvent(self, event: Any) -> None:
        self.view.stop()
        super().closeEvent(event)
