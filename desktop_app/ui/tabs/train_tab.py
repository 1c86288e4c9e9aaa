"""Train tab: method, hyperparameters, start/pause/stop/save-now/resume, live curves, log and samples.

Methods: pretraining on a prepared dataset (model from the Model tab), and the fine-tuning / reinforcement
methods on a base model (SFT, LoRA, QLoRA, DPO, GRPO, self-play), whose fields live in `MethodPanel`.
Every method builds one RunConfig and runs the engine's `train` generator in the background runner.
"""

from __future__ import annotations

import dataclasses
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
    QSizePolicy,
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
from desktop_app.engine.specs import DataSpec, ModelSpec, RunConfig, TrainSpec
from desktop_app.ui.context import AppContext
from desktop_app.ui.widgets.method_form import (
    METHOD_BY_KEY,
    METHODS,
    Method,
    MethodPanel,
    default_lr,
    method_defaults,
    options_spec,
)
from desktop_app.ui.widgets.method_plots import MethodPlots
from desktop_app.ui.widgets.record_preview import RecordPreview
from desktop_app.ui.widgets.spec_form import SpecForm
from desktop_app.ui.widgets.task_browser import LOG_NAME as SELFPLAY_LOG
from desktop_app.ui.widgets.task_browser import TaskBrowser

SAMPLE_DATASET = ""  # combo data of "prepare the sample corpus automatically"

PLOT_FAMILY = {"pretraining": "pretraining", "sft": "sft", "lora": "sft", "qlora": "sft", "dpo": "dpo",
               "grpo": "grpo", "selfplay": "selfplay"}
# TrainSpec fields the CLI sets with flags of their own (cli/train.py _TRAIN_FLAGS).
CLI_TRAIN_FLAGS = (("steps", "--steps"), ("batch_size", "--batch-size"), ("micro_batch_size", "--micro-batch-size"),
                   ("lr", "--lr"), ("save_every", "--save-every"), ("eval_every", "--eval-every"),
                   ("threads", "--threads"), ("device", "--device"), ("optimizer", "--optimizer"))
# AdapterSpec fields the CLI sets with flags of their own.
CLI_ADAPTER_FLAGS = {"rank": "--lora-rank", "alpha": "--lora-alpha", "dropout": "--lora-dropout",
                     "target_modules": "--target-modules"}


def format_eta(seconds: float) -> str:
    if not seconds or seconds != seconds or seconds < 0:
        return "–"
    seconds = round(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


def method_key_of(config: RunConfig) -> str:
    """The selector's method for a run config: (objective, adapter kind) -> pretraining / sft / lora / ..."""
    objective = config.objective
    kind = (getattr(config, "adapter", None) or {}).get("kind", "none")
    if objective == "causal_lm":
        return "pretraining"
    if objective == "sft":
        return {"lora": "lora", "qlora": "qlora"}.get(kind, "sft")
    return objective if objective in METHOD_BY_KEY else "pretraining"


def make_run_config(**fields: Any) -> tuple[RunConfig, list[str]]:
    """A RunConfig from the fields this engine knows; the names it does not know are returned (an engine that
    lacks a method's fields refuses to start it by name instead of failing on a TypeError)."""
    known = {f.name for f in dataclasses.fields(RunConfig)}
    unknown = sorted(k for k, v in fields.items() if k not in known and v not in ("", [], {}, None))
    return RunConfig(**{k: v for k, v in fields.items() if k in known}), unknown


def _flag_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return repr(value)  # exact: the CLI must rebuild the same number
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def method_command(config: RunConfig, method: Method, exe: str, out: str = "my-run") -> tuple[str, list[str]]:
    """(the `train --method ...` command line, settings its flags cannot express) for a fine-tuning config."""
    q = shlex.quote
    parts = [exe, "train", "--method", method.key]
    if getattr(config, "base_model", ""):
        parts += ["--base", q(config.base_model)]
    else:
        parts += ["--base", "MODEL"]
    for path in getattr(config, "data", []) or []:
        parts += ["--data", q(path)]
    train, defaults = config.train, TrainSpec().to_dict()
    flagged = {name for name, _ in CLI_TRAIN_FLAGS}
    for name, flag in CLI_TRAIN_FLAGS:
        # lr always: the CLI's default for a method is the method's (METHOD_LR), not TrainSpec's
        if name in train and (name in ("steps", "batch_size", "lr") or train[name] != defaults.get(name)):
            parts += [flag, q(_flag_value(train[name]))]
    uncovered = [f"train.{k}={_flag_value(v)}" for k, v in train.items() if k not in flagged and v != defaults.get(k)]
    options = dict(getattr(config, "method_options", {}) or {})
    cls = options_spec(method.objective)
    try:
        option_defaults = cls().to_dict() if cls is not None else method_defaults(method.objective)
    except Exception:  # an engine without this method: every option counts as set
        option_defaults = {}
    if method.key == "selfplay":
        parts += ["--world", q(str(options.pop("world", option_defaults.get("world", "mini"))))]
    if method.objective == "grpo" and options.get("reward_file"):
        parts += ["--reward-file", q(str(options.pop("reward_file")))]
    for key, value in options.items():
        if key in option_defaults and value == option_defaults[key]:
            continue
        parts += ["--option", q(f"{key}={_flag_value(value)}")]
    adapter = dict(getattr(config, "adapter", {}) or {})
    kind = adapter.pop("kind", "none")
    if method.adapter is None and kind != "none":
        parts += ["--adapter", kind]
    if adapter:
        from desktop_app.engine import specs

        adapter_defaults = specs.AdapterSpec().to_dict() if hasattr(specs, "AdapterSpec") else {}
        for key, value in adapter.items():
            if value == adapter_defaults.get(key):
                continue
            if key in CLI_ADAPTER_FLAGS:
                parts += [CLI_ADAPTER_FLAGS[key], q(_flag_value(value))]
            else:
                uncovered.append(f"adapter.{key}={_flag_value(value)}")
    if config.seed != RunConfig().seed:
        parts += ["--seed", str(config.seed)]
    parts += ["--out", q(out)]
    return " ".join(parts), uncovered


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
    # interactive: the thread policy leaves a core to the window so the GUI stays responsive.
    yield from train(config, run_dir, controls, resume=resume, interactive=True)


def _demo_job(out: Path, controls: Controls, minutes: float):
    """The self-play CPU demo in the worker thread: its events, plus markers when a phase's run folder starts."""
    from desktop_app.engine.selfplay.demo import run_demo

    for event in run_demo(out, minutes=minutes, controls=controls):
        if isinstance(event, Log) and event.message.startswith("3/4"):
            yield ("run", str(out / "pretrain"))
        if isinstance(event, Log) and event.message.startswith("4/4"):
            yield ("reset",)  # self-play's steps start again at 1: fresh curves
            yield ("run", str(out / "selfplay"))
            yield ("selfplay-run", str(out / "selfplay"))
        yield event


def _history_job(run_dir: str):
    from desktop_app.engine.train.loop import read_metrics

    yield ("history", run_dir, read_metrics(Path(run_dir)))


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

        # --- top: what to train on what ---
        self.method_box = QComboBox()
        self.method_box.setObjectName("methodBox")
        for m in METHODS:
            self.method_box.addItem(m.label, m.key)
            self.method_box.setItemData(self.method_box.count() - 1, m.help, Qt.ItemDataRole.ToolTipRole)
        self.method_box.setToolTip("Training method: pretraining from scratch, or fine-tuning / reinforcement "
                                   "learning on a base model")
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
        settings = QWidget()
        sl = QVBoxLayout(settings)
        sl.setContentsMargins(0, 0, 6, 0)
        sl.addWidget(self.method_panel)
        sl.addWidget(hyper)
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
        return METHOD_BY_KEY[self.method_box.currentData() or "pretraining"]

    def set_method(self, key: str) -> None:
        i = self.method_box.findData(key)
        if i < 0:
            raise KeyError(f"unknown method {key!r}")
        self.method_box.setCurrentIndex(i)

    def _on_method_changed(self) -> None:
        m = self.current_method()
        self.method_panel.set_method(m.key)
        for w in (self.dataset_label, self.dataset_box, self.model_label):
            w.setVisible(not m.finetune)
        self.bottom_tabs.setTabVisible(self.preview_index, m.data in ("sft", "dpo"))
        self.bottom_tabs.setTabVisible(self.browser_index, m.key == "selfplay")
        if not self.running:
            self.plots.set_method(PLOT_FAMILY[m.key])
            self.status_label.setText(
                "Press Start: with no dataset chosen, the bundled sample corpus is prepared first."
                if m.key == "pretraining" else
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
        new = default_lr(m, self.method_panel.adapter())
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
        if not self.current_method().finetune:
            self.set_method(method)
        self.method_panel.base_picker.set_path(str(path))

    def start_selfplay_demo(self, minutes: float = 15.0) -> bool:
        """The self-play CPU demo (seed corpus -> pretrain -> self-play) in a new folder of the workspace's runs."""
        if self.running:
            return False
        self.selfplay_demo_requested.emit()
        out = self.ctx.workspace.folder("runs") / time.strftime("selfplay-demo-%Y%m%d-%H%M%S")
        controls = Controls()
        self.config, self.run_dir = None, out
        self.last_finished = None
        self.steps_seen = 0
        self.plots.clear()
        self.samples_view.clear()
        self.log_view.appendPlainText(f"— {time.strftime('%H:%M:%S')} self-play CPU demo in {out}")
        self.task = self.ctx.runner.start("train", lambda: _demo_job(out, controls, minutes), controls)
        self.task.produced.connect(self._on_item)
        self.task.failed.connect(self._on_failed)
        self.task.finished.connect(self._on_task_finished)
        self._t_start = time.perf_counter()
        self._set_running(True)
        self.progress.setValue(0)
        self.progress.setFormat("self-play demo: writing the seed corpus…")
        self.status_label.setText(f"Demo folder: {out}")
        return True

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
                             train=tspec.to_dict()), []
        panel = self.method_panel
        return make_run_config(base_model=panel.base_model(), objective=m.objective, data=panel.data_files(),
                               adapter=panel.adapter_dict(), method_options=panel.options_dict(),
                               train=tspec.to_dict())

    def apply_config(self, config: RunConfig) -> None:
        """Show a run config in the form (resume, Library): method, base, data, adapter, options, hyperparameters."""
        key = method_key_of(config)
        self.set_method(key)
        if METHOD_BY_KEY[key].finetune:
            self.method_panel.apply(base_model=getattr(config, "base_model", ""), data=getattr(config, "data", []),
                                    adapter=getattr(config, "adapter", {}),
                                    options=getattr(config, "method_options", {}))
        self.form.set_spec(config.train_spec())
        self._auto_lr = None  # the run's own learning rate, never replaced by a method default

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
        self.method_box.setEnabled(not on)
        self.method_panel.setEnabled(not on)
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
            self.progress.setFormat(f"step {item.step:,}/{item.total_steps:,} · {frac:.0%} · ETA "
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
                if self.config is not None and self.config.objective == "selfplay":
                    self.task_browser.start_live(item[1])
            elif kind == "history":
                self._replay(item[2])
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
        if self.task_browser.timer.isActive():
            self.task_browser.stop_live()
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
        if (self.run_dir / SELFPLAY_LOG).exists():
            self.task_browser.set_run(self.run_dir)
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
    def _shown_config(self) -> RunConfig:
        """The running run's config, else the form's."""
        if self.running and self.config is not None:
            return self.config
        return self.build_config(self.dataset_box.currentData() or "<prepared sample corpus>")

    def cli_command(self, config: RunConfig | None = None) -> str:
        """The terminal equivalent: `train --method ...` for the methods, `train --config` for every run."""
        run = self.run_dir
        # A frozen app is its own CLI; from source, the module form works without the entry point on PATH.
        exe = shlex.quote(sys.executable) if getattr(sys, "frozen", False) else "python -m desktop_app"
        lines = []
        config = config or self._shown_config()
        method = METHOD_BY_KEY.get(method_key_of(config), METHODS[0])
        if method.finetune:
            command, uncovered = method_command(config, method, exe)
            lines.append(command)
            if uncovered:
                lines.append("# not expressible as flags (they are in run.json below): " + ", ".join(uncovered))
            lines.append("# exactly this config (save the JSON below as run.json):")
        lines.append(f"{exe} train --config run.json --out my-run")
        if run is not None and (run / "run.json").exists():
            again = shlex.quote(str(run.with_name(run.name + "-cli")))
            lines += [f"# reproduce run {run.name}:",
                      f"{exe} train --config {shlex.quote(str(run / 'run.json'))} --out {again}",
                      f"# or continue this run:\n{exe} train --resume {shlex.quote(str(run))}"]
        return "\n".join(lines)

    def show_cli_command(self) -> None:
        config = self._shown_config()
        dlg = QDialog(self)
        dlg.setWindowTitle("Run this from a terminal")
        lay = QVBoxLayout(dlg)
        lay.addWidget(QLabel("The same run, headless (save the config below as run.json):"))
        cmd = QPlainTextEdit(self.cli_command(config))
        cmd.setObjectName("cliCommand")
        cmd.setReadOnly(True)
        cmd.setMaximumHeight(130)
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
