"""The display of one run: progress bar and text, the metric plots, the log, the samples and the self-play task
browser. Every event goes through `show(event)`, whether it comes live from a training in this window, as the
History of a run shown again (or of a resumed run up to its checkpoint), or as the History batches of a run that
another process trains (watched): a record looks the same whichever way it arrives.
"""

from __future__ import annotations

import html
import time
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSlider,
    QSplitter,
    QTabWidget,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from desktop_app.engine.events import (
    CheckpointSaved,
    EvalResult,
    Event,
    Finished,
    History,
    Log,
    Progress,
    Reset,
    RunFolder,
    Sample,
    StageStarted,
    StepMetrics,
)
from desktop_app.ui.widgets.method_plots import MethodPlots
from desktop_app.ui.widgets.task_browser import LOG_NAME as SELFPLAY_LOG
from desktop_app.ui.widgets.task_browser import TaskBrowser

# The plot panels each method's curves go to (methods.py keys; LoRA and QLoRA plot as SFT).
PLOT_FAMILY = {"pretraining": "pretraining", "sft": "sft", "lora": "sft", "qlora": "sft", "dpo": "dpo",
               "grpo": "grpo", "selfplay": "selfplay"}
LIVE, HISTORY, WATCHED = "live", "history", "watched"  # how an event reached the display


def format_eta(seconds: float) -> str:
    if not seconds or seconds != seconds or seconds < 0:
        return "–"
    seconds = round(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def esc(text: str) -> str:
    return html.escape(text).replace("\n", "<br>")


class RunView(QWidget):
    """Plots, progress, log, samples and task browser of the run shown. `begin` starts a display for new work;
    `show` renders each event. `preview` (the record preview) becomes a page beside the log."""

    step_shown = Signal(object)  # a live StepMetrics whose progress was just drawn (~10 times a second at most)
    error = Signal(object)  # an exception of an export, for the window to report

    def __init__(self, preview: QWidget, parent: QWidget | None = None):
        super().__init__(parent)
        self.training = False  # the events come from a training in this window (not a replay or a watch)
        self.activity = ""  # what Progress events measure ("preparing the sample corpus")
        self.pipeline_stages = 0  # stages of the pipeline shown (0: a single run)
        self.stage_prefix = ""  # "stage 2/3 'dpo' · " while a pipeline stage runs
        self.paused = False
        self.last_finished: Finished | None = None
        self._progress_t = 0.0

        self.progress = QProgressBar()
        self.progress.setObjectName("trainProgress")
        self.progress.setRange(0, 1000)
        self.progress.setFormat("ready")
        self.progress.setValue(0)
        self.status_label = QLabel("")
        self.status_label.setProperty("role", "muted")
        self.status_label.setWordWrap(True)
        self.plots = MethodPlots()
        self.log_check = QCheckBox("Log scale")
        self.smooth_slider = QSlider(Qt.Orientation.Horizontal)
        self.smooth_slider.setRange(0, 99)
        self.smooth_slider.setValue(90)
        self.smooth_slider.setMaximumWidth(140)
        self.smooth_slider.setToolTip("Smoothing of the training loss curve (exponential moving average)")
        self.smooth_value = QLabel("0.90")
        self.png_btn = QPushButton("Export PNG…")
        self.csv_btn = QPushButton("Export CSV…")
        plot_bar = QHBoxLayout()
        plot_bar.addWidget(self.log_check)
        plot_bar.addSpacing(10)
        plot_bar.addWidget(QLabel("Smoothing"))
        plot_bar.addWidget(self.smooth_slider)
        plot_bar.addWidget(self.smooth_value)
        plot_bar.addStretch(1)
        plot_bar.addWidget(self.png_btn)
        plot_bar.addWidget(self.csv_btn)
        self.watch_label = QLabel("")
        self.watch_label.setObjectName("watchLabel")
        self.watch_label.setWordWrap(True)
        self.stop_watch_btn = QPushButton("Stop watching")
        self.stop_watch_btn.setObjectName("stopWatching")
        self.watch_bar = QWidget()
        self.watch_bar.setObjectName("watchBar")
        wl = QHBoxLayout(self.watch_bar)
        wl.setContentsMargins(0, 0, 0, 0)
        wl.addWidget(self.watch_label, 1)
        wl.addWidget(self.stop_watch_btn)
        self.watch_bar.setVisible(False)
        plots_panel = QWidget()
        pl = QVBoxLayout(plots_panel)
        pl.setContentsMargins(0, 0, 0, 0)
        pl.addWidget(self.watch_bar)
        pl.addWidget(self.progress)
        pl.addWidget(self.status_label)
        pl.addLayout(plot_bar)
        plot_scroll = QScrollArea()
        plot_scroll.setWidgetResizable(True)
        plot_scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        plot_scroll.setWidget(self.plots)  # any number of metric panels; scrolls instead of growing the window
        pl.addWidget(plot_scroll, 1)

        self.log_view = QPlainTextEdit()
        self.log_view.setReadOnly(True)
        self.log_view.setMaximumBlockCount(5000)
        self.log_view.setObjectName("trainLog")
        self.samples_view = QTextBrowser()
        self.samples_view.setObjectName("samplesView")
        self.task_browser = TaskBrowser()
        bottom = QTabWidget()
        bottom.addTab(self.log_view, "Log")
        bottom.addTab(self.samples_view, "Samples at each evaluation")
        self.preview_index = bottom.addTab(preview, "Record preview")
        self.browser_index = bottom.addTab(self.task_browser, "Task buffer")
        bottom.setTabToolTip(self.preview_index, "One record of your data, rendered through the base model's chat "
                                                 "template: which tokens carry loss")
        bottom.setTabToolTip(self.browser_index, "Self-play: the proposed tasks and the last round's rollouts")
        self.bottom_tabs = bottom
        bottom.setMinimumHeight(90)  # the preview and the browser would otherwise claim half the height
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(plots_panel)
        splitter.addWidget(bottom)
        splitter.setStretchFactor(0, 4)
        splitter.setStretchFactor(1, 1)
        splitter.setSizes([560, 170])
        self.splitter = splitter
        self._sizes_before_tall: list[int] | None = None
        root = QVBoxLayout(self)
        root.setContentsMargins(0, 0, 0, 0)
        root.addWidget(splitter)

        bottom.currentChanged.connect(self._on_bottom_tab)
        self.log_check.toggled.connect(self.plots.set_log_y)
        self.smooth_slider.valueChanged.connect(self._on_smoothing)
        self.png_btn.clicked.connect(lambda _=False: self._export("Export plots", "training.png", "PNG image (*.png)",
                                                                  self.plots.export_png))
        self.csv_btn.clicked.connect(lambda _=False: self._export("Export metrics", "metrics.csv", "CSV (*.csv)",
                                                                  self.plots.export_csv))

    # --- a new display ---
    def begin(self, *, training: bool, progress: str = "", status: str = "", activity: str = "",
              pipeline_stages: int = 0, clear: bool = True) -> None:
        """Start showing new work: a training of this window (training=True), a replay or a watched run."""
        self.training, self.activity, self.pipeline_stages = training, activity, pipeline_stages
        self.stage_prefix, self.paused, self.last_finished = "", False, None
        if clear:
            self.clear()
        if progress:
            self.set_progress(progress, 0)
        if status:
            self.status_label.setText(status)

    def end(self) -> None:
        """The work shown ended: draw what is pending, stop following the self-play log."""
        self.plots.flush()
        if self.task_browser.timer.isActive():
            self.task_browser.stop_live()

    def clear(self) -> None:
        self.plots.clear()
        self.samples_view.clear()

    def set_method(self, key: str) -> None:
        """The plot panels of a method (methods.py key) shown while nothing is plotted."""
        self.plots.set_method(PLOT_FAMILY.get(key, "pretraining"))

    def set_progress(self, text: str, value: int | None = None) -> None:
        if value is not None:
            self.progress.setValue(value)
        self.progress.setFormat(text)

    def log(self, level: str, message: str) -> None:
        prefix = {"warning": "⚠ ", "error": "✖ "}.get(level, "")
        self.log_view.appendPlainText(f"{time.strftime('%H:%M:%S')}  {prefix}{message}")

    def note(self, line: str) -> None:
        """A separator line in the log where new work starts."""
        self.log_view.appendPlainText(f"— {time.strftime('%H:%M:%S')} {line}")

    def show_watching(self, run_dir: Path) -> None:
        self.watch_label.setText(f"<b>Watching {esc(run_dir.name)}</b> (launched outside the window) — read-only: "
                                 f"the curves follow its metrics.jsonl; nothing is written to the run.")
        self.watch_label.setToolTip(str(run_dir))
        self.watch_bar.setVisible(True)

    def hide_watching(self) -> None:
        self.watch_bar.setVisible(False)

    # --- events ---
    def show(self, event: Event) -> None:
        """Render one event (a History: each of its records, as the events they were written from)."""
        if isinstance(event, History):
            self._show_history(event)
        else:
            self._render(event, LIVE)

    def _show_history(self, history: History) -> None:
        how = WATCHED if history.live else HISTORY
        last: StepMetrics | None = None
        ended = False
        for event in history.events():
            self._render(event, how)
            if isinstance(event, StepMetrics):
                last = event
            elif isinstance(event, Finished) and history.live:
                ended = True  # the watched run's end: its words stay on the bar
        self.plots.flush()
        if last is not None and last.total_steps and not ended:
            frac = last.step / last.total_steps
            loss = last.metrics.get("loss")
            self.set_progress(f"{'watching' if history.live else 'history'}: step {last.step:,}/"
                              f"{last.total_steps:,} · {frac:.0%}"
                              + (f" · loss {loss:.3f}" if history.live and isinstance(loss, float) else ""),
                              int(frac * 1000))

    def _render(self, event: Event, how: str) -> None:
        # A replayed history shows curves and samples only: its log lines, checkpoints and end are old news.
        # A watched run's are news, as a live run's are.
        if isinstance(event, StepMetrics):
            self.plots.add_metrics(event.step, event.metrics)
            if how == LIVE:
                self._show_step(event)
        elif isinstance(event, EvalResult):
            self.plots.add_metrics(event.step, event.metrics)
            if how == LIVE:
                self.log("info", f"step {event.step}: " + ", ".join(
                    f"{k} {v:.4g}" for k, v in event.metrics.items() if isinstance(v, (int, float))))
        elif isinstance(event, Sample):
            prompt = f"<span style='color:#6b7280'>{esc(event.prompt)}</span>" if event.prompt else ""
            self.samples_view.append(f"<p><b>step {event.step}</b><br>{prompt}{esc(event.text)}</p>")
        elif how == HISTORY:
            return
        elif isinstance(event, CheckpointSaved):
            self.log("info", f"checkpoint saved at step {event.step}{' (best so far)' if event.best else ''}: "
                             f"{event.path}")
        elif isinstance(event, Log):
            self.log(event.level, event.message)
        elif isinstance(event, Finished):
            self._show_finished(event, watched=how == WATCHED)
        elif isinstance(event, Reset):  # a watched file cut back (a resume) or replaced: its records come again
            self.clear()
            self.log("info", "the watched run's metrics were cut back (resumed from a checkpoint): replaying")
        elif isinstance(event, Progress):
            frac = event.done / event.total if event.total else 0
            self.set_progress(f"{self.activity or 'preparing'}: {event.stage} {frac:.0%}", int(frac * 1000))
        elif isinstance(event, RunFolder):
            self._show_run_folder(event)
        elif isinstance(event, StageStarted):
            n = self.pipeline_stages
            self.stage_prefix = f"stage {event.index + 1}/{n} '{event.name}' · " if 0 <= event.index < n else ""
            self.set_method(event.method)
            self.clear()  # the curves of this stage (its steps start again at 1)
            self.set_progress(f"{self.stage_prefix}starting…", 0)

    def _show_step(self, item: StepMetrics) -> None:
        now = time.perf_counter()
        if now - self._progress_t < 0.1 and item.step < item.total_steps:
            return  # text/bar repaint at most ~10x a second: the GUI thread shares the GIL with training
        self._progress_t = now
        frac = item.step / item.total_steps if item.total_steps else 0.0
        frac = float(item.metrics.get("progress", frac))  # a run with a time limit: the clock's share
        loss = item.metrics.get("loss")
        reward = item.metrics.get("reward")
        self.set_progress(f"{self.stage_prefix}step {item.step:,}/{item.total_steps:,} · {frac:.0%} · ETA "
                          f"{format_eta(item.eta_s)}" + (f" · loss {loss:.3f}" if isinstance(loss, float) else "")
                          + (f" · reward {reward:+.3f}" if isinstance(reward, float) else "")
                          + (" · paused" if self.paused else ""), int(frac * 1000))
        self.step_shown.emit(item)

    def _show_finished(self, item: Finished, *, watched: bool) -> None:
        self.last_finished = item
        if watched:
            self.log("info", f"the watched run finished: {item.reason} at step {item.step}")
            self.progress.setFormat(f"watched run {item.reason.replace('_', ' ')} at step {item.step:,}")
        else:
            where = "" if self.pipeline_stages else f" at step {item.step:,}"  # a pipeline's step: stages done
            self.log("info" if item.reason != "failed" else "error",
                     f"finished: {item.reason}{where}" + (f" — {item.message}" if item.message else ""))
            self.progress.setFormat(("pipeline " if self.pipeline_stages else "")
                                    + f"{item.reason.replace('_', ' ')}{where}")
        if item.reason == "completed":
            self.progress.setValue(1000)

    def _show_run_folder(self, event: RunFolder) -> None:
        """A run starts (or resumes, or is shown again): a fresh display in its method's panels."""
        self.set_method(event.method)
        self.clear()
        if self.training and event.method == "selfplay":
            self.task_browser.start_live(event.path)  # the rounds as the run writes them
        elif (Path(event.path) / SELFPLAY_LOG).exists():
            self.task_browser.set_run(event.path)

    # --- the plot bar and the bottom pages ---
    def _on_smoothing(self, value: int) -> None:
        self.smooth_value.setText(f"{value / 100:.2f}")
        self.plots.set_smoothing(value / 100)

    def _export(self, title: str, default_name: str, file_filter: str, write: Callable[[str], None]) -> None:
        path, _ = QFileDialog.getSaveFileName(self, title, default_name, file_filter)
        if path:
            try:
                write(path)
            except Exception as exc:
                self.error.emit(exc)

    def _on_bottom_tab(self, index: int) -> None:
        """The record preview and the task browser need room: give them half the height while shown."""
        sizes = self.splitter.sizes()
        total = sum(sizes)
        if index in (self.preview_index, self.browser_index):
            share = 0.5 if index == self.preview_index else 0.62
            if total and sizes[1] < (share - 0.05) * total:
                self._sizes_before_tall = self._sizes_before_tall or sizes
                self.splitter.setSizes([round(total * (1 - share)), total - round(total * (1 - share))])
        elif self._sizes_before_tall is not None:
            self.splitter.setSizes(self._sizes_before_tall)
            self._sizes_before_tall = None

    def stop_timers(self) -> None:
        self.plots.stop_timers()
        self.task_browser.stop_timers()
