"""Train tab: method, hyperparameters, start/pause/stop/save-now/resume, live curves, log and samples."""

from __future__ import annotations

import json
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QGroupBox,
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
    Controls,
    EvalResult,
    Finished,
    Log,
    Progress,
    Sample,
    StepMetrics,
)
from desktop_app.engine.specs import OBJECTIVES, DataSpec, ModelSpec, RunConfig, TrainSpec
from desktop_app.ui.context import AppContext
from desktop_app.ui.widgets.live_plot import LivePlots
from desktop_app.ui.widgets.spec_form import SpecForm

SAMPLE_DATASET = ""  # combo data of "prepare the sample corpus automatically"

METHOD_LABELS = {"causal_lm": "Pretraining (next-token prediction)"}


def format_eta(seconds: float) -> str:
    if not seconds or seconds != seconds or seconds < 0:
        return "–"
    seconds = round(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def _train_job(config: RunConfig, run_dir: Path, controls: Controls, resume: bool,
               sample_paths: list[str] | None, dataset_dir: Path | None, data_spec: DataSpec | None):
    """Runs in the worker thread. Optionally prepares the sample corpus first (first-launch path)."""
    if sample_paths and dataset_dir is not None and data_spec is not None:
        from desktop_app.engine.data import prepare_dataset

        done = None
        for event in prepare_dataset(sample_paths, dataset_dir, data_spec, controls=controls):
            if isinstance(event, Finished):
                done = event
            else:
                yield ("prepare", event)
        if done is None or done.reason != "completed":
            yield Finished(reason=done.reason if done else "failed",
                           message=(done.message if done else "") or "preparing the sample corpus did not finish")
            return
        config = config.replace(dataset=str(dataset_dir))
        yield ("dataset", str(dataset_dir))
    from desktop_app.engine.training import adapt_model_to_dataset, train

    if config.model and not resume:
        # Fit vocab/context to the dataset's tokenizer and windows (and say so), as the CLI's --preset does.
        from desktop_app.engine.token_store import TokenStore

        spec, notes = adapt_model_to_dataset(config.model_spec(), TokenStore(config.dataset))
        for note in notes:
            yield Log("info", f"model: {note}")
        config = config.replace(model=spec.to_dict())
    run_dir.mkdir(parents=True, exist_ok=True)
    yield ("run", str(run_dir))
    # interactive: the thread policy leaves a core to the window so the GUI stays responsive.
    yield from train(config, run_dir, controls, resume=resume, interactive=True)


def _history_job(run_dir: str):
    from desktop_app.engine.training import read_metrics

    yield ("history", run_dir, read_metrics(Path(run_dir)))


class TrainTab(QWidget):
    run_changed = Signal(str)  # run folder of the current/shown run
    checkpoint_saved = Signal(str)
    dataset_prepared = Signal(str)

    def __init__(self, ctx: AppContext, parent: QWidget | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self.model_spec: ModelSpec | None = None
        self.base_model = ""
        self.task = None
        self.run_dir: Path | None = None
        self.config: RunConfig | None = None
        self.last_finished: Finished | None = None
        self.steps_seen = 0
        self.last_step: StepMetrics | None = None
        self._t_start = 0.0
        self._progress_t = 0.0

        # --- top: what to train on what ---
        self.method_box = QComboBox()
        for obj in OBJECTIVES:
            self.method_box.addItem(METHOD_LABELS.get(obj, obj), obj)
        self.method_box.setToolTip("Training method; more methods appear here as the engine gains them")
        self.dataset_box = QComboBox()
        self.dataset_box.setObjectName("trainDatasetBox")
        self.dataset_box.setMinimumWidth(240)
        self.model_label = QLabel("")
        self.model_label.setProperty("role", "muted")
        top = QHBoxLayout()
        top.addWidget(QLabel("Method"))
        top.addWidget(self.method_box)
        top.addSpacing(12)
        top.addWidget(QLabel("Dataset"))
        top.addWidget(self.dataset_box, 1)
        top.addSpacing(12)
        top.addWidget(self.model_label, 1)

        # --- left: hyperparameters + controls ---
        self.form = SpecForm(TrainSpec)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        scroll.setWidget(self.form)
        scroll.setMinimumWidth(330)
        self.start_btn = QPushButton("Start training")
        self.start_btn.setProperty("primary", True)
        self.start_btn.setObjectName("startButton")
        self.pause_btn = QPushButton("Pause")
        self.stop_btn = QPushButton("Stop")
        self.save_btn = QPushButton("Save now")
        self.resume_btn = QPushButton("Resume a run…")
        self.cli_btn = QPushButton("Show CLI command")
        for b in (self.pause_btn, self.stop_btn, self.save_btn):
            b.setEnabled(False)
        left_box = QGroupBox("Hyperparameters")
        ll = QVBoxLayout(left_box)
        ll.addWidget(scroll, 1)
        row1 = QHBoxLayout()
        row1.addWidget(self.start_btn, 2)
        row1.addWidget(self.pause_btn, 1)
        row1.addWidget(self.stop_btn, 1)
        row2 = QHBoxLayout()
        row2.addWidget(self.save_btn)
        row2.addWidget(self.resume_btn)
        row2.addWidget(self.cli_btn)
        ll.addLayout(row1)
        ll.addLayout(row2)

        # --- right: progress, plots, log/samples ---
        self.progress = QProgressBar()
        self.progress.setObjectName("trainProgress")
        self.progress.setRange(0, 1000)
        self.progress.setFormat("ready")
        self.progress.setValue(0)
        self.status_label = QLabel("Press Start: with no dataset chosen, the bundled sample corpus is prepared first.")
        self.status_label.setProperty("role", "muted")
        self.status_label.setWordWrap(True)
        self.plots = LivePlots()
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
        plots_panel = QWidget()
        pl = QVBoxLayout(plots_panel)
        pl.setContentsMargins(0, 0, 0, 0)
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
        bottom = QTabWidget()
        bottom.addTab(self.log_view, "Log")
        bottom.addTab(self.samples_view, "Samples at each evaluation")
        self.bottom_tabs = bottom
        right = QSplitter(Qt.Orientation.Vertical)
        right.addWidget(plots_panel)
        right.addWidget(bottom)
        right.setStretchFactor(0, 4)
        right.setStretchFactor(1, 1)
        right.setSizes([560, 170])

        body = QSplitter(Qt.Orientation.Horizontal)
        body.addWidget(left_box)
        body.addWidget(right)
        body.setStretchFactor(0, 0)
        body.setStretchFactor(1, 1)
        body.setSizes([360, 880])
        root = QVBoxLayout(self)
        root.addLayout(top)
        root.addWidget(body, 1)

        self.start_btn.clicked.connect(lambda _=False: self.start())
        self.pause_btn.clicked.connect(lambda _=False: self.toggle_pause())
        self.stop_btn.clicked.connect(lambda _=False: self.stop())
        self.save_btn.clicked.connect(lambda _=False: self.save_now())
        self.resume_btn.clicked.connect(self._resume_dialog)
        self.cli_btn.clicked.connect(lambda _=False: self.show_cli_command())
        self.log_check.toggled.connect(self.plots.set_log_y)
        self.smooth_slider.valueChanged.connect(self._on_smoothing)
        self.png_btn.clicked.connect(self._export_png)
        self.csv_btn.clicked.connect(self._export_csv)
        self.form.changed.connect(lambda: self.form.validate())
        self.refresh_datasets()

    # --- inputs from other tabs ---
    def set_model_spec(self, spec: ModelSpec | None) -> None:
        self.model_spec = spec
        self._update_model_label()

    def set_base_model(self, path: str) -> None:
        self.base_model = path
        self._update_model_label()

    def _update_model_label(self) -> None:
        if self.base_model:
            self.model_label.setText(f"Model: fine-tune {Path(self.base_model).name}")
        elif self.model_spec is not None:
            from desktop_app.engine.sizing import count_parameters, human_count

            s = self.model_spec
            self.model_label.setText(f"Model: {s.family}, {human_count(count_parameters(s))} parameters, "
                                     f"{s.n_layers} layers × {s.d_model}, context {s.context_length}")
        else:
            self.model_label.setText("Model: the Model tab's spec has problems")

    def refresh_datasets(self) -> None:
        current = self.dataset_box.currentData()
        self.dataset_box.blockSignals(True)
        self.dataset_box.clear()
        self.dataset_box.addItem("Sample corpus (prepared automatically)", SAMPLE_DATASET)
        for p in self.ctx.workspace.items("datasets"):
            if (p / "manifest.json").exists():
                self.dataset_box.addItem(p.name, str(p))
        i = self.dataset_box.findData(current) if current is not None else -1
        self.dataset_box.setCurrentIndex(i if i >= 0 else (1 if self.dataset_box.count() > 1 else 0))
        self.dataset_box.blockSignals(False)

    def select_dataset(self, path: str) -> None:
        self.refresh_datasets()
        i = self.dataset_box.findData(str(path))
        if i < 0:
            self.dataset_box.addItem(Path(path).name, str(path))
            i = self.dataset_box.count() - 1
        self.dataset_box.setCurrentIndex(i)

    def use_quickstart_settings(self) -> None:
        """Short, visible first run: ~a minute on a laptop CPU with frequent evaluations."""
        spec = self.form.spec().replace(steps=300, batch_size=16, eval_every=25, eval_batches=4, log_every=1,
                                        save_every=100, warmup_steps=20, lr=2e-3, sample_tokens=32)
        self.form.set_spec(spec)

    # --- running ---
    @property
    def running(self) -> bool:
        return self.task is not None and self.task.running

    def build_config(self, dataset: str) -> RunConfig:
        tspec = self.form.spec()
        return RunConfig(model=self.model_spec.to_dict() if (self.model_spec and not self.base_model) else {},
                         base_model=self.base_model, dataset=dataset, objective=self.method_box.currentData(),
                         train=tspec.to_dict())

    def start(self) -> bool:
        if self.running:
            self.ctx.info("Training is already running.")
            return False
        tspec = self.form.spec()
        problems = tspec.validate()
        self.form.show_problems(problems)
        if problems:
            self.ctx.report_error("The hyperparameters have problems:\n" + "\n".join(problems),
                                  title="Check the settings")
            return False
        if self.model_spec is None and not self.base_model:
            self.ctx.report_error("The model spec on the Model tab has problems; fix them first.",
                                  title="Check the model")
            return False
        dataset = self.dataset_box.currentData() or SAMPLE_DATASET
        sample_paths = dataset_dir = data_spec = None
        if dataset == SAMPLE_DATASET:
            from desktop_app.engine.paths import sample_corpus_dir
            from desktop_app.engine.sample_corpus import sample_corpus_files

            corpus = sample_corpus_dir()
            files = [str(p) for p in sample_corpus_files()]
            if not files:
                self.ctx.report_error(f"No dataset chosen and the bundled sample corpus is missing ({corpus}). "
                                      "Prepare a dataset on the Data tab first.", title="No dataset")
                return False
            spec = self.model_spec or ModelSpec()
            sample_paths = files
            dataset_dir = self.ctx.workspace.new_path("datasets", f"sample-corpus-ctx{spec.context_length}")
            data_spec = DataSpec(vocab_size=spec.vocab_size, context_length=spec.context_length)
        config = self.build_config(str(dataset_dir) if dataset_dir else dataset)
        problems = [p for p in config.validate() if not (dataset_dir and p.startswith("dataset"))]
        if problems:
            self.ctx.report_error("This run cannot start:\n" + "\n".join(problems), title="Check the settings")
            return False
        name = (self.model_spec.family if self.model_spec and not self.base_model else Path(self.base_model).name)
        run_dir = self.ctx.workspace.new_run_dir(name)
        return self._launch(config, run_dir, resume=False, sample_paths=sample_paths, dataset_dir=dataset_dir,
                            data_spec=data_spec)

    def resume_run(self, run_dir: str | Path) -> bool:
        if self.running:
            self.ctx.info("Training is already running.")
            return False
        run_dir = Path(run_dir)
        try:
            config = RunConfig.load(run_dir / "run.json")
        except Exception as exc:
            self.ctx.report_exception(exc, title="Cannot resume this run")
            return False
        self.form.set_spec(config.train_spec())
        self.show_run_history(str(run_dir))
        return self._launch(config, run_dir, resume=True, clear=False)

    def _launch(self, config: RunConfig, run_dir: Path, *, resume: bool, sample_paths=None, dataset_dir=None,
                data_spec=None, clear: bool = True) -> bool:
        controls = Controls()
        self.config, self.run_dir = config, run_dir
        self.last_finished = None
        self.steps_seen = 0
        if clear:
            self.plots.clear()
            self.samples_view.clear()
        self.log_view.appendPlainText(f"— {time.strftime('%H:%M:%S')} {'resuming' if resume else 'starting'} "
                                      f"run {run_dir.name}")
        self.task = self.ctx.runner.start(
            "train", lambda: _train_job(config, run_dir, controls, resume, sample_paths, dataset_dir, data_spec),
            controls)
        self.task.produced.connect(self._on_item)
        self.task.failed.connect(self._on_failed)
        self.task.finished.connect(self._on_task_finished)
        self._t_start = time.perf_counter()
        self._set_running(True)
        self.progress.setValue(0)
        self.progress.setFormat("starting… (loading the engine)")
        self.status_label.setText(f"Run folder: {run_dir}")
        return True

    def toggle_pause(self) -> None:
        if not self.running:
            return
        paused = self.task.controls.pause.is_set()
        self.task.pause(not paused)
        self.pause_btn.setText("Pause" if paused else "Resume")
        self.progress.setFormat(self.progress.format().replace(" · paused", "") + ("" if paused else " · paused"))
        self._log("info", "resumed" if paused else "paused (between steps)")

    def stop(self) -> None:
        if self.running:
            self.task.stop()
            self.stop_btn.setEnabled(False)
            self.progress.setFormat("stopping: finishing the step and saving…")

    def save_now(self) -> None:
        if self.running:
            self.task.save_now()
            self._log("info", "a checkpoint will be saved at the next step")

    def _set_running(self, on: bool) -> None:
        self.start_btn.setEnabled(not on)
        self.resume_btn.setEnabled(not on)
        self.pause_btn.setEnabled(on)
        self.stop_btn.setEnabled(on)
        self.save_btn.setEnabled(on)
        self.dataset_box.setEnabled(not on)
        self.form.setEnabled(not on)
        if not on:
            self.pause_btn.setText("Pause")

    # --- events ---
    def _on_item(self, item: Any) -> None:
        if isinstance(item, StepMetrics):
            self.steps_seen += 1
            self.last_step = item
            self.plots.add_metrics(item.step, item.metrics)
            now = time.perf_counter()
            if now - self._progress_t < 0.1 and item.step < item.total_steps:
                return  # text/bar repaint at most ~10x a second: the GUI thread shares the GIL with training
            self._progress_t = now
            frac = item.step / item.total_steps if item.total_steps else 0.0
            self.progress.setValue(int(frac * 1000))
            loss = item.metrics.get("loss")
            paused = " · paused" if self.task and self.task.controls and self.task.controls.pause.is_set() else ""
            self.progress.setFormat(f"step {item.step:,}/{item.total_steps:,} · {frac:.0%} · ETA "
                                    f"{format_eta(item.eta_s)}" + (f" · loss {loss:.3f}" if isinstance(loss, float)
                                                                  else "") + paused)
        elif isinstance(item, EvalResult):
            self.plots.add_metrics(item.step, item.metrics)
            self._log("info", f"step {item.step}: " + ", ".join(f"{k} {v:.4g}" for k, v in item.metrics.items()
                                                                if isinstance(v, (int, float))))
        elif isinstance(item, Sample):
            prompt = f"<span style='color:#6b7280'>{_esc(item.prompt)}</span>" if item.prompt else ""
            self.samples_view.append(f"<p><b>step {item.step}</b><br>{prompt}{_esc(item.text)}</p>")
        elif isinstance(item, CheckpointSaved):
            self._log("info", f"checkpoint saved at step {item.step}{' (best so far)' if item.best else ''}: "
                              f"{item.path}")
            self.checkpoint_saved.emit(item.path)
        elif isinstance(item, Log):
            self._log(item.level, item.message)
        elif isinstance(item, Finished):
            self.last_finished = item
            self._log("info" if item.reason != "failed" else "error",
                      f"finished: {item.reason} at step {item.step}" + (f" — {item.message}" if item.message else ""))
            self.progress.setFormat(f"{item.reason.replace('_', ' ')} at step {item.step:,}")
            if item.reason == "completed":
                self.progress.setValue(1000)
            if item.reason == "failed":
                self.ctx.report_error(item.message or "Training failed.", title="Training failed")
        elif isinstance(item, tuple) and item:
            kind = item[0]
            if kind == "prepare":
                ev = item[1]
                if isinstance(ev, Progress):
                    frac = ev.done / ev.total if ev.total else 0
                    self.progress.setValue(int(frac * 1000))
                    self.progress.setFormat(f"preparing the sample corpus: {ev.stage} {frac:.0%}")
                elif isinstance(ev, Log):
                    self._log(ev.level, ev.message)
            elif kind == "dataset":
                self._log("info", f"sample corpus prepared: {item[1]}")
                self.dataset_prepared.emit(item[1])
                self.select_dataset(item[1])
                self.dataset_box.setEnabled(False)
            elif kind == "run":
                self.run_changed.emit(item[1])
            elif kind == "history":
                self._replay(item[2])

    def _on_failed(self, message: str, details: str) -> None:
        self._log("error", message)
        self.progress.setFormat("failed")
        self.ctx.report_error(message, details, title="Training failed")

    def _on_task_finished(self) -> None:
        self._set_running(False)
        self.plots.flush()
        if self.run_dir is not None:
            self.run_changed.emit(str(self.run_dir))

    def _log(self, level: str, message: str) -> None:
        prefix = {"warning": "⚠ ", "error": "✖ "}.get(level, "")
        self.log_view.appendPlainText(f"{time.strftime('%H:%M:%S')}  {prefix}{message}")

    # --- history ---
    def show_run_history(self, run_dir: str) -> None:
        """Replay a run's metrics.jsonl into the plots (Library → 'show in plots', resume)."""
        if self.running:
            self.ctx.info("Stop the running training before showing another run.")
            return
        self.plots.clear()
        self.samples_view.clear()
        self.run_dir = Path(run_dir)
        task = self.ctx.runner.start("history", lambda: _history_job(run_dir))
        task.produced.connect(self._on_item)
        task.failed.connect(lambda m, d: self.ctx.report_error(m, d, title="Cannot read the run's metrics"))
        self.status_label.setText(f"Showing the history of {run_dir}")

    def _replay(self, records: list[dict[str, Any]]) -> None:
        last = None
        for rec in records:
            kind = rec.get("type")
            step = rec.get("step")
            if step is None:
                continue
            values = {k: v for k, v in rec.items() if k not in ("type", "step", "total_steps", "elapsed_s", "eta_s",
                                                                   "best") and isinstance(v, (int, float))
                      and not isinstance(v, bool)}
            if kind in ("step", "eval"):
                self.plots.add_metrics(step, values)
                if kind == "step":
                    last = rec
            elif kind == "sample":
                self.samples_view.append(f"<p><b>step {step}</b><br>{_esc(str(rec.get('text', '')))}</p>")
        self.plots.flush()
        if last and last.get("total_steps"):
            frac = last["step"] / last["total_steps"]
            self.progress.setValue(int(frac * 1000))
            self.progress.setFormat(f"history: step {last['step']:,}/{last['total_steps']:,} · {frac:.0%}")

    # --- CLI, exports ---
    def cli_command(self) -> str:
        run = self.run_dir
        # A frozen app is its own CLI; from source, the module form works without the entry point on PATH.
        exe = shlex.quote(sys.executable) if getattr(sys, "frozen", False) else "python -m desktop_app"
        if run is not None and (run / "run.json").exists():
            again = shlex.quote(str(run.with_name(run.name + "-cli")))
            return (f"{exe} train --config {shlex.quote(str(run / 'run.json'))} --out {again}\n"
                    f"# or continue this run:\n{exe} train --resume {shlex.quote(str(run))}")
        return f"{exe} train --config run.json --out my-run"


    def show_cli_command(self) -> None:
        dataset = self.dataset_box.currentData() or "<prepared sample corpus>"
        config = self.config or self.build_config(dataset)
        dlg = QDialog(self)
        dlg.setWindowTitle("Run this from a terminal")
        lay = QVBoxLayout(dlg)
        lay.addWidget(QLabel("The same run, headless (save the config below as run.json):"))
        cmd = QPlainTextEdit(self.cli_command())
        cmd.setReadOnly(True)
        cmd.setMaximumHeight(60)
        text = QPlainTextEdit(json.dumps(config.to_dict(), indent=2))
        text.setReadOnly(True)
        lay.addWidget(cmd)
        lay.addWidget(text, 1)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        copy = buttons.addButton("Copy command", QDialogButtonBox.ButtonRole.ActionRole)
        save = buttons.addButton("Save run.json…", QDialogButtonBox.ButtonRole.ActionRole)
        copy.clicked.connect(lambda _=False: _clipboard(cmd.toPlainText()))
        save.clicked.connect(lambda _=False: self._save_config(config))
        buttons.rejected.connect(dlg.reject)
        lay.addWidget(buttons)
        dlg.resize(640, 480)
        self.cli_dialog = dlg
        dlg.open()

    def _save_config(self, config: RunConfig) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save run config", "run.json", "JSON (*.json)")
        if path:
            try:
                config.save(path)
            except Exception as exc:
                self.ctx.report_exception(exc)

    def _export_png(self, _checked: bool = False) -> None:
        self._export_to("Export plots", "training.png", "PNG image (*.png)", self.plots.export_png)

    def _export_csv(self, _checked: bool = False) -> None:
        self._export_to("Export metrics", "metrics.csv", "CSV (*.csv)", self.plots.export_csv)

    def _export_to(self, title: str, default_name: str, file_filter: str, write) -> None:
        path, _ = QFileDialog.getSaveFileName(self, title, default_name, file_filter)
        if path:
            try:
                write(path)
            except Exception as exc:
                self.ctx.report_exception(exc, title="Export failed")

    def _on_smoothing(self, value: int) -> None:
        self.smooth_value.setText(f"{value / 100:.2f}")
        self.plots.set_smoothing(value / 100)

    def _resume_dialog(self, _checked: bool = False) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Choose a run folder to resume",
                                                  str(self.ctx.workspace.folder("runs")))
        if folder:
            self.resume_run(folder)

    def stop_timers(self) -> None:
        self.plots.stop_timers()


def _esc(text: str) -> str:
    import html

    return html.escape(text).replace("\n", "<br>")


def _clipboard(text: str) -> None:
    from PySide6.QtWidgets import QApplication

    QApplication.clipboard().setText(text)
