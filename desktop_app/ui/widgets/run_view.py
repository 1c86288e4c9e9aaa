"""The display of one run: progress bar and text, the metric plots, the record preview and the self-play task
browser beside them, the log and the samples below, and what to do next once a run ends. Every event goes through
`show(event)`, whether it comes live from a training in this window, as the History of a run shown again (or of a
resumed run up to its checkpoint), or as the History batches of a run that another process trains (watched): a
record looks the same whichever way it arrives.

Progress: a run with a time limit (TrainSpec.time_budget_s) reports its progress by the clock (metrics["progress"]
and eta_s); the bar follows whatever the run reports, so a 2-minute demo with a cap of 100,000 steps reads
"step 52 · 43% of its time limit · ETA 1:07", not "step 52/100,000 · 0%". Before its first step the bar follows the
engine's setup (Progress "setup": checking the base, loading it and the data; then Started and Progress "training":
"step 1 of 400 running"): on a CPU the first step of a LoRA run on a 135M base takes most of a minute, and the bar
must not still say "starting" while it runs. The ETA shows once the engine has one (after a few steps).
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
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QSlider,
    QTabWidget,
    QTextBrowser,
    QToolButton,
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
    SaveBlocked,
    StageStarted,
    Started,
    StepMetrics,
)
from desktop_app.engine.methods import method_of
from desktop_app.engine.run_folder import RUN_FILE, list_committed, read_json
from desktop_app.engine.train.tracking import has_event_files, installed
from desktop_app.ui.widgets.layouts import add_items, button, note_label, progress_bar, scroll_area, splitter
from desktop_app.ui.widgets.method_plots import MethodPlots
from desktop_app.ui.widgets.save_blocked_banner import SaveBlockedBanner
from desktop_app.ui.widgets.selfplay_help import curves_note, legend_html
from desktop_app.ui.widgets.task_browser import LOG_NAME as SELFPLAY_LOG
from desktop_app.ui.widgets.task_browser import TaskBrowser
from desktop_app.ui.widgets.tensorboard_launcher import TensorBoardLauncher

# The plot panels each method's curves go to (methods.py keys; LoRA and QLoRA plot as SFT).
PLOT_FAMILY = {"pretraining": "pretraining", "sft": "sft", "lora": "sft", "qlora": "sft", "dpo": "dpo",
               "grpo": "grpo", "selfplay": "selfplay"}
LIVE, HISTORY, WATCHED = "live", "history", "watched"  # how an event reached the display
NEXT_STEPS = (("chat", "Chat with it", "Open the model in the Generate tab"),
              ("export", "Export…", "Select it in the Library to export it (Hugging Face folder, zip, GGUF)"),
              ("merge", "Merge and export…", "Merge the adapters into the base and export the result (Library)"),
              ("finetune", "Fine-tune it", "Use this model as the base of a fine-tuning run"))
DEFAULT_SMOOTHING = 60  # of 100: a short run's smoothed curve keeps up with it


def format_eta(seconds: float) -> str:
    if not seconds or seconds != seconds or seconds < 0:
        return "–"
    seconds = round(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def eta_text(item: StepMetrics, frac: float) -> str:
    """" · ETA 5:51", or what stands for it: the engine gives no ETA before a session's first few steps (eta_s 0)."""
    if item.eta_s and item.eta_s > 0:
        return f" · ETA {format_eta(item.eta_s)}"
    return "" if frac >= 1.0 else " · ETA after a few steps"


def progress_text(event: Progress, activity: str) -> tuple[str, int | None]:
    """(bar text, bar value or None to keep it) of a Progress: a training's setup phase or first step, or a stage of
    preparing data (`activity`: what it prepares)."""
    if event.stage == "setup":
        return f"starting: {event.message}…", None
    frac = event.done / event.total if event.total else 0.0
    if event.stage == "training":
        return f"{event.message}…", int(frac * 1000)
    return f"{activity or 'preparing'}: {event.stage} {frac:.0%}", int(frac * 1000)


def step_progress(item: StepMetrics) -> tuple[float, str]:
    """(fraction done, "step …" text) of a step record: by the clock when the run's time limit leads its steps."""
    by_steps = item.step / item.total_steps if item.total_steps else 0.0
    reported = item.metrics.get("progress")
    if isinstance(reported, (int, float)) and not isinstance(reported, bool) and reported > by_steps + 1e-9:
        frac = min(1.0, float(reported))
        return frac, f"step {item.step:,} · {frac:.0%} of its time limit"
    return by_steps, f"step {item.step:,}/{item.total_steps:,} · {by_steps:.0%}"


def run_method_key(run_dir: str | Path) -> str:
    """The method of a run folder (methods.py key), from its run.json; a run that writes self-play rounds is
    self-play even when its run.json does not say so (the demo's, so far)."""

    config = read_json(Path(run_dir) / RUN_FILE)
    key = method_of(config).key if isinstance(config, dict) else "pretraining"
    return "selfplay" if key == "pretraining" and (Path(run_dir) / SELFPLAY_LOG).exists() else key


def esc(text: str) -> str:
    return html.escape(text).replace("\n", "<br>")


def sample_html(event: Sample) -> str:
    """A sample at an evaluation: the prompt greyed on its own lines, the model's text below it (a chat prompt ends
    with the role's name: it must not run into the reply)."""
    prompt = (f"<div style='color:#6b7280; white-space:pre-wrap'>{esc(event.prompt)}</div>" if event.prompt.strip()
              else "<div style='color:#6b7280'><i>(from the start of the text)</i></div>")
    return (f"<p><b>step {event.step:,}</b></p>{prompt}"
            f"<div style='margin-left:12px; white-space:pre-wrap'>↳ {esc(event.text)}</div><hr>")


class RunView(QWidget):
    """Plots, progress, log, samples and task browser of the run shown. `begin` starts a display for new work;
    `show` renders each event. `preview` (the record preview) becomes a page beside the curves."""

    step_shown = Signal(object)  # a live StepMetrics whose progress was just drawn (~10 times a second at most)
    error = Signal(object)  # an exception of an export, for the window to report
    next_step = Signal(str, str)  # (action of NEXT_STEPS, run folder): what to do with a run that ended

    def __init__(self, preview: QWidget, parent: QWidget | None = None):
        super().__init__(parent)
        self.training = False  # the events come from a training in this window (not a replay or a watch)
        self.activity = ""  # what Progress events measure ("preparing the sample corpus")
        self.pipeline_stages = 0  # stages of the pipeline shown (0: a single run)
        self.stage_prefix = ""  # "stage 2/3 'dpo' · " while a pipeline stage runs
        self.paused = False
        self.last_finished: Finished | None = None
        self.last_step = 0  # the last step seen (a Finished that does not carry its step)
        self.run_dir = ""  # the run folder shown (its last RunFolder)
        self.method = "pretraining"
        self._progress_t = 0.0

        self.progress = progress_bar("ready")
        self.progress.setObjectName("trainProgress")
        self.status_label = note_label()
        self.watch_bar = self._make_watch_bar()
        self.next_bar = self._make_next_bar()
        views = self._make_views(preview)
        bottom = self._make_log_tabs()
        self.splitter = splitter(Qt.Orientation.Vertical, [views, bottom], stretch=(4, 1), sizes=(600, 110),
                                 collapsible=False)
        self.blocked_banner = SaveBlockedBanner()  # a save the disk refused: Retry / Save elsewhere… / Stop
        add_items(QVBoxLayout(self), self.watch_bar, self.blocked_banner, self.progress, self.status_label,
                  self.next_bar, (self.splitter, 1), margins=0)
        self._connect_plot_bar()

    def _make_watch_bar(self) -> QWidget:
        """What a watched run shows on top: which run, Stop watching, and Stop the run when the window launched its
        processes (hidden otherwise)."""
        self.watch_label = QLabel("")
        self.watch_label.setObjectName("watchLabel")
        self.watch_label.setWordWrap(True)
        self.stop_watch_btn = button("Stop watching", "stopWatching", "The window stops following the run; its "
                                     "processes go on training")
        self.stop_run_btn = button("Stop the run", "stopWatchedRun", "Its processes finish the step they are on, "
                                   "save a checkpoint and end; Resume continues it later")
        bar = QWidget()
        bar.setObjectName("watchBar")
        add_items(QHBoxLayout(bar), (self.watch_label, 1), self.stop_run_btn, self.stop_watch_btn, margins=0)
        bar.setVisible(False)
        return bar

    def _make_curves(self) -> QWidget:
        """The metric plots under their bar: log scale, smoothing, PNG and CSV export."""
        self.plots = MethodPlots()
        self.log_check = QCheckBox("Log scale")
        self.log_check.setToolTip("Loss, learning rate and gradient norm on a logarithmic axis")
        self.smooth_slider = QSlider(Qt.Orientation.Horizontal)
        self.smooth_slider.setRange(0, 99)
        self.smooth_slider.setValue(DEFAULT_SMOOTHING)
        self.smooth_slider.setMaximumWidth(120)
        self.smooth_slider.setToolTip("Smoothing of the training loss curve (exponential moving average; 0 = off)")
        self.smooth_value = QLabel(f"{DEFAULT_SMOOTHING / 100:.2f}")
        self.png_btn = QPushButton("Export PNG…")
        self.csv_btn = QPushButton("Export CSV…")
        self.tensorboard_btn = button("Open in TensorBoard", "openTensorBoard")
        self.tensorboard_btn.setToolTip("Serve this run's event files with TensorBoard on this machine and open it in "
                                        "the browser")
        self.tensorboard_btn.setVisible(False)
        self.tensorboard = TensorBoardLauncher(self)
        plot_bar = add_items(QHBoxLayout(), self.log_check, margins=0)
        plot_bar.addSpacing(8)
        add_items(plot_bar, QLabel("Smoothing"), self.smooth_slider, self.smooth_value)
        plot_bar.addStretch(1)
        add_items(plot_bar, self.tensorboard_btn, self.png_btn, self.csv_btn)
        self.plot_scroll = scroll_area(self.plots)  # any number of metric panels: scrolls, never grows the window
        self.selfplay_note = note_label(curves_note())  # shown for self-play: what its lines and rewards mean
        self.selfplay_note.setObjectName("selfplayNote")
        self.selfplay_note.setToolTip(legend_html())
        self.selfplay_note.setMinimumWidth(40)
        self.selfplay_note.setVisible(False)
        curves = QWidget()
        cl = add_items(QVBoxLayout(curves), plot_bar, self.selfplay_note, (self.plot_scroll, 1))
        cl.setContentsMargins(4, 4, 4, 0)
        return curves

    def _make_views(self, preview: QWidget) -> QTabWidget:
        # The curves, the record preview and the task browser are pages of one view: opening the preview or the
        # browser takes the whole height instead of squeezing the plots.
        curves = self._make_curves()
        self.task_browser = TaskBrowser()
        views = QTabWidget()
        views.setObjectName("runViews")
        views.addTab(curves, "Curves")
        self.preview_index = views.addTab(preview, "Record preview")
        self.browser_index = views.addTab(self.task_browser, "Task buffer")
        views.setTabToolTip(self.preview_index, "One record of your data, rendered through the base model's chat "
                                                "template: which tokens carry loss")
        views.setTabToolTip(self.browser_index, "Self-play: the proposed tasks and the last round's rollouts")
        self.view_tabs = views
        return views

    def _make_log_tabs(self) -> QTabWidget:
        """The log and the samples, as two pages below the views."""
        self.log_view = QPlainTextEdit()
        self.log_view.setReadOnly(True)
        self.log_view.setMaximumBlockCount(5000)
        self.log_view.setObjectName("trainLog")
        self.samples_view = QTextBrowser()
        self.samples_view.setObjectName("samplesView")
        bottom = QTabWidget()
        bottom.setObjectName("runLogTabs")
        bottom.addTab(self.log_view, "Log")
        self.samples_index = bottom.addTab(self.samples_view, "Samples")
        bottom.setTabToolTip(self.samples_index, "What the model writes at each evaluation")
        bottom.setMinimumHeight(80)
        self.log_tabs = bottom
        return bottom

    def _connect_plot_bar(self) -> None:
        self.log_check.toggled.connect(self.plots.set_log_y)
        self.smooth_slider.valueChanged.connect(self._on_smoothing)
        self.plots.set_smoothing(DEFAULT_SMOOTHING / 100)
        self.png_btn.clicked.connect(lambda _=False: self._export("Export plots", "training.png", "PNG image (*.png)",
                                                                  self.plots.export_png))
        self.csv_btn.clicked.connect(lambda _=False: self._export("Export metrics", "metrics.csv", "CSV (*.csv)",
                                                                  self.plots.export_csv))
        self.tensorboard_btn.clicked.connect(lambda _=False: self.tensorboard.open(self.run_dir))
        self.tensorboard.error.connect(lambda message: self.log("error", message))  # in this view's log
        self.tensorboard.opened.connect(lambda url: self.log("info", f"TensorBoard shows this run at {url}"))

    def _make_next_bar(self) -> QFrame:
        bar = QFrame()
        bar.setObjectName("nextSteps")
        row = QHBoxLayout(bar)
        row.setContentsMargins(8, 4, 8, 4)
        self.next_label = QLabel("")
        self.next_label.setWordWrap(True)
        row.addWidget(self.next_label, 1)
        self.next_buttons: dict[str, QPushButton] = {}
        for action, text, tip in NEXT_STEPS:
            button = QPushButton(text)
            button.setObjectName(f"next_{action}")
            button.setToolTip(tip)
            button.clicked.connect(lambda _=False, a=action: self.next_step.emit(a, self.run_dir))
            row.addWidget(button)
            self.next_buttons[action] = button
        self.next_buttons["chat"].setProperty("primary", True)
        dismiss = QToolButton()
        dismiss.setText("✕")
        dismiss.setToolTip("Hide")
        dismiss.setAutoRaise(True)
        dismiss.clicked.connect(lambda _=False: bar.setVisible(False))
        row.addWidget(dismiss)
        bar.setVisible(False)
        return bar

    # --- a new display ---
    def begin(self, *, training: bool, progress: str = "", status: str = "", activity: str = "",
              pipeline_stages: int = 0, clear: bool = True) -> None:
        """Start showing new work: a training of this window (training=True), a replay or a watched run."""
        self.training, self.activity, self.pipeline_stages = training, activity, pipeline_stages
        self.stage_prefix, self.paused, self.last_finished, self.last_step = "", False, None, 0
        self.next_bar.setVisible(False)
        self.blocked_banner.dismiss()
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
        self.method = key
        self.plots.set_method(PLOT_FAMILY.get(key, "pretraining"))
        self.selfplay_note.setVisible(PLOT_FAMILY.get(key) == "selfplay")

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

    def show_watching(self, run_dir: Path, *, stoppable: bool = False) -> None:
        """The watch bar for `run_dir`; `stoppable`: its processes are the window's launch, so Stop the run shows."""
        self.stop_run_btn.setVisible(stoppable)
        self.stop_run_btn.setEnabled(stoppable)
        where = "left running by the window" if stoppable else "launched outside the window"
        self.watch_label.setText(f"<b>Watching {esc(run_dir.name)}</b> ({where}) — read-only: "
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
            frac, text = step_progress(last)
            loss = last.metrics.get("loss")
            self.set_progress(f"{'watching' if history.live else 'history'}: {text}"
                              + (f" · loss {loss:.3f}" if history.live and isinstance(loss, float) else ""),
                              int(frac * 1000))

    def _render(self, event: Event, how: str) -> None:
        # A replayed history shows curves and samples only: its log lines, checkpoints and end are old news.
        # A watched run's are news, as a live run's are.
        if how == LIVE and isinstance(event, (CheckpointSaved, Finished, StepMetrics)):
            self.blocked_banner.dismiss()  # the blocked save was made, or the run ended
        if isinstance(event, SaveBlocked):
            self._show_blocked(event)
        elif isinstance(event, StepMetrics):
            self.last_step = event.step
            self.plots.add_metrics(event.step, event.metrics)
            if how == LIVE:
                self._show_step(event)
        elif isinstance(event, EvalResult):
            self.plots.add_metrics(event.step, event.metrics)
            if how == LIVE:
                self.log("info", f"step {event.step}: " + ", ".join(
                    f"{k} {v:.4g}" for k, v in event.metrics.items() if isinstance(v, (int, float))))
        elif isinstance(event, Sample):
            bar = self.samples_view.verticalScrollBar()
            following = bar.value() >= bar.maximum() - 4
            self.samples_view.append(sample_html(event))
            if following:  # the newest sample in view, unless the user scrolled up to read an older one
                bar.setValue(bar.maximum())
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
            text, value = progress_text(event, self.activity)
            self.set_progress(self.stage_prefix + text, value)
        elif isinstance(event, Started) and how == LIVE:
            self.set_progress(f"{self.stage_prefix}training on {event.device}: step {event.start_step + 1:,} running…")
        elif isinstance(event, RunFolder):
            self._show_run_folder(event)
        elif isinstance(event, StageStarted):
            n = self.pipeline_stages
            self.stage_prefix = f"stage {event.index + 1}/{n} '{event.name}' · " if 0 <= event.index < n else ""
            self.set_method(event.method)
            self.clear()  # the curves of this stage (its steps start again at 1)
            self.set_progress(f"{self.stage_prefix}starting…", 0)

    def _show_blocked(self, event: SaveBlocked) -> None:
        self.blocked_banner.show_blocked(event)
        self.log("warning", event.message)
        self.set_progress(f"{self.stage_prefix}paused at step {event.step:,}: the checkpoint could not be saved")

    def _show_step(self, item: StepMetrics) -> None:
        now = time.perf_counter()
        frac, text = step_progress(item)
        if now - self._progress_t < 0.1 and frac < 1.0:
            return  # text/bar repaint at most ~10x a second: the GUI thread shares the GIL with training
        self._progress_t = now
        loss = item.metrics.get("loss")
        reward = item.metrics.get("reward")
        self.set_progress(f"{self.stage_prefix}{text}{eta_text(item, frac)}"
                          + (f" · loss {loss:.3f}" if isinstance(loss, float) else "")
                          + (f" · reward {reward:+.3f}" if isinstance(reward, float) else "")
                          + (" · paused" if self.paused else ""), int(frac * 1000))
        self.step_shown.emit(item)

    def _show_finished(self, item: Finished, *, watched: bool) -> None:
        self.last_finished = item
        step = item.step or self.last_step  # a Finished that does not carry its step: the last one seen
        if watched:
            self.log("info", f"the watched run finished: {item.reason} at step {step}")
            self.progress.setFormat(f"watched run {item.reason.replace('_', ' ')} at step {step:,}")
        else:
            where = "" if self.pipeline_stages else f" at step {step:,}"  # a pipeline's step: stages done
            # the engine's message often starts with what this line says already ("stopped at step 27")
            said = f"{item.reason}{where}"
            rest = item.message.removeprefix(said).removeprefix(said.replace(",", "")).lstrip(" :—-")
            level = "info" if item.reason != "failed" else "error"
            self.log(level, f"finished: {said}" + (f" — {rest}" if rest else ""))
            self.progress.setFormat(("pipeline " if self.pipeline_stages else "")
                                    + f"{item.reason.replace('_', ' ')}{where}")
        if item.reason == "completed":
            self.progress.setValue(1000)

    def offer_next_steps(self, run_dir: str = "") -> bool:
        """A run that ended with a model to use: offer to chat with it, export it (merged, for adapters) or
        fine-tune it further (the tab asks once its job is over: a demo's or pipeline's inner runs end before it).
        False when the run has no checkpoint to offer."""

        if not (run_dir or self.run_dir):
            return False
        run = Path(run_dir or self.run_dir)
        if not list_committed(run):
            return False
        self.run_dir = str(run)
        config = read_json(run / RUN_FILE)
        adapter = config.get("adapter") if isinstance(config, dict) else None
        adapters = isinstance(adapter, dict) and adapter.get("kind") in ("lora", "qlora")
        self.next_buttons["merge"].setVisible(adapters)
        self.next_buttons["export"].setVisible(not adapters)
        self.next_label.setText(f"<b>{esc(run.name)}</b> is ready. Next:")
        self.next_bar.setVisible(True)
        return True

    def _show_run_folder(self, event: RunFolder) -> None:
        """A run starts (or resumes, or is shown again): a fresh display in its method's panels."""
        has_rounds = (Path(event.path) / SELFPLAY_LOG).exists()
        # a self-play run whose run.json does not name its method (the demo's, so far) is still self-play
        method = "selfplay" if event.method == "pretraining" and has_rounds else event.method
        self.run_dir = event.path
        # TensorBoard installed here and the run wrote event files (its trackers): offer to open it there
        self.tensorboard_btn.setVisible(installed("tensorboard") and has_event_files(event.path))
        self.set_method(method)
        self.clear()
        if self.training and method == "selfplay":
            self.task_browser.start_live(event.path)  # the rounds as the run writes them
        elif has_rounds:
            self.task_browser.set_run(event.path)
        self.view_tabs.setTabVisible(self.browser_index, method == "selfplay" or self.view_tabs.isTabVisible(
            self.browser_index))

    # --- the plot bar ---
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

    def stop_timers(self) -> None:
        self.tensorboard.stop_all()
        self.plots.stop_timers()
        self.task_browser.stop_timers()
