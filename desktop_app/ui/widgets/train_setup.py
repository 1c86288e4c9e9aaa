"""What the Train tab trains, and how: the method, the dataset (pretraining) or the base model and data files
(fine-tuning), the method's options, the hyperparameters and the distributed settings; or, for the Pipeline
method, its stages. `build_config` reads it all as one RunConfig and `apply_config` shows one (resume, Library).
What the engine's preflight finds in the settings on this machine (engine/train/preflight.py) shows as the settings
change, in a box of a fixed height above the hyperparameters and in the colour of its setting's label (findings_box.py:
nothing moves under the pointer): a warning, or an error that Start refuses. The learning rate and steps
follow the chosen method's defaults until the person types their own.
Nothing here runs: the tab starts what this describes.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QScrollArea,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from desktop_app.engine.errors import UserError
from desktop_app.engine.methods import METHOD_BY_KEY, METHODS, PIPELINE, Method, method_of
from desktop_app.engine.model.hub_cache import model_name
from desktop_app.engine.model.sizing import count_parameters, human_count
from desktop_app.engine.paths import sample_corpus_dir
from desktop_app.engine.specs import DataSpec, DistributedSpec, ModelSpec, RunConfig, SpecError, TrainSpec
from desktop_app.engine.train.memory_plan import Machine, ram_memory, this_machine
from desktop_app.engine.train.opening import method_defaults, opening_settings
from desktop_app.engine.train.preflight import Finding
from desktop_app.engine.train.request import RunRequest, SampleCorpus, plan_run, preflight_request
from desktop_app.engine.train.tracking import choice_labels
from desktop_app.ui.context import AppContext
from desktop_app.ui.widgets.data_columns import DataColumnsBox
from desktop_app.ui.widgets.data_files import DataFileList
from desktop_app.ui.widgets.epochs import EpochsRow, count_records, dataset_windows
from desktop_app.ui.widgets.findings_box import FindingsBox, mark_labels
from desktop_app.ui.widgets.layouts import group_column
from desktop_app.ui.widgets.method_panel import MethodPanel
from desktop_app.ui.widgets.pipeline_editor import PipelineEditor
from desktop_app.ui.widgets.spec_form import SpecForm

SAMPLE_DATASET = ""  # combo data of "prepare the sample corpus automatically"


def _same(a: Any, b: Any) -> bool:
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isclose(a, b, rel_tol=1e-9))


def _group(title: str, name: str, *widgets: QWidget) -> QGroupBox:
    box, layout = group_column(title, name)
    for w in widgets:
        layout.addWidget(w)
    return box


# The fields that follow the run's opening settings (engine/train/opening.py) while they hold what the app gave them.
_AUTO_START = {"lr": TrainSpec().lr, "steps": TrainSpec().steps, "micro_batch_size": 0,
               "gradient_checkpointing": False}


class TrainSetup(QWidget):
    """The settings column (scrolls); `top_bar` holds the method, dataset and model line the tab puts above it."""

    method_changed = Signal()  # another method (or Pipeline) is chosen
    changed = Signal()  # the method's fields changed (base, data, adapter, options)
    warning = Signal(str)  # something of a config shown could not be shown

    def __init__(self, ctx: AppContext, parent: QWidget | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self.model_spec: ModelSpec | None = None
        self.base_model = ""  # the Model tab's base (continued pretraining)
        self.editable = True
        self.sandbox_dialog = None
        self._sandbox_probed = False
        # The method defaults the fields hold (a field the person typed is dropped: never replaced again).
        self._auto: dict[str, Any] = dict(_AUTO_START)
        self.gpu_count = 0
        self.machine_given: Machine | None = None  # a machine to check against (tests); else this one, read each time
        self._gpu_seen: Machine | None = None  # this machine's GPU, once torch has looked (set_gpu_count)
        self.findings: list[Finding] = []  # what preflight found in the settings shown
        self._records_cache: dict[tuple, int] = {}
        self.top_bar = self._build_top_bar()
        self.scroll = self._build_column()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.scroll)
        self._connect()
        self.refresh_datasets()
        self._on_method_changed()

    def _build_top_bar(self) -> QWidget:
        """What to train on what: the method, the dataset, the model."""
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
        self.dataset_box.setMinimumWidth(160)
        self.dataset_box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.dataset_box.setMinimumContentsLength(16)
        self.dataset_label = QLabel("Dataset")
        self.model_label = QLabel("")
        self.model_label.setProperty("role", "muted")
        self.model_label.setWordWrap(True)  # a long model line wraps rather than widen the window
        top_bar = QWidget()
        top = QHBoxLayout(top_bar)
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(QLabel("Method"))
        top.addWidget(self.method_box)
        top.addSpacing(12)
        top.addWidget(self.dataset_label)
        top.addWidget(self.dataset_box, 1)
        top.addSpacing(12)
        top.addWidget(self.model_label, 1)
        top.addStretch(0)  # takes the room of the pretraining-only fields when they are hidden
        return top_bar

    def _build_column(self) -> QScrollArea:
        """The column: method fields, hyperparameters, distributed settings, or the pipeline's stages."""
        self.method_panel = MethodPanel(lambda: self.ctx.workspace)
        self.columns_box = DataColumnsBox()  # the tables' column mapping, under the method's data list
        self.form = SpecForm(TrainSpec, advanced_switch=False)
        for name, (words, tip) in choice_labels().items():  # which trackers this machine has
            self.form.editors["trackers"].checks[name].setText(words.replace("&", "&&"))  # "&" is no shortcut
            self.form.editors["trackers"].checks[name].setToolTip(tip)
        self.findings_box = FindingsBox("trainFindings")  # every finding; a fixed height: no field ever moves
        self.epochs_row = EpochsRow()
        self.hyper_group = _group("Hyperparameters", "hyperGroup", self.findings_box, self.form, self.epochs_row)
        # One switch for the advanced rows of every group here; the Distributed group shows with them, or by itself
        # when this machine has several GPUs (torchrun matters then).
        self.advanced_check = QCheckBox("Show advanced settings")
        self.advanced_check.setObjectName("trainShowAdvanced")
        self.advanced_check.setToolTip("Settings whose defaults suit most runs: optimizer details, precision, "
                                       "checkpoints, evaluation, adapter layers, torchrun")
        # The config's `distributed` block: used when torchrun launches the run (Show CLI command has the command).
        self.dist_form = SpecForm(DistributedSpec, advanced_switch=False)
        dist_note = QLabel("With more than 1 process per machine, Start launches the run under torchrun on this "
                           "machine, its processes followed here; Show CLI command gives the same command for a "
                           "terminal or other machines.")
        dist_note.setProperty("role", "muted")
        dist_note.setWordWrap(True)
        self.dist_group = _group("Distributed (torchrun)", "distributedGroup", dist_note, self.dist_form)
        self.pipeline_editor = PipelineEditor(lambda: self.ctx.workspace,
                                              lambda: self.model_spec.to_dict() if self.model_spec else {})
        self.pipeline_editor.setObjectName("pipelineEditor")
        self.plan_label = QLabel("")
        self.plan_label.setObjectName("demoPlan")
        self.plan_label.setWordWrap(True)
        self.plan_group = _group("What the CPU demo runs", "demoPlanGroup", self.plan_label)
        self.plan_group.setVisible(False)
        column = QWidget()
        cl = QVBoxLayout(column)
        cl.setContentsMargins(0, 0, 6, 0)
        for w in (self.plan_group, self.method_panel, self.columns_box, self.pipeline_editor, self.hyper_group,
                  self.dist_group, self.advanced_check):
            cl.addWidget(w)
        cl.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)  # rows wrap instead
        scroll.setWidget(column)
        scroll.setMinimumWidth(300)
        return scroll

    def _connect(self) -> None:
        self.dist_form.changed.connect(lambda: self.dist_form.validate())
        self.form.changed.connect(self._on_form_changed)
        self.advanced_check.toggled.connect(self.set_show_advanced)
        self.epochs_row.steps_wanted.connect(lambda steps: self.form.set_value("steps", steps))
        self.dataset_box.currentIndexChanged.connect(lambda _i: self._on_dataset_changed())
        self.pipeline_editor.error.connect(lambda message: self.ctx.report_error(message, title="Pipeline"))
        self.method_box.currentIndexChanged.connect(lambda _i: self._on_method_changed())
        self.method_panel.changed.connect(self._on_panel_changed)
        self.method_panel.sandbox_check_requested.connect(lambda: self.check_sandbox(show_dialog=True))

    # --- advanced settings, epochs ---
    def set_show_advanced(self, on: bool) -> None:
        """Show the advanced rows of every form in the column (and the Distributed group)."""
        if self.advanced_check.isChecked() != bool(on):
            self.advanced_check.setChecked(bool(on))  # comes back here through toggled
            return
        self.form.set_show_advanced(on)
        self.dist_form.set_show_advanced(on)
        self.method_panel.set_show_advanced(on)
        self._update_dist_group()
        self.refresh_findings()  # a hidden option's finding moves under its row, or back

    def set_gpu_count(self, count: int) -> None:
        """GPUs this machine has (known once torch is loaded): with several, the Distributed group shows. With one
        or more, its free memory is read in the background (the first CUDA call takes a moment) for the checks."""
        self.gpu_count = int(count)
        self._update_dist_group()
        if self.gpu_count <= 0:
            self._set_gpu_seen(Machine(0))
            return
        task = self.ctx.runner.start("machine-probe", lambda: [this_machine(probe_gpu=True)])
        task.produced.connect(self._set_gpu_seen)

    def _set_gpu_seen(self, machine: Machine) -> None:
        self._gpu_seen = machine
        self._apply_method_defaults()  # the memory the run has is known now
        self.refresh_findings()

    def _update_dist_group(self) -> None:
        pipeline = self.current_method() is PIPELINE
        self.dist_group.setVisible(not pipeline and (self.advanced_check.isChecked() or self.gpu_count > 1))
        self._fit_column()

    def _fit_column(self) -> None:
        """The column is as wide as its widest row needs (it scrolls up and down, never sideways: a row that did
        not fit was cut at the edge)."""
        needed = self.scroll.widget().minimumSizeHint().width() + self.scroll.verticalScrollBar().sizeHint().width()
        self.scroll.setMinimumWidth(max(300, needed + 2))

    def _on_form_changed(self) -> None:
        self._apply_method_defaults()  # another batch size: another micro-batch fits
        self.form.validate()
        self.update_epochs()
        self.refresh_findings()

    def _on_dataset_changed(self) -> None:
        self.update_epochs()
        self.refresh_findings()

    def update_epochs(self) -> None:
        """Epochs of the run as set: steps × what a step takes over what the data holds."""
        m = self.current_method()
        spec = self.form.spec()
        if m is PIPELINE or m.key == "selfplay":
            self.epochs_row.update_run(spec.steps, 0, 0, "")
            return
        if not m.finetune:
            dataset = self.dataset_box.currentData() or ""
            self.epochs_row.update_run(spec.steps, spec.batch_size, dataset_windows(dataset) if dataset else 0,
                                       "training windows")
            return
        records = self._count_records(self.method_panel.data_files())
        if m.data == "grpo":
            options = self.method_panel.options_dict()
            self.epochs_row.update_run(spec.steps, int(options.get("prompts_per_step", 0) or 0), records, "prompts")
        else:
            self.epochs_row.update_run(spec.steps, spec.batch_size, records, "records")

    def _count_records(self, files: list[str]) -> int:
        key = []
        for name in files:
            try:
                st = Path(name).stat()
                key.append((name, st.st_mtime_ns, st.st_size))
            except OSError:
                key.append((name, 0, 0))
        cache_key = tuple(key)
        if cache_key not in self._records_cache:
            self._records_cache = {cache_key: count_records([k[0] for k in key if k[2]])}
        return self._records_cache[cache_key]

    # --- inputs from other tabs ---
    def set_model_spec(self, spec: ModelSpec | None) -> None:
        self.model_spec = spec
        self._update_model_label()
        self.refresh_findings()

    def set_base_model(self, path: str) -> None:
        """The Model tab's base (continued pretraining); also offered as the fine-tuning methods' base."""
        self.base_model = path
        if path and self.editable:
            self.method_panel.base_picker.set_path(path)
        self._update_model_label()
        self.refresh_findings()

    def _update_model_label(self) -> None:
        if self.base_model:
            self.model_label.setText(f"Model: fine-tune {model_name(self.base_model)}")
        elif self.model_spec is not None:

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
        # the app's choice, not the person's: another method's defaults replace them (LoRA never inherits 0.002)
        self._auto = {**_AUTO_START, "lr": spec.lr, "steps": spec.steps}

    def sample_corpus(self) -> SampleCorpus | None:
        """With no dataset chosen (pretraining): the bundled sample corpus's files, a new dataset folder to prepare
        them into and the settings that fit the model. None when a prepared dataset is chosen; UserError when the
        corpus is missing."""
        if (self.dataset_box.currentData() or SAMPLE_DATASET) != SAMPLE_DATASET:
            return None
        from desktop_app.engine.data.sample_corpus import sample_corpus_files  # lazy: start-up

        files = [str(p) for p in sample_corpus_files()]
        if not files:
            raise UserError(f"No dataset chosen and the bundled sample corpus is missing ({sample_corpus_dir()}). "
                            "Prepare a dataset on the Data tab first.")
        spec = self.model_spec or ModelSpec()
        folder = self.ctx.workspace.new_path("datasets", f"sample-corpus-ctx{spec.context_length}")
        data_spec = DataSpec(vocab_size=spec.vocab_size, context_length=spec.context_length)
        return SampleCorpus(files, str(folder), data_spec)

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
        if m is not PIPELINE:
            self.method_panel.set_method(m.key)
        self._show_method_groups()
        self.columns_box.show_for(self._table_data())
        for w in (self.dataset_label, self.dataset_box, self.model_label):
            w.setVisible(not m.finetune)
        self._apply_method_defaults()
        if m.key == "selfplay" and not self._sandbox_probed:
            self.check_sandbox(show_dialog=False)
        self.update_epochs()
        self.refresh_findings()
        self.method_changed.emit()

    def _on_panel_changed(self) -> None:
        self.columns_box.show_for(self._table_data())
        self._apply_method_defaults()
        self.update_epochs()
        self.refresh_findings()
        self.changed.emit()

    def _apply_method_defaults(self) -> None:
        """Follow the run's opening settings (engine/train/opening.py: the method's learning rate for the model's
        size, the steps, the micro-batch and gradient checkpointing that fit this machine) unless the person typed
        their own: a field that no longer holds the value it was given is theirs from then on."""
        new = self.opening_settings()
        spec, changes = self.form.spec(), {}
        for name, value in new.items():
            if name in self._auto and _same(getattr(spec, name), self._auto[name]):
                self._auto[name] = value
                if not _same(getattr(spec, name), value):
                    changes[name] = value
            else:
                self._auto.pop(name, None)
        if changes:
            self.form.set_values(changes)

    def opening_settings(self) -> dict[str, Any]:
        """What the run the form describes starts from on this machine (the method's defaults where the run cannot
        be planned yet)."""
        m = self.current_method()
        if m is PIPELINE:
            return {}
        try:
            config = plan_run(self.run_request(self.dataset_box.currentData() or ""))
            return opening_settings(config, self.machine())
        except (UserError, SpecError, ValueError, TypeError, KeyError, OSError):
            return method_defaults(m.objective, self.method_panel.adapter())

    # --- what would not work ---
    def set_machine(self, machine: Machine | None) -> None:
        """Check the settings against `machine` instead of this one (None: this one again)."""
        self.machine_given = machine
        self.refresh_findings()

    def machine(self) -> Machine:
        """The machine the checks use: free RAM read now, the GPU as last seen (unknown until torch has looked)."""
        if self.machine_given is not None:
            return self.machine_given
        free, total = ram_memory()
        if self._gpu_seen is None:
            return Machine(free, total, gpu_known=False)
        seen = self._gpu_seen
        return Machine(free, total, seen.gpu_free, seen.gpu_total, seen.gpu_name)

    def record_count(self) -> int | None:
        """The fine-tuning data's record count, for the checks (None where the method reads no such records)."""
        m = self.current_method()
        return self._count_records(self.method_panel.data_files()) if m.data in ("sft", "dpo") else None

    def check_request(self, request: RunRequest | None = None) -> list[Finding]:
        """What preflight finds in `request` (default: the run the form describes) on this machine, as the form
        changes; none for a pipeline, or for settings the engine cannot plan yet (Start's own checks name those)."""
        if self.current_method() is PIPELINE:
            return []
        records = self.record_count()
        try:
            request = request or self.run_request(self.dataset_box.currentData() or "")
            return preflight_request(request, self.machine(), records=records)
        except (UserError, SpecError, ValueError, TypeError, KeyError, OSError):
            return []

    def refresh_findings(self) -> None:
        """Every finding in the findings box, and the label of its setting (a hyperparameter, a method option) in
        the finding's colour with the message in its tooltip."""
        self.findings = self.check_request()
        self.findings_box.show_findings(self.findings)
        mark_labels(self.form.labels, self.findings)
        options = self.method_panel.options_form()
        if options is not None:
            mark_labels(options.labels, self.findings)

    def check_sandbox(self, *, show_dialog: bool = False) -> None:
        """Probe the sandboxed executor in the background; the Self-play fields show its state."""
        from desktop_app.ui.widgets.sandbox_status import SandboxStatusDialog, probe_sandbox  # lazy: start-up

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

    def _show_method_groups(self) -> None:
        """The column's groups the chosen method uses: its panel and hyperparameters, or a pipeline's stages."""
        pipeline = self.current_method() is PIPELINE
        self.method_panel.setVisible(not pipeline)
        self.pipeline_editor.setVisible(pipeline)
        self.hyper_group.setVisible(not pipeline)  # each stage has its own
        self._update_dist_group()

    def show_plan(self, lines: list[str] | None) -> None:
        """A job that runs its own recipe (the CPU demo): its steps in place of the form, whose settings it does
        not use; None shows the form again."""
        self.plan_label.setText("\n".join(lines or []))
        self.plan_group.setVisible(bool(lines))
        if lines:
            for w in (self.method_panel, self.pipeline_editor, self.hyper_group, self.dist_group, self.advanced_check):
                w.setVisible(False)
        else:
            self.advanced_check.setVisible(True)
            self._show_method_groups()  # the display keeps the ended demo's status: no method change to announce

    def set_editable(self, on: bool) -> None:
        """While a run trains, its settings are shown, not edited."""
        self.editable = on
        for w in (self.dataset_box, self.form, self.method_box, self.method_panel, self.dist_form, self.epochs_row):
            w.setEnabled(on)
        self.pipeline_editor.set_editable(on)

    # --- the run config ---
    def build_config(self, dataset: str = "") -> RunConfig:
        """The run config of the form as the engine plans it: pretraining on `dataset`, or the chosen method on its
        base and data (not yet fitted to the dataset: the engine does that when the run starts)."""
        return plan_run(self.run_request(dataset))

    def run_request(self, dataset: str = "") -> RunRequest:
        """The form's settings in the engine's words (engine/train/request.py decides everything else)."""
        train, distributed = self.form.spec().to_dict(), self.distributed_dict()
        m = self.current_method()
        if m.finetune:
            table_data = self._table_data()
            columns = dict(table_data.columns) if table_data is not None else {}
            return RunRequest(**self.method_panel.config_fields(), columns=columns, train=train,
                              distributed=distributed)
        return RunRequest(model=self.model_spec.to_dict() if (self.model_spec and not self.base_model) else {},
                          base_model=self.base_model, dataset=dataset, objective=m.objective, train=train,
                          distributed=distributed)

    def _table_data(self) -> DataFileList | None:
        """The data list whose tables the column mapping reads: SFT and DPO data (records), not GRPO's prompts."""
        m = self.current_method()
        return self.method_panel.data_list if m is not PIPELINE and m.data in ("sft", "dpo") else None

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
            table_data = self._table_data()
            if table_data is not None:  # before the files, so they are checked with the run's own mapping
                table_data.columns = dict(config.columns)
            self.method_panel.apply_config(config)
        self.form.set_spec(config.train_spec())
        try:
            self.dist_form.set_spec(config.distributed_spec())
        except SpecError as exc:  # shown, not fatal: a resume runs the config as it is
            self.warning.emit(f"the Distributed fields cannot show this run's settings: {exc}")
        self._auto = {}  # the run's own settings, never replaced by a method default
