"""The settings search, live: a table of its trials (each varied setting, the value, the state with its reason), the
optimisation history and each setting's effect (sweep_plots.py), the running trial's progress, Stop, and once a trial
is complete, Use the best settings (the Train form takes them) and Open the best run (the Library selects it).

It renders the sweep's events (engine/sweep/events.py) and the running trial's steps; what the buttons do is the
owner's (the dialog stops the task; the Train tab fills its form; the window shows the Library).
"""

from __future__ import annotations

from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFont
from PySide6.QtWidgets import QHBoxLayout, QHeaderView, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget

from desktop_app.engine.events import Event, Finished, Log, StepMetrics
from desktop_app.engine.sweep.events import FAILED, SweepStarted, TrialFinished, TrialReport, TrialStarted
from desktop_app.engine.sweep.space import Dimension
from desktop_app.ui.sweep_rows import BETTER_WORDS, word
from desktop_app.ui.widgets.layouts import add_items, button, note_label, progress_bar, splitter
from desktop_app.ui.widgets.sweep_plots import SweepPlots, TrialRecord

STATE_TIPS = {"running": "training now", "complete": "its run finished: its value is the best figure it reported",
              "pruned": "stopped early: its figures were behind the other trials' at the same step",
              "failed": "its run could not train", "interrupted": "stopped with the search: it continues when the "
                                                                  "search is resumed (sweep --resume)"}


class SweepView(QWidget):
    """The trials of one search as they come."""

    stop_requested = Signal()
    use_best_requested = Signal(dict)  # the best trial's settings, {path: value}
    open_run_requested = Signal(str)  # the best trial's run folder

    def __init__(self, dims: list[Dimension], labels: dict[str, str], metric: tuple[str, str, str],
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.dims, self.labels = dims, labels
        self.metric, metric_words, self.direction = metric
        self.trials: dict[int, TrialRecord] = {}
        self.best: dict[str, Any] | None = None
        self.total = 0
        self.finished: Finished | None = None
        self.heading = note_label("starting the search…")
        self.heading.setObjectName("sweepHeading")
        self.table = self._build_table(metric_words)
        self.plots = SweepPlots(dims, labels, metric_words, self.direction)
        self.progress = progress_bar("planning the first trial…")
        self.result = note_label("")
        self.result.setObjectName("sweepResult")
        self.result.setMinimumHeight(2 * self.result.fontMetrics().lineSpacing() + 4)  # a line more never moves
        self.result.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.result.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.stop_btn = button("Stop", "sweepStop", "Stop the search: the running trial saves a checkpoint and "
                               "stays unfinished (sweep --resume FOLDER continues it)")
        self.use_btn = button("Use the best settings", "sweepUseBest", "Put the best trial's settings into the "
                              "Train tab's fields (and the Model tab's, for a model setting)", primary=True,
                              enabled=False)
        self.open_btn = button("Open the best run", "sweepOpenBest", "Select the best trial's run in the Library",
                               enabled=False)
        self.stop_btn.clicked.connect(lambda _=False: self.stop_requested.emit())
        self.use_btn.clicked.connect(lambda _=False: self.use_best_requested.emit(dict(self.best_params())))
        self.open_btn.clicked.connect(lambda _=False: self.open_run_requested.emit(self.best_run()))
        buttons = add_items(QHBoxLayout(), self.stop_btn, self.use_btn, self.open_btn, margins=0)
        buttons.addStretch(1)
        body = splitter(Qt.Orientation.Vertical, [self.table, self.plots], stretch=(2, 3), sizes=(200, 300))
        add_items(QVBoxLayout(self), self.heading, (body, 1), self.progress, self.result, buttons, margins=0)

    def _build_table(self, metric_words: str) -> QTableWidget:
        headers = ["Trial", *(self.labels.get(d.path, d.name) for d in self.dims), metric_words, "State", "Why"]
        table = QTableWidget(0, len(headers))
        table.setObjectName("sweepTrials")
        table.setHorizontalHeaderLabels(headers)
        table.horizontalHeaderItem(len(headers) - 3).setToolTip(f"{self.metric}: {BETTER_WORDS[self.direction]}; a "
                                                                "trial's value is the best figure its run reported")
        table.verticalHeader().setVisible(False)
        table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        header = table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(len(headers) - 1, QHeaderView.ResizeMode.Stretch)
        header.setDefaultAlignment(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        return table

    # --- events ---
    def show_event(self, event: Event) -> None:
        if isinstance(event, SweepStarted):
            self._started(event)
        elif isinstance(event, TrialStarted):
            self._record(event.number, params=dict(event.params), state="running", message=(
                "continues from its newest checkpoint" if event.resumed else ""))
            self.progress.setValue(0)
            self.progress.setFormat(f"trial {event.number}: starting…")
        elif isinstance(event, StepMetrics):
            self._step(event)
        elif isinstance(event, TrialReport):
            self._record(event.number, value=event.best, step=event.step,
                         message=f"{self.metric} {event.value:.4g} at step {event.step}" +
                         (": pruned" if event.pruned else ""))
        elif isinstance(event, TrialFinished):
            self._record(event.number, params=dict(event.params) or None, value=event.value, state=event.state,
                         message=event.message, step=event.steps)
            self.plots.show_trials(list(self.trials.values()))
            self._mark_best(event.best_number)
        elif isinstance(event, Log) and event.level != "info":
            self.result.setText(f"{event.level}: {event.message}")
        elif isinstance(event, Finished):  # the sweep's (a trial's own is kept back)
            self._finished(event)

    def _started(self, event: SweepStarted) -> None:
        self.total = event.trials
        again = f", {event.done} done before" if event.resumed else ""
        at_once = f", {event.parallel} at once" if event.parallel > 1 else ""
        self.heading.setText(f"Trials of {event.sweep_dir}{again}{at_once}, judged by {self.metric} "
                             f"({BETTER_WORDS[self.direction]}): " + "; ".join(event.vary))
        self.heading.setToolTip(event.sweep_dir)

    def _step(self, event: StepMetrics) -> None:
        running = [t for t in self.trials.values() if t.state == "running"]
        if not running or not event.total_steps:
            return
        trial = running[-1]
        self.progress.setValue(int(1000 * event.step / event.total_steps))
        self.progress.setFormat(f"trial {trial.number}: step {event.step:,} of {event.total_steps:,}")

    def _record(self, number: int, **changes: Any) -> None:
        """A trial's row, new or changed (params, value, state, message, step; None keeps what it had, but a failed
        trial has no value)."""
        trial = self.trials.get(number)
        if trial is None:
            trial = self.trials[number] = TrialRecord(number)
            self.table.insertRow(self.table.rowCount())
        for name, given in changes.items():
            if given is not None or (name == "value" and changes.get("state") == FAILED):
                setattr(trial, name, given)
        self._show_row(list(self.trials).index(number), trial)

    def _show_row(self, row: int, trial: TrialRecord) -> None:
        cells = [str(trial.number), *(word(trial.params[d.path]) if d.path in trial.params else "" for d in
                                      self.dims),
                 "—" if trial.value is None else f"{trial.value:.5g}", trial.state, trial.message]
        for column, text in enumerate(cells):
            item = QTableWidgetItem(text)
            item.setToolTip(STATE_TIPS.get(trial.state, "") if column == len(cells) - 2 else text)
            self.table.setItem(row, column, item)

    def _mark_best(self, number: int | None) -> None:
        for row, trial in enumerate(self.trials.values()):
            for column in range(self.table.columnCount()):
                item = self.table.item(row, column)
                if item is not None:
                    font = QFont(item.font())
                    font.setBold(trial.number == number)
                    item.setFont(font)

    def _finished(self, event: Finished) -> None:
        self.finished = event
        best = event.result.get("best")
        self.best = best if isinstance(best, dict) else None
        self.result.setText(f"{event.reason}: {event.message}")
        self.progress.setValue(1000 if event.reason == "completed" else self.progress.value())
        self.progress.setFormat({"completed": "search complete", "stopped": "search stopped",
                                 "failed": "search failed"}.get(event.reason, event.reason))
        self.use_btn.setEnabled(self.best is not None)
        self.open_btn.setEnabled(self.best is not None)

    def stopping(self) -> None:
        """The search was asked to stop: it ends once the running trial has saved."""
        self.stop_btn.setEnabled(False)
        self.progress.setFormat("stopping: the running trial saves a checkpoint…")

    def end(self, error: str = "") -> None:
        """The search's task ended (its last event shown, or `error`, why it could not go on)."""
        self.stop_btn.setEnabled(False)
        if error:
            self.result.setProperty("role", "error")
            self.result.style().polish(self.result)
            self.result.setText(error)
            self.progress.setFormat("search failed")

    # --- the best trial ---
    def best_params(self) -> dict[str, Any]:
        return dict(self.best.get("params") or {}) if self.best else {}

    def best_run(self) -> str:
        return str(self.best.get("run_dir") or "") if self.best else ""

    def note(self, text: str) -> None:
        """A line under the progress (what Use the best settings filled, where)."""
        self.result.setText(text)
