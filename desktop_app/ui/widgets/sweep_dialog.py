"""Train tab → Search settings…: a hyperparameter search (a sweep, docs/sweeps.md) of the run the Train form
describes, set up and then followed in one window.

The setup: a row per setting that may vary for the form's method (ui/sweep_rows.py), the method's usual ones ticked
with their usual ranges; each with its range (or the values to choose from) and a log scale where a range takes one;
how long (a number of trials, or a time budget), what judges a trial (the metrics the method reports, which way is
better said beside it), and the sweep's own settings (sampler, pruner...: SweepSpec's form). Every problem is shown in
words under the settings, the rows at fault outlined, and nothing starts. Start opens the sweep in the engine
(engine/sweep/runner.py: it plans the base run once, checks what varies and the metric) and runs it in the background
runner; the window then shows the live view (sweep_view.py) in place of the setup, at the same size.

The sweep's folder is a new one in the workspace's sweeps/ folder; the Library lists its trial runs under it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QRadioButton,
    QSpinBox,
    QStackedWidget,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Controls, Finished
from desktop_app.engine.methods import method_of
from desktop_app.engine.specs import RunConfig
from desktop_app.engine.sweep.events import TrialFinished
from desktop_app.engine.sweep.runner import NewSweep, Sweep, open_sweep
from desktop_app.engine.sweep.spec import MAX_TRIALS, SweepSpec
from desktop_app.engine.train.request import RunRequest
from desktop_app.engine.workspace import slugify
from desktop_app.ui.background import Task
from desktop_app.ui.context import AppContext
from desktop_app.ui.sweep_jobs import SWEEP_KIND, sweep_job
from desktop_app.ui.sweep_rows import BETTER_WORDS, SettingRow, metric_choices, setting_rows, word
from desktop_app.ui.widgets.layouts import add_items, button, note_label
from desktop_app.ui.widgets.spec_form import SpecForm
from desktop_app.ui.widgets.sweep_view import SweepView

TABLE_COLUMNS = ("Vary", "Now", "From", "To", "Log scale")
BAD_FIELD = "border: 1px solid #b91c1c;"  # theme.ERROR: a field whose value the search cannot take
MAX_BUDGET_MIN = 7 * 24 * 60


@dataclass
class RowFields:
    """The editors of one setting's row."""

    tick: QCheckBox
    low: QLineEdit
    high: QLineEdit
    log: QCheckBox
    choices: QLineEdit


class SweepSetup(QWidget):
    """What varies, for how long, judged by what."""

    def __init__(self, config: RunConfig, parent: QWidget | None = None):
        super().__init__(parent)
        self.config = config
        self.rows: list[SettingRow] = setting_rows(config)
        self.fields: list[RowFields] = []
        self.table = self._build_table()
        self.form = SpecForm(SweepSpec, exclude=("base", "vary", "trials", "metric", "direction"))
        self.form.setObjectName("sweepSpecForm")
        top = QGridLayout()
        top.setColumnStretch(3, 1)
        self._build_length(top)
        self._build_metric(top)
        intro = note_label(f"Each trial trains the {method_of(config).label} run the Train tab had when this "
                           "window opened, with other settings: tick what varies and its range. A log scale suits "
                           "what spans powers of ten (learning rates).")
        add_items(QVBoxLayout(self), intro, (self.table, 1), top, self.form, margins=0)

    # --- the settings ---
    def _build_table(self) -> QTableWidget:
        table = QTableWidget(len(self.rows), len(TABLE_COLUMNS))
        table.setObjectName("sweepSettings")
        table.setHorizontalHeaderLabels(list(TABLE_COLUMNS))
        table.verticalHeader().setVisible(False)
        table.setSelectionMode(QTableWidget.SelectionMode.NoSelection)
        table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        header = table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for column, width in ((1, 90), (2, 110), (3, 110), (4, 80)):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Fixed)
            table.setColumnWidth(column, width)
        header.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        table.horizontalHeaderItem(1).setToolTip("The value the Train tab's run has now")
        table.horizontalHeaderItem(4).setToolTip("Try values evenly on a log scale (each power of ten as often): for "
                                                 "learning rates and other settings that span powers of ten")
        for i, row in enumerate(self.rows):
            self.fields.append(self._row(table, i, row))
        return table

    def _row(self, table: QTableWidget, i: int, row: SettingRow) -> RowFields:
        name = row.setting.name
        tick = QCheckBox(row.label)
        tick.setObjectName(f"vary_{name}")
        tick.setToolTip(f"{row.help}\n(a sweep names it {name})")
        now = QTableWidgetItem(word(row.now))
        now.setToolTip(f"{row.label} of the Train tab's run now")
        fields = RowFields(tick, QLineEdit(row.low), QLineEdit(row.high), QCheckBox(), QLineEdit(row.choices))
        fields.log.setChecked(row.log)
        fields.log.setToolTip(table.horizontalHeaderItem(4).toolTip())
        for edit, what in ((fields.low, "low"), (fields.high, "high"), (fields.choices, "choices")):
            edit.setObjectName(f"{what}_{name}")
        fields.low.setToolTip("The lowest value a trial may take")
        fields.high.setToolTip("The highest value a trial may take")
        fields.choices.setToolTip("The values trials choose from, separated by commas")
        table.setCellWidget(i, 0, tick)
        table.setItem(i, 1, now)
        if row.is_choice:
            table.setSpan(i, 2, 1, 3)
            table.setCellWidget(i, 2, fields.choices)
        else:
            table.setCellWidget(i, 2, fields.low)
            table.setCellWidget(i, 3, fields.high)
            table.setCellWidget(i, 4, fields.log)
        tick.setChecked(row.ticked)
        tick.toggled.connect(lambda on, f=fields: self._enable(f, on))
        self._enable(fields, row.ticked)
        return fields

    @staticmethod
    def _enable(fields: RowFields, on: bool) -> None:
        for widget in (fields.low, fields.high, fields.log, fields.choices):
            widget.setEnabled(on)

    def vary(self) -> tuple[list[str], list[str]]:
        """The ticked rows as --vary specs, and each row's problem in words (its fields outlined)."""
        texts, problems = [], []
        for row, fields in zip(self.rows, self.fields, strict=True):
            problem = ""
            if fields.tick.isChecked():
                text = row.vary_text(fields.low.text(), fields.high.text(), fields.log.isChecked(),
                                     fields.choices.text())
                _dim, problem = row.dimension(text, self.config)
                if problem:
                    problems.append(problem)
                else:
                    texts.append(text)
            for edit in (fields.low, fields.high, fields.choices):
                edit.setStyleSheet(BAD_FIELD if problem else "")
        if not texts and not problems:
            problems.append("Tick at least one setting to vary.")
        return texts, problems

    def set_range(self, name: str, low: str, high: str, *, log: bool | None = None) -> None:
        """Tick a setting and give its range (the person's typing, for tests and scripts)."""
        fields = self.fields[[r.setting.name for r in self.rows].index(name)]
        fields.tick.setChecked(True)
        fields.low.setText(low)
        fields.high.setText(high)
        if log is not None:
            fields.log.setChecked(log)

    def ticked(self) -> list[str]:
        return [r.setting.name for r, f in zip(self.rows, self.fields, strict=True) if f.tick.isChecked()]

    def labels(self) -> dict[str, str]:
        return {row.setting.path: row.label for row in self.rows}

    # --- how long, judged by what ---
    def _build_length(self, grid: QGridLayout) -> None:
        self.trials_radio = QRadioButton("Trials")
        self.trials_radio.setObjectName("sweepByTrials")
        self.trials_radio.setChecked(True)
        self.trials_box = QSpinBox()
        self.trials_box.setObjectName("sweepTrials")
        self.trials_box.setRange(1, MAX_TRIALS)
        self.trials_box.setValue(20)
        self.trials_box.setSuffix(" trials")
        self.trials_box.setToolTip("Trials in all: each trains the run once with its own settings")
        self.budget_radio = QRadioButton("Time budget")
        self.budget_radio.setObjectName("sweepByTime")
        self.budget_box = QSpinBox()
        self.budget_box.setObjectName("sweepBudget")
        self.budget_box.setRange(1, MAX_BUDGET_MIN)
        self.budget_box.setValue(30)
        self.budget_box.setSuffix(" min")
        self.budget_box.setToolTip("No trial starts after this time; the trial running then finishes")
        self.budget_box.setEnabled(False)
        self.budget_radio.toggled.connect(lambda on: (self.budget_box.setEnabled(on),
                                                      self.trials_box.setEnabled(not on)))
        grid.addWidget(QLabel("Stop after"), 0, 0)
        grid.addWidget(self.trials_radio, 0, 1)
        grid.addWidget(self.trials_box, 0, 2)
        grid.addWidget(self.budget_radio, 1, 1)
        grid.addWidget(self.budget_box, 1, 2)
        grid.addWidget(note_label("(no trial starts after it; the one running then finishes)"), 1, 3)

    def _build_metric(self, grid: QGridLayout) -> None:
        self.metric_box = QComboBox()
        self.metric_box.setObjectName("sweepMetric")
        for metric, words, direction in metric_choices(self.config):
            self.metric_box.addItem(words, (metric, words, direction))
            self.metric_box.setItemData(self.metric_box.count() - 1, f"{metric}: {BETTER_WORDS[direction]}",
                                        Qt.ItemDataRole.ToolTipRole)
        self.better_label = note_label("", wrap=False)
        self.metric_box.currentIndexChanged.connect(lambda _i: self.better_label.setText(
            f"{self.metric()[0]}, {BETTER_WORDS[self.metric()[2]]}"))
        self.better_label.setText(f"{self.metric()[0]}, {BETTER_WORDS[self.metric()[2]]}")
        grid.addWidget(QLabel("Judged by"), 2, 0)
        grid.addWidget(self.metric_box, 2, 1, 1, 2)
        grid.addWidget(self.better_label, 2, 3)

    def metric(self) -> tuple[str, str, str]:
        """(metric, its words, which way is better)."""
        return self.metric_box.currentData()

    def budget_s(self) -> float:
        return 60.0 * self.budget_box.value() if self.budget_radio.isChecked() else 0.0

    def spec(self, vary: list[str]) -> SweepSpec:
        trials = MAX_TRIALS if self.budget_radio.isChecked() else self.trials_box.value()
        return self.form.spec().replace(vary=list(vary), trials=trials, metric=self.metric()[0], direction="auto")


class SweepDialog(QDialog):
    """The setup, then the live view, of one search (closing it while the search runs only hides it)."""

    use_best_requested = Signal(dict)
    open_run_requested = Signal(str)

    def __init__(self, ctx: AppContext, request: RunRequest, config: RunConfig, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Search settings")
        self.setObjectName("sweepDialog")
        self.ctx, self.request = ctx, request
        self.task: Task | None = None
        self.sweep: Sweep | None = None
        self.view: SweepView | None = None
        self.setup = SweepSetup(config)
        self.error = note_label("", "error")
        self.error.setObjectName("sweepError")
        self.error.setMinimumHeight(3 * self.error.fontMetrics().lineSpacing() + 4)  # problems never move a field
        self.error.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.start_btn = button("Start the search", "sweepStartButton", "Open the sweep (the base run is planned "
                                "and checked once) and run its trials one after another", primary=True)
        self.close_btn = button("Close", "sweepClose")
        self.start_btn.clicked.connect(lambda _=False: self.start())
        self.close_btn.clicked.connect(lambda _=False: self.close())
        setup_page = QWidget()
        add_items(QVBoxLayout(setup_page), (self.setup, 1), self.error, margins=0)
        self.stack = QStackedWidget()
        self.stack.addWidget(setup_page)
        buttons = add_items(QHBoxLayout(), margins=0)
        buttons.addStretch(1)
        add_items(buttons, self.start_btn, self.close_btn)
        add_items(QVBoxLayout(self), (self.stack, 1), buttons, margins=10)
        self.resize(1000, 660)

    @property
    def running(self) -> bool:
        return self.task is not None and self.task.running

    def start(self) -> bool:
        """Check what the setup says, open the sweep in the engine and run it; False (the problems shown under the
        settings) when it cannot start."""
        vary, problems = self.setup.vary()
        spec = self.setup.spec(vary)
        problems += [self.setup.form.in_words(p) for p in spec.validate() if not p.startswith("base ")]
        if not problems and self.ctx.runner.is_running("train"):
            problems.append("A run is training on the Train tab: a search would share the machine with it. Stop the "
                            "run first.")
        sweep = self._open(spec) if not problems else None
        if sweep is None:
            if problems:
                self.error.setText("\n".join(f"• {p}" for p in problems))
            return False
        self._run(sweep, self.setup.budget_s())
        return True

    def _open(self, spec: SweepSpec) -> Sweep | None:
        stamp = f"{time.strftime('%Y%m%d-%H%M%S')}-{method_of(self.setup.config).key}"
        name = slugify(spec.name) if spec.name else stamp
        folder = self.ctx.workspace.new_path("sweeps", name)
        try:
            sweep = open_sweep(NewSweep(self.request, spec), folder)
        except UserError as exc:
            self.error.setText(f"• {exc}")
            return None
        errors = sweep.errors()
        if errors:
            self.error.setText("This run cannot work on this machine:\n" + "\n".join(f"• {e}" for e in errors))
            return None
        return sweep

    def _run(self, sweep: Sweep, budget_s: float) -> None:
        self.sweep = sweep
        self.view = SweepView(sweep.dims, self.setup.labels(), self.setup.metric())
        self.view.use_best_requested.connect(self.use_best_requested)
        self.view.open_run_requested.connect(self.open_run_requested)
        lines = [*sweep.notes, *(f"before the start: {f.message}" for f in sweep.findings)]
        self.view.note("\n".join(lines[:2]))
        self.stack.addWidget(self.view)
        self.stack.setCurrentWidget(self.view)
        self.start_btn.setVisible(False)
        controls = Controls()
        self.task = self.ctx.runner.start(SWEEP_KIND, lambda: sweep_job(sweep, controls, budget_s), controls)
        self.view.stop_requested.connect(self.stop)
        self.task.produced.connect(self._on_event)
        self.task.failed.connect(lambda message, _details: self.view.end(message))
        self.task.finished.connect(self._on_finished)

    def _on_event(self, event: Any) -> None:
        assert self.view is not None
        self.view.show_event(event)
        if isinstance(event, (TrialFinished, Finished)):
            self.ctx.workspace_items_changed.emit()  # the Library lists the trial's run

    def _on_finished(self) -> None:
        if self.view is not None:
            self.view.end()
        self.ctx.workspace_items_changed.emit()

    def stop(self) -> None:
        """The running trial saves and stays unfinished; the search ends (sweep --resume continues it)."""
        if self.running:
            assert self.task is not None and self.view is not None
            self.task.stop()
            self.view.stopping()
