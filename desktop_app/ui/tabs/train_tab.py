"""Train tab: method, hyperparameters, start/pause/stop/save-now/resume, live curves, log and samples.

Methods: pretraining on a prepared dataset (model from the Model tab), and the fine-tuning / reinforcement
methods on a base model (SFT, LoRA, QLoRA, DPO, GRPO, self-play), whose fields live in `MethodPanel`.
Every method builds one RunConfig and runs the engine's `train` generator in the background runner.
A Pipeline (`PipelineEditor`) chains stages of those methods and runs the engine's `run_pipeline` instead.
Runs launched outside the window (CLI, torchrun) can be watched: their metrics.jsonl feeds the same plots,
read-only (engine/runs.py `follow_run`).
"""

from __future__ import annotations

import contextlib
import json
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
    QSizePolicy,
    QSlider,
    QSplitter,
    QTabWidget,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from desktop_app.cli.command_line import pipeline_commands, run_commands, torchrun_command
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
from desktop_app.engine.methods import METHOD_BY_KEY, METHODS, PIPELINE, Method, method_of
from desktop_app.engine.specs import DataSpec, DistributedSpec, ModelSpec, RunConfig, SpecError, TrainSpec
from desktop_app.ui.context import AppContext
from desktop_app.ui.widgets.method_panel import MethodPanel, make_run_config
from desktop_app.ui.widgets.method_plots import MethodPlots
from desktop_app.ui.widgets.pipeline_editor import PipelineEditor
from desktop_app.ui.widgets.record_preview import RecordPreview
from desktop_app.ui.widgets.spec_form import SpecForm
from desktop_app.ui.widgets.task_browser import LOG_NAME as SELFPLAY_LOG
from desktop_app.ui.widgets.task_browser import TaskBrowser

SAMPLE_DATASET = ""  # combo data of "prepare the sample corpus automatically"

PLOT_FAMILY = {"pretraining": "pretraining", "sft": "sft", "lora": "sft", "qlora": "sft", "dpo": "dpo",
               "grpo": "grpo", "selfplay": "selfplay"}
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
        from desktop_app.engine.data.prepare import prepare_dataset

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
    from desktop_app.engine.train.loop import adapt_model_to_dataset, train

    if config.model and not resume:
        # Fit vocab/context to the dataset's tokenizer and windows (and say so), as the CLI's --preset does.
        from desktop_app.engine.data.token_store import TokenStore

        spec, notes = adapt_model_to_dataset(config.model_spec(), TokenStore(config.dataset))
        for note in notes:
            yield Log("info", f"model: {note}")
        config = config.replace(model=spec.to_dict())
    run_dir.mkdir(parents=True, exist_ok=True)
    yield ("run", str(run_dir))
    if resume:
        # The curve so far, read here before train() cuts metrics.jsonl back to its checkpoint (a separate history
        # task could read either side of that cut and plot steps past the checkpoint twice).
        history = _checkpointed_history(run_dir)
        if history:
            yield ("history", str(run_dir), history)
    # interactive: the thread policy leaves a core to the window so the GUI stays responsive.
    yield from train(config, run_dir, controls, resume=resume, interactive=True)


def _demo_job(out: Path, controls: Controls, minutes: float):
    """The self-play CPU demo in the worker thread: its events, plus markers when a phase's run folder starts."""
    from desktop_app.engine.recipes.selfplay_demo import run_demo

    for event in run_demo(out, minutes=minutes, controls=controls):
        if isinstance(event, Log) and event.message.startswith("3/4"):
            yield ("run", str(out / "pretrain"))
        if isinstance(event, Log) and event.message.startswith("4/4"):
            yield ("reset",)  # self-play's steps start again at 1: fresh curves
            yield ("run", str(out / "selfplay"))
            yield ("selfplay-run", str(out / "selfplay"))
        yield event


def _history_job(run_dir: str):
    from desktop_app.engine.run_folder import read_metrics

    yield ("history", run_dir, read_metrics(Path(run_dir)))


def _fit_pretraining_stages(source: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Pretraining stages' model specs fitted to their datasets' tokenizer and windows, as a single run's are."""
    from desktop_app.engine.data.token_store import TokenStore
    from desktop_app.engine.train.loop import adapt_model_to_dataset

    stages, notes = [], []
    for stage in source.get("stages", []):
        config = stage.get("config") if isinstance(stage, dict) else None
        if isinstance(config, dict) and config.get("model") and config.get("dataset"):
            spec, fit = adapt_model_to_dataset(ModelSpec.from_dict(config["model"]), TokenStore(config["dataset"]))
            stage = {**stage, "config": {**config, "model": spec.to_dict()}}
            notes += [f"stage {stage.get('name')}: model: {note}" for note in fit]
        stages.append(stage)
    return {**source, "stages": stages}, notes


def _checkpointed_history(run_dir: Path) -> list[dict[str, Any]]:
    """The records of a stage up to its newest checkpoint: what a resume keeps of its metrics.jsonl."""
    from desktop_app.engine.run_folder import checkpointed_history

    return checkpointed_history(run_dir)


def _pipeline_job(source: dict[str, Any] | None, out: Path, controls: Controls, resume: bool):
    """Runs in the worker thread: a pipeline (source None: resume the one in `out`), with a ("stage", index, run
    folder) marker when a stage starts and, when that stage resumes, the history its checkpoint has seen."""
    from desktop_app.engine.pipeline_folder import PIPELINE_FILE, load_pipeline, stage_dir
    from desktop_app.engine.recipes.pipeline import run_pipeline

    if source is not None and not resume:
        source, notes = _fit_pretraining_stages(source)
        for note in notes:
            yield Log("info", note)
    stages = load_pipeline(out / PIPELINE_FILE if resume else source)
    yield ("run", str(out))
    for event in run_pipeline(source, out, controls, resume=resume, interactive=True):
        if isinstance(event, Progress) and event.stage == "pipeline":
            index = int(event.done)
            if index < len(stages):
                run_dir = stage_dir(out, index, stages[index])
                yield ("stage", index, str(run_dir))
                history = _checkpointed_history(run_dir)
                if history:
                    yield ("history", str(run_dir), history)
            continue
        yield event


def _watch_job(run_dir: Path, controls: Controls):
    """Follows a run written by another process (read-only), a batch of records at a time."""
    from desktop_app.engine.runs import follow_run_batches

    for batch in follow_run_batches(run_dir, controls.stop, poll_s=0.25):  # ~the plots' own redraw pace
        yield ("watch", batch)


class TrainTab(QWidget):
    run_changed = Signal(str)  # run folder of the current/shown run
    checkpoint_saved = Signal(str)
    dataset_prepared = Signal(str)
    selfplay_demo_requested = Signal()  # the main window connects the CPU demo (see start_selfplay_demo)

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
        self._auto_lr: float | None = TrainSpec().lr  # the method default the lr field holds (None: user's own)
        self._sandbox_probed = False
        self.sandbox_dialog = None
        self.pipeline_dir: Path | None = None  # the pipeline folder of the current / last pipeline run
        self.pipeline_running = False  # the train task runs a pipeline
        self.stage_index = -1
        self.watch_task = None
        self.watched_dir: Path | None = None

        # --- top: what to train on what ---
        self.method_box = QComboBox()
        self.method_box.setObjectName("methodBox")
        for m in (*METHODS, PIPELINE):
            self.method_box.addItem(m.label, m.key)
            self.method_box.setItemData(self.method_box.count() - 1, m.help, Qt.ItemDataRole.ToolTipRole)
        self.method_box.setToolTip("Training method: pretraining from scratch, or fine-tuning / reinforcement "
                                   "learning on a base model, or a pipeline of several of them")
        self.method_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToContents)
        self.method_box.setSizePolicy(QSizePolicy.Policy.Fixed, QSizePolicy.Policy.Fixed)
        self.dataset_box = QComboBox()
        self.dataset_box.setObjectName("trainDatasetBox")
        self.dataset_box.setMinimumWidth(240)
        self.dataset_label = QLabel("Dataset")
        self.model_label = QLabel("")
        self.model_label.setProperty("role", "muted")
        top = QHBoxLayout()
        top.addWidget(QLabel("Method"))
        top.addWidget(self.method_box)
        top.addSpacing(12)
        top.addWidget(self.dataset_label)
        top.addWidget(self.dataset_box, 1)
        top.addSpacing(12)
        top.addWidget(self.model_label, 1)
        top.addStretch(0)  # takes the room of the pretraining-only fields when they are hidden

        # --- left: method fields, hyperparameters, controls ---
        self.method_panel = MethodPanel(lambda: self.ctx.workspace)
        self.form = SpecForm(TrainSpec)
        hyper = QGroupBox("Hyperparameters")
        hyper.setObjectName("hyperGroup")
        hl = QVBoxLayout(hyper)
        hl.setContentsMargins(8, 6, 8, 8)
        hl.addWidget(self.form)
        self.hyper_group = hyper
        # The config's `distributed` block: used when torchrun launches the run (Show CLI command has the command).
        self.dist_form = SpecForm(DistributedSpec)
        self.dist_group = QGroupBox("Distributed (torchrun)")
        self.dist_group.setObjectName("distributedGroup")
        dist_note = QLabel("Used when torchrun launches this run on several processes or GPUs (Show CLI command "
                           "gives the command); a run started in the window uses one process.")
        dist_note.setProperty("role", "muted")
        dist_note.setWordWrap(True)
        dl = QVBoxLayout(self.dist_group)
        dl.setContentsMargins(8, 6, 8, 8)
        dl.addWidget(dist_note)
        dl.addWidget(self.dist_form)
        self.pipeline_editor = PipelineEditor(lambda: self.ctx.workspace,
                                              lambda: self.model_spec.to_dict() if self.model_spec else {})
        self.pipeline_editor.setObjectName("pipelineEditor")
        settings = QWidget()
        sl = QVBoxLayout(settings)
        sl.setContentsMargins(0, 0, 6, 0)
        sl.addWidget(self.method_panel)
        sl.addWidget(self.pipeline_editor)
        sl.addWidget(hyper)
        sl.addWidget(self.dist_group)
        sl.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        scroll.setWidget(settings)
        scroll.setMinimumWidth(360)
        self.settings_scroll = scroll
        self.start_btn = QPushButton("Start training")
        self.start_btn.setProperty("primary", True)
        self.start_btn.setObjectName("startButton")
        self.pause_btn = QPushButton("Pause")
        self.stop_btn = QPushButton("Stop")
        self.save_btn = QPushButton("Save now")
        self.resume_btn = QPushButton("Resume a run…")
        self.cli_btn = QPushButton("Show CLI command")
        self.watch_btn = QPushButton("Watch a run…")
        self.watch_btn.setObjectName("watchButton")
        self.watch_btn.setToolTip("Follow a run launched outside the window (CLI, torchrun): its curves update live "
                                  "from its metrics.jsonl; nothing is written to it")
        for b in (self.pause_btn, self.stop_btn, self.save_btn):
            b.setEnabled(False)
        left_box = QWidget()
        ll = QVBoxLayout(left_box)
        ll.setContentsMargins(0, 0, 0, 0)
        ll.addWidget(scroll, 1)
        row1 = QHBoxLayout()
        row1.addWidget(self.start_btn, 2)
        row1.addWidget(self.pause_btn, 1)
        row1.addWidget(self.stop_btn, 1)
        row2 = QHBoxLayout()
        row2.addWidget(self.save_btn)
        row2.addWidget(self.resume_btn)
        row2.addWidget(self.watch_btn)
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
        self.record_preview = RecordPreview(self.ctx.runner)
        self.task_browser = TaskBrowser()
        bottom = QTabWidget()
        bottom.addTab(self.log_view, "Log")
        bottom.addTab(self.samples_view, "Samples at each evaluation")
        self.preview_index = bottom.addTab(self.record_preview, "Record preview")
        self.browser_index = bottom.addTab(self.task_browser, "Task buffer")
        bottom.setTabToolTip(self.preview_index, "One record of your data, rendered through the base model's chat "
                                                 "template: which tokens carry loss")
        bottom.setTabToolTip(self.browser_index, "Self-play: the proposed tasks and the last round's rollouts")
        self.bottom_tabs = bottom
        bottom.setMinimumHeight(90)  # the preview and the browser would otherwise claim half the height
        right = QSplitter(Qt.Orientation.Vertical)
        right.addWidget(plots_panel)
        right.addWidget(bottom)
        right.setStretchFactor(0, 4)
        right.setStretchFactor(1, 1)
        right.setSizes([560, 170])
        self.right_splitter = right
        self._sizes_before_tall: list[int] | None = None
        bottom.currentChanged.connect(self._on_bottom_tab)

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
        self.watch_btn.clicked.connect(self._watch_dialog)
        self.stop_watch_btn.clicked.connect(lambda _=False: self.stop_watching())
        self.dist_form.changed.connect(lambda: self.dist_form.validate())
        self.pipeline_editor.error.connect(lambda message: self.ctx.report_error(message, title="Pipeline"))
        self.log_check.toggled.connect(self.plots.set_log_y)
        self.smooth_slider.valueChanged.connect(self._on_smoothing)
        self.png_btn.clicked.connect(self._export_png)
        self.csv_btn.clicked.connect(self._export_csv)
        self.form.changed.connect(lambda: self.form.validate())
        self.method_box.currentIndexChanged.connect(lambda _i: self._on_method_changed())
        self.method_panel.changed.connect(self._on_panel_changed)
        self.method_panel.sandbox_check_requested.connect(lambda: self.check_sandbox(show_dialog=True))
        self.method_panel.demo_requested.connect(self.start_selfplay_demo)
        self.refresh_datasets()
        self._on_method_changed()

    # --- inputs from other tabs ---
    def set_model_spec(self, spec: ModelSpec | None) -> None:
        self.model_spec = spec
        self._update_model_label()

    def set_base_model(self, path: str) -> None:
        """The Model tab's base (continued pretraining); also offered as the fine-tuning methods' base."""
        self.base_model = path
        if path and not self.running:
            self.method_panel.base_picker.set_path(path)
        self._update_model_label()

    # --- method ---
    def current_method(self) -> Method:
        key = self.method_box.currentData() or "pretraining"
        return PIPELINE if key == PIPELINE.key else METHOD_BY_KEY[key]

    def set_method(self, key: str) -> None:
        i = self.method_box.findData(key)
        if i < 0:
            raise KeyError(f"unknown method {key!r}")
        self.method_box.setCurrentIndex(i)

    def _on_method_changed(self) -> None:
        m = self.current_method()
        pipeline = m is PIPELINE
        if not pipeline:
            self.method_panel.set_method(m.key)
        self.method_panel.setVisible(not pipeline)
        self.pipeline_editor.setVisible(pipeline)
        self.hyper_group.setVisible(not pipeline)  # each stage has its own
        self.dist_group.setVisible(not pipeline)
        for w in (self.dataset_label, self.dataset_box, self.model_label):
            w.setVisible(not m.finetune)
        self.bottom_tabs.setTabVisible(self.preview_index, m.data in ("sft", "dpo"))
        self.bottom_tabs.setTabVisible(self.browser_index, m.key == "selfplay")
        if not self.running:
            stages = self.pipeline_editor.stages
            self.plots.set_method(PLOT_FAMILY[stages[0].method if pipeline and stages else
                                              "sft" if pipeline else m.key])
            self.status_label.setText(
                "Press Start: with no dataset chosen, the bundled sample corpus is prepared first."
                if m.key == "pretraining" else
                "Pipeline: add stages (or load a pipeline JSON) on the left; each stage starts from the previous "
                "one's output. Press Start: the stages run one after the other, each with its own run folder."
                if pipeline else
                f"{m.label}: choose the base model{' and the data files' if m.data else ''} on the left, then press "
                "Start. The run folder appears here; curves fill in as the engine reports.")
        self._apply_default_lr()
        self._update_preview_source()
        if m.key == "selfplay" and not self._sandbox_probed:
            self.check_sandbox(show_dialog=False)

    def _on_panel_changed(self) -> None:
        self._apply_default_lr()
        self._update_preview_source()

    def _on_bottom_tab(self, index: int) -> None:
        """The record preview and the task browser need room: give them half the height while shown."""
        sizes = self.right_splitter.sizes()
        total = sum(sizes)
        if index in (self.preview_index, self.browser_index):
            share = 0.5 if index == self.preview_index else 0.62
            if total and sizes[1] < (share - 0.05) * total:
                self._sizes_before_tall = self._sizes_before_tall or sizes
                self.right_splitter.setSizes([round(total * (1 - share)), total - round(total * (1 - share))])
        elif self._sizes_before_tall is not None:
            self.right_splitter.setSizes(self._sizes_before_tall)
            self._sizes_before_tall = None

    def _apply_default_lr(self) -> None:
        """Follow the method's usual learning rate unless the user typed their own."""
        m = self.current_method()
        new = m.default_lr(self.method_panel.adapter())
        current = self.form.spec().lr
        untouched = self._auto_lr is not None and abs(current - self._auto_lr) <= 1e-12 * max(1.0, abs(current))
        if new is not None and untouched and new != current:
            self.form.set_value("lr", new)
        if new is not None and untouched:
            self._auto_lr = new
        elif not untouched:
            self._auto_lr = None

    def _update_preview_source(self) -> None:
        m = self.current_method()
        if m.data not in ("sft", "dpo"):
            return
        self.record_preview.set_source(self.method_panel.base_model(), self.method_panel.data_files(),
                                       self.method_panel.loss_on())

    def check_sandbox(self, *, show_dialog: bool = False) -> None:
        """Probe the sandboxed executor in the background; the Self-play fields show its state."""
        from desktop_app.ui.widgets.sandbox_status import SandboxStatusDialog, probe_sandbox

        self._sandbox_probed = True
        self.method_panel.set_sandbox_state(None, checking=True)
        task = self.ctx.runner.start("sandbox-probe", probe_sandbox)

        def done(state: dict) -> None:
            self.method_panel.set_sandbox_state(state)
            if show_dialog:
                self.sandbox_dialog = SandboxStatusDialog(state, self)
                self.sandbox_dialog.show()

        task.produced.connect(done)
        task.failed.connect(lambda message, _d: self.method_panel.set_sandbox_state(
            {"layers": [], "missing": {}, "error": message}))

    # --- hooks for the main window (drops, Library) ---
    def accepts_data_drops(self) -> bool:
        """True when the chosen method reads data files (the window can route drops here instead of the Data tab)."""
        return bool(self.current_method().data) and not self.running

    def add_data_files(self, paths: list[str]) -> int:
        """Add dropped/chosen files or folders to the method's data list; returns how many were added."""
        return self.method_panel.data_list.add_paths(list(paths))

    def use_as_base(self, path: str, method: str = "sft") -> None:
        """Fine-tune `path` (a run, checkpoint, export or HF folder): pick a fine-tuning method if none is chosen."""
        if self.running:
            self.ctx.info("Stop the running training before choosing another base model.")
            return
        if not self.current_method().finetune or self.current_method() is PIPELINE:
            self.set_method(method)
        self.method_panel.base_picker.set_path(str(path))

    def start_selfplay_demo(self, minutes: float = 15.0) -> bool:
        """The self-play CPU demo (seed corpus -> pretrain -> self-play) in a new folder of the workspace's runs."""
        if self.running:
            return False
        self.selfplay_demo_requested.emit()
        out = self.ctx.workspace.folder("runs") / time.strftime("selfplay-demo-%Y%m%d-%H%M%S")
        controls = Controls()
        return self._run_job(lambda: _demo_job(out, controls, minutes), controls, config=None, run_dir=out,
                             log_line=f"self-play CPU demo in {out}",
                             progress="self-play demo: writing the seed corpus…", status=f"Demo folder: {out}")

    def _update_model_label(self) -> None:
        if self.base_model:
            self.model_label.setText(f"Model: fine-tune {Path(self.base_model).name}")
        elif self.model_spec is not None:
            from desktop_app.engine.model.sizing import count_parameters, human_count

            s = self.model_spec
            self.model_label.setText(f"Model: {s.family}, {human_count(count_parameters(s))} parameters, "
                                     f"{s.n_layers} layers × {s.d_model}, context {s.context_length}")
        else:
            self.model_label.setText("Model: the Model tab's spec has problems")

    def refresh_datasets(self) -> None:
        self.method_panel.base_picker.refresh()  # runs and models of the Library are bases too
        self.pipeline_editor.refresh()
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

    def build_config(self, dataset: str = "") -> RunConfig:
        """The run config of the form: pretraining on `dataset`, or the chosen method on its base and data."""
        return self._build_config(dataset)[0]

    def _build_config(self, dataset: str = "") -> tuple[RunConfig, list[str]]:
        tspec = self.form.spec()
        m = self.current_method()
        if not m.finetune:
            return RunConfig(model=self.model_spec.to_dict() if (self.model_spec and not self.base_model) else {},
                             base_model=self.base_model, dataset=dataset, objective=m.objective,
                             train=tspec.to_dict(), distributed=self.distributed_dict()), []
        return make_run_config(**self.method_panel.config_fields(), train=tspec.to_dict(),
                               distributed=self.distributed_dict())

    def distributed_dict(self) -> dict[str, Any]:
        """The Distributed fields that differ from DistributedSpec's defaults ({} = all defaults): run.json stays
        as the CLI would write it unless the user set something."""
        defaults = DistributedSpec().to_dict()
        return {k: v for k, v in self.dist_form.spec().to_dict().items() if v != defaults.get(k)}

    def apply_config(self, config: RunConfig) -> None:
        """Show a run config in the form (resume, Library): method, base, data, adapter, options, hyperparameters."""
        key = method_of(config).key
        self.set_method(key)
        if METHOD_BY_KEY[key].finetune:
            self.method_panel.apply_config(config)
        self.form.set_spec(config.train_spec())
        try:
            self.dist_form.set_spec(config.distributed_spec())
        except SpecError as exc:  # shown, not fatal: a resume runs the config as it is
            self._log("warning", f"the Distributed fields cannot show this run's settings: {exc}")
        self._auto_lr = None  # the run's own learning rate, never replaced by a method default

    def start(self) -> bool:
        if self.running:
            self.ctx.info("Training is already running.")
            return False
        if self.current_method() is PIPELINE:
            return self._start_pipeline()
        tspec = self.form.spec()
        problems = tspec.validate()
        self.form.show_problems(problems)
        if problems:
            self.ctx.report_error("The hyperparameters have problems:\n" + "\n".join(problems),
                                  title="Check the settings")
            return False
        if self.current_method().finetune:
            return self._start_method()
        if self.model_spec is None and not self.base_model:
            self.ctx.report_error("The model spec on the Model tab has problems; fix them first.",
                                  title="Check the model")
            return False
        dataset = self.dataset_box.currentData() or SAMPLE_DATASET
        sample_paths = dataset_dir = data_spec = None
        if dataset == SAMPLE_DATASET:
            from desktop_app.engine.data.sample_corpus import sample_corpus_files
            from desktop_app.engine.paths import sample_corpus_dir

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

    def _start_method(self) -> bool:
        """Fine-tuning / RL methods: check the fields, build the config, start the engine's train generator."""
        m = self.current_method()
        problems = self.method_panel.problems()
        if problems:
            self.ctx.report_error(f"{m.label} cannot start yet:\n" + "\n".join(f"• {p}" for p in problems),
                                  title="Check the method settings")
            return False
        config, unknown = self._build_config()
        problems = [f"this version of the engine has no run-config field {name!r}: it cannot run {m.label} yet"
                    for name in unknown]
        try:
            problems += config.validate()
        except Exception as exc:  # a config the engine cannot even inspect
            problems.append(str(exc))
        if problems:
            self.ctx.report_error(f"The engine refuses this {m.label} run:\n" + "\n".join(f"• {p}" for p in problems),
                                  title="Check the method settings")
            return False
        base = self.method_panel.base_model()
        self.method_panel.base_picker.remember(base)
        run_dir = self.ctx.workspace.new_run_dir(f"{m.key}-{Path(base).name}")
        return self._launch(config, run_dir, resume=False)

    def resume_run(self, run_dir: str | Path) -> bool:
        if self.running:
            self.ctx.info("Training is already running.")
            return False
        from desktop_app.engine.runs import pipeline_root

        root = pipeline_root(run_dir)  # a pipeline, or one of its stages: the pipeline goes on from there
        if root is not None:
            return self._resume_pipeline(root)
        run_dir = Path(run_dir)
        try:
            config = RunConfig.load(run_dir / "run.json")
        except Exception as exc:
            self.ctx.report_exception(exc, title="Cannot resume this run")
            return False
        try:
            self.apply_config(config)
        except Exception as exc:  # a config of a method this window does not know: resume it as it is
            self._log("warning", f"the form cannot show this run's settings: {exc}")
        return self._launch(config, run_dir, resume=True)

    def _launch(self, config: RunConfig, run_dir: Path, *, resume: bool, sample_paths=None, dataset_dir=None,
                data_spec=None, clear: bool = True) -> bool:
        controls = Controls()
        return self._run_job(
            lambda: _train_job(config, run_dir, controls, resume, sample_paths, dataset_dir, data_spec), controls,
            config=config, run_dir=run_dir, clear=clear,
            log_line=f"{'resuming' if resume else 'starting'} run {run_dir.name}",
            progress="starting… (loading the engine)", status=f"Run folder: {run_dir}")

    def _run_job(self, factory, controls: Controls, *, config: RunConfig | None, run_dir: Path, log_line: str,
                 progress: str, status: str, clear: bool = True, pipeline: bool = False) -> bool:
        """Start a training job (a run, a pipeline, the demo) in the background runner, the tab following it."""
        self.stop_watching()  # the plots now belong to this job
        self.config, self.run_dir = config, run_dir
        self.pipeline_running = pipeline
        self.last_finished = None
        self.steps_seen = 0
        if clear:
            self.plots.clear()
            self.samples_view.clear()
        self.log_view.appendPlainText(f"— {time.strftime('%H:%M:%S')} {log_line}")
        self.task = self.ctx.runner.start("train", factory, controls)
        self.task.produced.connect(self._on_item)
        self.task.failed.connect(self._on_failed)
        self.task.finished.connect(self._on_task_finished)
        self._t_start = time.perf_counter()
        self._set_running(True)
        self.progress.setValue(0)
        self.progress.setFormat(progress)
        self.status_label.setText(status)
        return True

    # --- pipelines ---
    def _start_pipeline(self) -> bool:
        editor = self.pipeline_editor
        problems = editor.problems()
        if problems:
            self.ctx.report_error("The pipeline cannot start yet:\n" + "\n".join(f"• {p}" for p in problems),
                                  title="Check the pipeline")
            return False
        out = self.ctx.workspace.new_run_dir("pipeline-" + "-".join(s.name for s in editor.stages)[:48])
        editor.set_states([("waiting", "")] * len(editor.stages))
        return self._launch_pipeline(editor.pipeline(), out, resume=False)

    def _resume_pipeline(self, root: Path) -> bool:
        if not self._show_pipeline(root):
            return False
        if all(state == "done" for state in self.pipeline_editor.stage_states()):
            self.ctx.info(f"Every stage of {root.name} is done: nothing to resume.")
            return False
        return self._launch_pipeline(None, root, resume=True)

    def _show_pipeline(self, root: Path) -> bool:
        """The pipeline folder's stages in the editor, with their states (from its pipeline_state.json)."""
        from desktop_app.engine.pipeline_folder import PIPELINE_FILE, read_state

        self.set_method(PIPELINE.key)
        try:
            self.pipeline_editor.set_pipeline(root / PIPELINE_FILE)
        except SpecError as exc:
            self.ctx.report_error(f"Cannot read the pipeline in {root}:\n" + "\n".join(f"• {p}" for p in exc.problems),
                                  title="Pipeline")
            return False
        self.pipeline_editor.set_engine_states(read_state(root), ended=True)
        self.pipeline_dir = root
        return True

    def _launch_pipeline(self, source: dict[str, Any] | None, out: Path, *, resume: bool) -> bool:
        controls = Controls()
        self.pipeline_dir, self.stage_index = out, -1
        n = len(self.pipeline_editor.stages)
        return self._run_job(lambda: _pipeline_job(source, out, controls, resume), controls, config=None, run_dir=out,
                             log_line=f"{'resuming' if resume else 'starting'} pipeline {out.name} ({n} stages)",
                             progress="starting the pipeline… (loading the engine)", status=f"Pipeline folder: {out}",
                             pipeline=True)

    def _on_stage_started(self, index: int, run_dir: str) -> None:
        editor = self.pipeline_editor
        self.stage_index = index
        # The stage's run folder: what the window remembers when closed mid-run; resuming a stage folder resumes
        # its pipeline (resume_run), so the next launch's offer continues the pipeline.
        self.run_dir = Path(run_dir)
        before = editor.states or [("waiting", "")] * len(editor.stages)
        editor.set_states([(before[j] if before[j][0] == "done" else ("done", "")) if j < index else
                           ("running", "") if j == index else ("waiting", "") for j in range(len(editor.stages))])
        editor.select_stage(index)
        if 0 <= index < len(editor.stages):
            self.plots.set_method(PLOT_FAMILY[editor.stages[index].method])
        self.plots.clear()  # the curves of this stage (its steps start again at 1)
        self.progress.setValue(0)
        self.progress.setFormat(f"{self._stage_prefix()}starting…")
        self.status_label.setText(f"Pipeline folder: {self.pipeline_dir} · stage folder: {run_dir}")

    def _stage_prefix(self) -> str:
        stages = self.pipeline_editor.stages
        if not (self.pipeline_running and 0 <= self.stage_index < len(stages)):
            return ""
        return f"stage {self.stage_index + 1}/{len(stages)} '{stages[self.stage_index].name}' · "

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
        self.method_box.setEnabled(not on)
        self.method_panel.setEnabled(not on)
        self.dist_form.setEnabled(not on)
        self.pipeline_editor.set_editable(not on)
        self.watch_btn.setEnabled(not on)
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
            reward = item.metrics.get("reward")
            paused = " · paused" if self.task and self.task.controls and self.task.controls.pause.is_set() else ""
            if self.pipeline_running:
                self.pipeline_editor.set_stage_state(self.stage_index, "running",
                                                     f"step {item.step:,}/{item.total_steps:,}")
            self.progress.setFormat(f"{self._stage_prefix()}step {item.step:,}/{item.total_steps:,} · {frac:.0%} · ETA "
                                    f"{format_eta(item.eta_s)}" + (f" · loss {loss:.3f}" if isinstance(loss, float)
                                                                  else "")
                                    + (f" · reward {reward:+.3f}" if isinstance(reward, float) else "") + paused)
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
            where = "" if self.pipeline_running else f" at step {item.step:,}"  # a pipeline's step: stages done
            self._log("info" if item.reason != "failed" else "error",
                      f"finished: {item.reason}{where}" + (f" — {item.message}" if item.message else ""))
            self.progress.setFormat(("pipeline " if self.pipeline_running else "")
                                    + f"{item.reason.replace('_', ' ')}{where}")
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
                if self.config is not None and self.config.objective == "selfplay":
                    self.task_browser.start_live(item[1])
            elif kind == "history":
                self._replay(item[2])
            elif kind == "stage":
                self._on_stage_started(item[1], item[2])
            elif kind == "reset":
                self.plots.clear()
            elif kind == "selfplay-run":
                self.run_dir = Path(item[1])
                self.task_browser.start_live(item[1])

    def _on_failed(self, message: str, details: str) -> None:
        self._log("error", message)
        self.progress.setFormat("failed")
        self.ctx.report_error(message, details, title="Training failed")

    def _on_task_finished(self) -> None:
        self._set_running(False)
        self.plots.flush()
        if self.pipeline_running and self.pipeline_dir is not None:
            from desktop_app.engine.pipeline_folder import read_state

            self.pipeline_editor.set_engine_states(read_state(self.pipeline_dir), ended=True)  # the engine's record
        self.pipeline_running = False
        if self.task_browser.timer.isActive():
            self.task_browser.stop_live()
        if self.run_dir is not None:
            self.run_changed.emit(str(self.run_dir))

    def _log(self, level: str, message: str) -> None:
        prefix = {"warning": "⚠ ", "error": "✖ "}.get(level, "")
        self.log_view.appendPlainText(f"{time.strftime('%H:%M:%S')}  {prefix}{message}")

    # --- history ---
    def show_run_history(self, run_dir: str) -> None:
        """Replay a run's metrics.jsonl into the plots (Library → 'show in plots', resume). A pipeline folder: its
        stages and their states, and the curves of its latest stage."""
        if self.running:
            self.ctx.info("Stop the running training before showing another run.")
            return
        self.stop_watching()
        from desktop_app.engine.pipeline_folder import is_pipeline_dir

        if is_pipeline_dir(run_dir):
            if not self._show_pipeline(Path(run_dir)):
                return
            stages = [i for i, state in enumerate(self.pipeline_editor.stage_states()) if state != "waiting"]
            if not stages:
                self.plots.clear()
                self.status_label.setText(f"Pipeline {run_dir}: no stage has run yet")
                return
            from desktop_app.engine.pipeline_folder import stage_dir

            stage = self.pipeline_editor.stages[stages[-1]]
            self.pipeline_editor.select_stage(stages[-1])
            self.plots.set_method(PLOT_FAMILY[stage.method])
            run_dir = str(stage_dir(Path(run_dir), stages[-1], stage))
        self.plots.clear()
        self.samples_view.clear()
        self.run_dir = Path(run_dir)
        if (self.run_dir / SELFPLAY_LOG).exists():
            self.task_browser.set_run(self.run_dir)
        task = self.ctx.runner.start("history", lambda: _history_job(run_dir))
        task.produced.connect(self._on_item)
        task.failed.connect(lambda m, d: self.ctx.report_error(m, d, title="Cannot read the run's metrics"))
        self.status_label.setText(f"Showing the history of {run_dir}")

    def _replay(self, records: list[dict[str, Any]], *, live: bool = False) -> None:
        """metrics.jsonl records into the plots and samples; live (a watched run): also its log lines, checkpoints,
        its end, and the reset marker of a file cut back by a resume."""
        last, ended = None, False
        for rec in records:
            kind = rec.get("type")
            if live and kind in ("reset", "log", "checkpoint", "finished"):
                self._on_watched_record(rec)
                ended = kind == "finished"  # its words stay on the bar
                continue
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
        if last and last.get("total_steps") and not ended:
            frac = last["step"] / last["total_steps"]
            self.progress.setValue(int(frac * 1000))
            loss = last.get("loss")
            self.progress.setFormat(f"{'watching' if live else 'history'}: step {last['step']:,}/"
                                    f"{last['total_steps']:,} · {frac:.0%}"
                                    + (f" · loss {loss:.3f}" if live and isinstance(loss, float) else ""))

    # --- watching a run launched outside the window ---
    @property
    def watching(self) -> bool:
        return self.watch_task is not None and self.watch_task.running

    def watch_run(self, run_dir: str | Path) -> bool:
        """Follow a run another process trains (CLI, torchrun): its metrics.jsonl feeds the plots as it grows,
        until it finishes or Stop watching. Read-only: nothing is written to the run."""
        if self.running:
            self.ctx.info("Stop the running training before watching another run.")
            return False
        run_dir = Path(run_dir)
        if not run_dir.is_dir():
            self.ctx.report_error(f"{run_dir} is not a folder.", title="Cannot watch this run")
            return False
        from desktop_app.engine.pipeline_folder import is_pipeline_dir, read_state

        if is_pipeline_dir(run_dir):  # a pipeline writes its metrics per stage: follow the stage it is at
            state = read_state(run_dir)
            stages, current = state.get("stages") or [], state.get("current", 0)
            if not (isinstance(current, int) and 0 <= current < len(stages) and stages[current].get("run_dir")):
                self.ctx.report_error(f"No stage of the pipeline {run_dir.name} has started yet.",
                                      title="Cannot watch this run")
                return False
            self._log("info", f"{run_dir.name} is a pipeline: watching its stage {current + 1} "
                              f"'{stages[current].get('name')}' (the watch ends with that stage)")
            run_dir = Path(stages[current]["run_dir"])
        self.stop_watching()
        # run.json may not be written yet, or be another version's: the curves still come, in the default panels
        with contextlib.suppress(SpecError, OSError):
            self.plots.set_method(PLOT_FAMILY[method_of(RunConfig.load(run_dir / "run.json")).key])
        self.plots.clear()
        self.samples_view.clear()
        self.run_dir, self.watched_dir, self.last_finished = run_dir, run_dir, None
        controls = Controls()
        self.watch_task = self.ctx.runner.start("watch", lambda: _watch_job(run_dir, controls), controls)
        self.watch_task.produced.connect(self._on_watch_item)
        self.watch_task.failed.connect(lambda m, d: self.ctx.report_error(m, d, title="Cannot watch this run"))
        self.watch_task.finished.connect(self._on_watch_finished)
        self.watch_label.setText(f"<b>Watching {_esc(run_dir.name)}</b> (launched outside the window) — read-only: "
                                 f"the curves follow its metrics.jsonl; nothing is written to the run.")
        self.watch_label.setToolTip(str(run_dir))
        self.watch_bar.setVisible(True)
        self.progress.setValue(0)
        self.progress.setFormat(f"watching {run_dir.name}: waiting for its metrics…")
        self.status_label.setText(f"Watching the run folder {run_dir}")
        self._log("info", f"watching {run_dir} (launched outside the window)")
        return True

    def stop_watching(self) -> None:
        """Stop following the watched run (its process goes on; only the window stops reading)."""
        task, self.watch_task = self.watch_task, None
        if task is not None and task.running:
            task.silence()  # nothing it still yields reaches the plots that now show something else
            task.cancel()
            self._log("info", f"stopped watching {self.watched_dir.name if self.watched_dir else 'the run'}")
            self.progress.setFormat(self.progress.format().replace("watching", "watched", 1))
        self.watch_bar.setVisible(False)

    def _on_watch_item(self, item: Any) -> None:
        if isinstance(item, tuple) and item and item[0] == "watch":
            self._replay(item[1], live=True)

    def _on_watched_record(self, rec: dict[str, Any]) -> None:
        kind = rec.get("type")
        if kind == "reset":  # cut back (a resume) or replaced (a fresh run): its records come again from the start
            self.plots.clear()
            self.samples_view.clear()
            self._log("info", "the watched run's metrics were cut back (resumed from a checkpoint): replaying")
        elif kind == "log":
            self._log(str(rec.get("level", "info")), str(rec.get("message", "")))
        elif kind == "checkpoint":
            self._log("info", f"checkpoint saved at step {rec.get('step')}: {rec.get('path', '')}")
        elif kind == "finished":
            done = Finished(reason=str(rec.get("reason", "")), step=int(rec.get("step") or 0),
                            message=str(rec.get("message", "")))
            self.last_finished = done
            self._log("info", f"the watched run finished: {done.reason} at step {done.step}")
            self.progress.setFormat(f"watched run {done.reason.replace('_', ' ')} at step {done.step:,}")
            if done.reason == "completed":
                self.progress.setValue(1000)

    def _on_watch_finished(self) -> None:
        self.plots.flush()
        self.watch_bar.setVisible(False)
        self.watch_task = None

    def _watch_dialog(self, _checked: bool = False) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Choose a run folder to watch (a run launched outside the "
                                                  "window)", str(self.ctx.workspace.folder("runs")))
        if folder:
            self.watch_run(folder)

    # --- CLI, exports ---
    def _shown_config(self) -> RunConfig:
        """The running run's config, else the form's."""
        if self.running and self.config is not None:
            return self.config
        return self.build_config(self.dataset_box.currentData() or "<prepared sample corpus>")

    def _pipeline_shown(self) -> bool:
        """The CLI dialog is about a pipeline: one runs, or the Pipeline method is chosen."""
        return self.pipeline_running if self.running else self.current_method() is PIPELINE

    def pipeline_command(self) -> str:
        """The terminal equivalent of the pipeline: `train --pipeline pipeline.json`, and how to continue ours."""
        return pipeline_commands(self.pipeline_dir)

    def cli_command(self, config: RunConfig | None = None) -> str:
        """The terminal equivalent: `train --method ...` for the methods, `train --config` for every run."""
        if config is None and self._pipeline_shown():
            return self.pipeline_command()
        return run_commands(config or self._shown_config(), self.run_dir)

    def show_cli_command(self) -> None:
        if self._pipeline_shown():
            editor = self.pipeline_editor
            self._cli_dialog("The same pipeline, headless (save the pipeline below as pipeline.json):",
                             self.pipeline_command(), editor.pipeline_json(), "Save pipeline.json…",
                             lambda _=False: editor.save_dialog())
            return
        config = self._shown_config()
        command = self.cli_command(config) + "\n" + torchrun_command(config)
        self._cli_dialog("The same run, headless (save the config below as run.json):", command,
                         json.dumps(config.to_dict(), indent=2), "Save run.json…",
                         lambda _=False: self._save_config(config))

    def _cli_dialog(self, title: str, command: str, json_text: str, save_label: str, save) -> None:
        dlg = QDialog(self)
        dlg.setWindowTitle("Run this from a terminal")
        lay = QVBoxLayout(dlg)
        lay.addWidget(QLabel(title))
        cmd = QPlainTextEdit(command)
        cmd.setObjectName("cliCommand")
        cmd.setReadOnly(True)
        cmd.setMaximumHeight(170)
        text = QPlainTextEdit(json_text)
        text.setObjectName("cliJson")
        text.setReadOnly(True)
        lay.addWidget(cmd)
        lay.addWidget(text, 1)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        copy = buttons.addButton("Copy command", QDialogButtonBox.ButtonRole.ActionRole)
        save_btn = buttons.addButton(save_label, QDialogButtonBox.ButtonRole.ActionRole)
        copy.clicked.connect(lambda _=False: _clipboard(cmd.toPlainText()))
        save_btn.clicked.connect(save)
        buttons.rejected.connect(dlg.reject)
        lay.addWidget(buttons)
        dlg.resize(760, 520)
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
        self.task_browser.stop_timers()


def _esc(text: str) -> str:
    import html

    return html.escape(text).replace("\n", "<br>")


def _clipboard(text: str) -> None:
    from PySide6.QtWidgets import QApplication

    QApplication.clipboard().setText(text)
