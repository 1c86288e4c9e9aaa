"""The Train tab's pipeline editor: a list of stages, each one a method with its base, data, options and
hyperparameters, edited with the same MethodPanel and TrainSpec form as a single run; pipeline JSON in and out
(the engine's format, engine/pipeline_folder.py); and, while a pipeline runs, each stage's state
(done / running (step n/N) / waiting).

A stage's config is a compact run config: only the fields that differ from RunConfig's defaults. A stage with
neither base_model nor model starts from the previous stage's output (the engine fills base_model in).
Nothing here trains: the Train tab hands `pipeline()` to the engine.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLineEdit,
    QListWidget,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from desktop_app.engine.methods import METHOD_BY_KEY, METHODS, Method, method_of
from desktop_app.engine.pipeline_folder import load_pipeline
from desktop_app.engine.specs import RunConfig, SpecError, TrainSpec, save_json
from desktop_app.engine.train.request import make_run_config
from desktop_app.ui.widgets.data_columns import DataColumnsBox
from desktop_app.ui.widgets.data_files import DataFileList, describe_data_file
from desktop_app.ui.widgets.layouts import add_items, group_column, note_label
from desktop_app.ui.widgets.method_panel import MethodPanel
from desktop_app.ui.widgets.spec_form import SpecForm

# What a stage shows while (or after) a pipeline runs; the engine's pipeline_state.json statuses map onto them.
STATE_TEXT = {"waiting": "waiting", "running": "running", "done": "✓ done", "stopped": "■ stopped",
              "failed": "✗ failed"}
ENGINE_STATES = {"pending": "waiting", "running": "running", "completed": "done", "early_stopped": "done",
                 "stopped": "stopped", "failed": "failed"}
_DEFAULTS = RunConfig().to_dict()


def compact_config(config: RunConfig) -> dict[str, Any]:
    """The fields of `config` that differ from RunConfig's defaults (the objective always): a readable stage."""
    return {k: v for k, v in config.to_dict().items() if k == "objective" or v != _DEFAULTS.get(k)}


def follows_previous(config: dict[str, Any]) -> bool:
    """A stage with neither a base model nor a model spec starts from the previous stage's output."""
    return not config.get("base_model") and not config.get("model")


@dataclass
class StageDraft:
    name: str
    method: str  # METHODS key
    config: dict[str, Any]  # compact run config


class PipelineEditor(QWidget):
    """Stage list (add / remove / reorder), the selected stage's fields, pipeline JSON load/save, stage states."""

    changed = Signal()
    error = Signal(str)  # a file that cannot be loaded or saved, in words

    def __init__(self, workspace_getter: Callable[[], Any], model_getter: Callable[[], dict[str, Any]],
                 parent: QWidget | None = None):
        super().__init__(parent)
        self._workspace = workspace_getter
        self._model = model_getter  # the Model tab's spec (a dict; {} when it has problems)
        self.stages: list[StageDraft] = []
        self.states: list[tuple[str, str]] = []  # (state, detail) per stage; [] = not run
        self._current = -1
        self._loading = False
        self._editable = True

        stages_box = self._build_stages_box()
        self.stage_group = self._build_stage_group(workspace_getter)
        add_items(QVBoxLayout(self), stages_box, self.stage_group, margins=0)
        self._connect_signals()
        self.refresh()
        self._update_buttons()

    def _build_stages_box(self) -> QGroupBox:
        """The stage list, the buttons that edit it, and pipeline JSON in and out."""
        self.stage_list = QListWidget()
        self.stage_list.setObjectName("pipelineStageList")
        self.stage_list.setMinimumHeight(90)
        self.stage_list.setMaximumHeight(150)
        self.stage_list.setToolTip("The stages, run top to bottom; each starts from the previous one's output "
                                   "unless it names its own base model")
        self.add_btn = QPushButton("Add stage")
        self.add_btn.setObjectName("pipelineAddStage")
        self.remove_btn = QPushButton("Remove")
        self.up_btn = QPushButton("Up")
        self.down_btn = QPushButton("Down")
        self.load_btn = QPushButton("Load pipeline JSON…")
        self.save_btn = QPushButton("Save pipeline JSON…")
        edit_row = add_items(QHBoxLayout(), self.add_btn, self.remove_btn, self.up_btn, self.down_btn)
        file_row = add_items(QHBoxLayout(), self.load_btn, self.save_btn)
        stages_box, sl = group_column("Pipeline stages", "pipelineGroup")
        add_items(sl, self.stage_list, edit_row, file_row)
        return stages_box

    def _build_stage_group(self, workspace_getter: Callable[[], Any]) -> QGroupBox:
        """The selected stage: name, method, where it starts, then the method's panel and the hyperparameters."""
        group, stl = group_column("Stage", "pipelineStageGroup")
        self.name_edit = QLineEdit()
        self.name_edit.setObjectName("stageName")
        self.name_edit.setToolTip("The stage's name: its folder is stages/NN-name (letters, digits, '-', '_', '.')")
        self.method_box = QComboBox()
        self.method_box.setObjectName("stageMethodBox")
        for m in METHODS:
            self.method_box.addItem(m.label, m.key)
            self.method_box.setItemData(self.method_box.count() - 1, m.help, Qt.ItemDataRole.ToolTipRole)
        self.follow_check = QCheckBox("Start from the previous stage's output")
        self.follow_check.setObjectName("stageFollows")
        self.follow_check.setToolTip("Use the model the previous stage trained as this stage's base (a LoRA stage's "
                                     "adapter is merged in); unchecked: choose a base model below")
        self.pretrain_box = self._build_pretrain_box()
        self.panel = MethodPanel(workspace_getter)
        # The Train tab's own panel runs the demo and the sandbox probe; a stage's panel only describes a stage.
        self.panel.demo_btn.hide()
        self.panel.sandbox_btn.hide()
        self.columns_box = DataColumnsBox()  # the stage's tables: which column holds what (RunConfig.columns)
        self.columns_box.setObjectName("stageColumnsGroup")
        self.form = SpecForm(TrainSpec)  # with its own "Show advanced settings"
        hyper, hl = group_column("Hyperparameters of this stage")
        hl.addWidget(self.form)
        top = QFormLayout()
        top.addRow("Name", self.name_edit)
        top.addRow("Method", self.method_box)
        add_items(stl, top, self.follow_check, self.pretrain_box, self.panel, self.columns_box, hyper)
        return group

    def _build_pretrain_box(self) -> QWidget:
        """What a pretraining stage reads and trains: its dataset, and the Model tab's spec on request."""
        self.dataset_box = QComboBox()
        self.dataset_box.setObjectName("stageDatasetBox")
        self.dataset_box.setToolTip("The prepared dataset this pretraining stage reads (Data tab)")
        self.model_label = note_label()
        self.use_model_btn = QPushButton("Use the Model tab's spec")
        self.use_model_btn.setToolTip("Train this stage's model from scratch with the Model tab's current spec")
        box = QWidget()
        pl = QFormLayout(box)
        pl.setContentsMargins(0, 0, 0, 0)
        pl.addRow("Dataset", self.dataset_box)
        pl.addRow(self.model_label)
        pl.addRow(self.use_model_btn)
        return box

    def _connect_signals(self) -> None:
        self.stage_list.currentRowChanged.connect(self._on_row)
        self.add_btn.clicked.connect(lambda _=False: self.add_stage())
        self.remove_btn.clicked.connect(lambda _=False: self.remove_stage())
        self.up_btn.clicked.connect(lambda _=False: self.move_stage(self._current, -1))
        self.down_btn.clicked.connect(lambda _=False: self.move_stage(self._current, 1))
        self.load_btn.clicked.connect(self._load_dialog)
        self.save_btn.clicked.connect(self.save_dialog)
        self.name_edit.editingFinished.connect(self._store)
        self.method_box.currentIndexChanged.connect(lambda _i: self._on_stage_method())
        self.follow_check.toggled.connect(lambda _on: self._store())
        self.dataset_box.currentIndexChanged.connect(lambda _i: self._store())
        self.use_model_btn.clicked.connect(lambda _=False: self._use_model_tab_spec())
        self.panel.changed.connect(self._on_panel_changed)
        self.form.changed.connect(self._store)

    # --- stages ---
    def add_stage(self, method: str = "", *, name: str = "") -> int:
        """Append a stage (default: SFT, or pretraining as the first stage when the Model tab has a spec); it starts
        from the previous stage's output. Returns its index, selected."""
        method = method or ("pretraining" if not self.stages and self._model() else "sft")
        m = METHOD_BY_KEY[method]
        train = TrainSpec(lr=m.default_lr(m.adapter or "none")).to_dict()
        if method == "pretraining":
            config, _unknown = make_run_config(model={} if self.stages else self._model(),
                                               dataset=self._first_dataset(), train=train)
        else:
            config, _unknown = make_run_config(objective=m.objective, train=train,
                                               adapter={"kind": m.adapter} if m.adapter not in (None, "none") else {})
        self.stages.append(StageDraft(self._free_name(name or method), method, compact_config(config)))
        self._reset_states()
        self._rebuild_list(len(self.stages) - 1)
        self.changed.emit()
        return len(self.stages) - 1

    def remove_stage(self, index: int | None = None) -> None:
        index = self._current if index is None else index
        if 0 <= index < len(self.stages):
            del self.stages[index]
            self._reset_states()
            self._rebuild_list(min(index, len(self.stages) - 1))
            self.changed.emit()

    def move_stage(self, index: int, delta: int) -> None:
        to = index + delta
        if 0 <= index < len(self.stages) and 0 <= to < len(self.stages):
            self.stages[index], self.stages[to] = self.stages[to], self.stages[index]
            self._reset_states()
            self._rebuild_list(to)
            self.changed.emit()

    def select_stage(self, index: int) -> None:
        self.stage_list.setCurrentRow(index)

    def current_index(self) -> int:
        return self._current

    def _free_name(self, base: str) -> str:
        names = {s.name for s in self.stages}
        name, n = base, 2
        while name in names:
            name, n = f"{base}-{n}", n + 1
        return name

    def _first_dataset(self) -> str:
        return str(self.dataset_box.itemData(0) or "") if self.dataset_box.count() else ""

    # --- the pipeline as a whole ---
    def pipeline(self) -> dict[str, Any]:
        """The engine's pipeline JSON for these stages."""
        return {"format_version": 1, "stages": [{"name": s.name, "config": s.config} for s in self.stages]}

    def set_pipeline(self, data: dict[str, Any] | str | Path) -> None:
        """Show a pipeline (a dict or a pipeline JSON file), checked by the engine first: SpecError lists every
        problem of every stage, and the stages shown stay as they were."""

        loaded = load_pipeline(data)
        stages = []
        for stage in loaded:
            config = RunConfig.from_dict(stage.config)
            stages.append(StageDraft(stage.name, method_of(config).key, compact_config(config)))
        self.stages = stages
        self._reset_states()
        self._rebuild_list(0 if stages else -1)
        self.changed.emit()

    def problems(self) -> list[str]:
        """What stops this pipeline from starting: the engine's checks of every stage, then files and folders."""

        if not self.stages:
            return ["add at least one stage"]
        try:
            load_pipeline(self.pipeline())
            found: list[str] = []
        except SpecError as exc:
            found = [self._in_words(p) for p in exc.problems]
        for i, stage in enumerate(self.stages, 1):
            where = f"stage {i} ({stage.name})"
            config, m = stage.config, METHOD_BY_KEY[stage.method]
            base = config.get("base_model", "")
            if base and not Path(base).expanduser().exists():
                found.append(f"{where}: the base model {base} does not exist")
            dataset = config.get("dataset", "")
            if m.key == "pretraining" and dataset and not (Path(dataset) / "manifest.json").is_file():
                found.append(f"{where}: {dataset} is not a prepared dataset (no manifest.json)")
            for path in config.get("data", []) if m.data else []:
                _label, problem = describe_data_file(path, m.data, config.get("columns") or None)
                if problem:
                    found.append(f"{where}: {problem}")
        return found

    def _in_words(self, problem: str) -> str:
        """The engine's word for a first stage with nothing to start from, as this editor shows it."""
        if "the first stage needs a model spec or a base_model" not in problem or not self.stages:
            return problem
        first = self.stages[0]
        where = f"stage 1 ({first.name})"
        if first.method == "pretraining":
            return (f"{where}: it trains a model from scratch, but the Model tab's spec has problems: fix them there, "
                    "or choose another first stage")
        return (f"{where}: choose its base model below (untick 'Start from the previous stage's output'): the first "
                "stage has no earlier stage to start from")

    def load_file(self, path: str | Path) -> bool:
        try:
            self.set_pipeline(Path(path))
        except SpecError as exc:
            self.error.emit(f"{Path(path).name} is not a pipeline this app can run:\n"
                            + "\n".join(f"• {p}" for p in exc.problems))
            return False
        return True

    def save_file(self, path: str | Path) -> bool:
        try:
            save_json(self.pipeline(), path)
        except OSError as exc:
            self.error.emit(f"Cannot save {path}: {exc.strerror or exc}")
            return False
        return True

    def pipeline_json(self) -> str:
        return json.dumps(self.pipeline(), indent=2)

    def _load_dialog(self, _checked: bool = False) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Load a pipeline", "", "Pipeline JSON (*.json);;All files (*)")
        if path:
            self.load_file(path)

    def save_dialog(self, _checked: bool = False) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save the pipeline", "pipeline.json", "JSON (*.json)")
        if path:
            self.save_file(path)

    # --- states while it runs ---
    def set_states(self, states: list[tuple[str, str]]) -> None:
        """(state, detail) per stage: state one of STATE_TEXT's keys, detail e.g. "step 3/10"."""
        self.states = list(states) + [("waiting", "")] * (len(self.stages) - len(states))
        self._refresh_texts()

    def set_stage_state(self, index: int, state: str, detail: str = "") -> None:
        if not self.states:
            self.states = [("waiting", "")] * len(self.stages)
        if 0 <= index < len(self.states):
            self.states[index] = (state, detail)
            self._refresh_texts(index)

    def set_engine_states(self, engine_state: dict[str, Any], *, ended: bool = False) -> None:
        """The states of pipeline_state.json (the engine's record of where the pipeline stands). ended: no process
        runs it now, so a stage still marked running was interrupted (shown as stopped)."""
        by_name = {s.get("name"): s for s in engine_state.get("stages", []) if isinstance(s, dict)}
        states = []
        for stage in self.stages:
            rec = by_name.get(stage.name, {})
            state = ENGINE_STATES.get(str(rec.get("status", "pending")), "waiting")
            if ended and state == "running":
                state = "stopped"
            states.append((state, f"step {rec['step']}" if rec.get("step") and state != "waiting" else ""))
        self.set_states(states)

    def stage_states(self) -> list[str]:
        return [state for state, _detail in self.states] or ["waiting"] * len(self.stages)

    def _reset_states(self) -> None:
        self.states = []

    def set_editable(self, on: bool) -> None:
        """While a pipeline runs the stages are shown, not edited (the list stays browsable)."""
        self._editable = on
        self.stage_group.setEnabled(on)
        self.load_btn.setEnabled(on)
        self._update_buttons()

    # --- list and selected stage ---
    def _item_text(self, i: int) -> str:
        s = self.stages[i]
        text = f"{i + 1}. {s.name} — {METHOD_BY_KEY[s.method].label}"
        if i and follows_previous(s.config):
            text += " ← previous"
        if self.states:
            state, detail = self.states[i]
            text += f"   [{STATE_TEXT.get(state, state)}{' (' + detail + ')' if detail else ''}]"
        return text

    def _rebuild_list(self, select: int) -> None:
        self.stage_list.blockSignals(True)
        self.stage_list.clear()
        for i in range(len(self.stages)):
            self.stage_list.addItem(self._item_text(i))
        self.stage_list.blockSignals(False)
        self._current = -1
        if select >= 0:
            self.stage_list.setCurrentRow(select)  # -> _on_row shows it
        self._update_buttons()

    def _refresh_texts(self, only: int | None = None) -> None:
        for i in range(len(self.stages)) if only is None else (only,):
            item = self.stage_list.item(i)
            if item is not None:
                item.setText(self._item_text(i))

    def _update_buttons(self) -> None:
        n, i, on = len(self.stages), self._current, self._editable
        self.add_btn.setEnabled(on)
        self.remove_btn.setEnabled(on and 0 <= i < n)
        self.up_btn.setEnabled(on and i > 0)
        self.down_btn.setEnabled(on and 0 <= i < n - 1)
        self.save_btn.setEnabled(n > 0)
        self.stage_group.setVisible(0 <= i < n)

    def _on_row(self, row: int) -> None:
        self._current = row
        self._update_buttons()
        if 0 <= row < len(self.stages):
            self._show_stage(row)

    def _show_stage(self, i: int) -> None:
        stage = self.stages[i]
        config = RunConfig.from_dict(stage.config)
        follows = i > 0 and follows_previous(stage.config)
        self._loading = True
        try:
            self.stage_group.setTitle(f"Stage {i + 1}: {stage.name}")
            self.name_edit.setText(stage.name)
            self.method_box.setCurrentIndex(self.method_box.findData(stage.method))
            self.panel.set_method(stage.method)
            self.follow_check.setChecked(follows)
            if stage.method == "pretraining":
                self._select_dataset(config.dataset)
            else:
                table_data = self._table_data()
                if table_data is not None:  # before the files, so they are checked with the stage's own mapping
                    table_data.columns = dict(config.columns)
                self.panel.apply_config(config)
            self.form.set_spec(config.train_spec())
            self._update_stage_fields()
            self.columns_box.show_for(self._table_data())
        finally:
            self._loading = False

    def _update_stage_fields(self) -> None:
        i = self._current
        if not 0 <= i < len(self.stages):
            return
        stage = self.stages[i]
        pretraining = stage.method == "pretraining"
        follows = i > 0 and self.follow_check.isChecked()
        self.follow_check.setVisible(i > 0)
        self.pretrain_box.setVisible(pretraining)
        self.panel.base_group.setVisible(not pretraining and not follows)
        model = stage.config.get("model") or {}
        if follows:
            self.model_label.setText("Model: the previous stage's output (continued pretraining)")
        elif model:
            g = model.get
            self.model_label.setText(f"Model: from scratch — {g('family', '?')}, {g('n_layers', '?')} layers × "
                                     f"{g('d_model', '?')}, context {g('context_length', '?')}")
        elif stage.config.get("base_model"):
            self.model_label.setText(f"Model: continues {stage.config['base_model']}")
        else:
            self.model_label.setText("Model: none yet — press “Use the Model tab's spec”")
        self.use_model_btn.setVisible(pretraining and not follows)

    def _on_stage_method(self) -> None:
        if self._loading or not 0 <= self._current < len(self.stages):
            return
        stage = self.stages[self._current]
        old = METHOD_BY_KEY[stage.method], self.panel.adapter()
        stage.method = self.method_box.currentData()
        self._loading = True
        try:
            self.panel.set_method(stage.method)
        finally:
            self._loading = False
        self.columns_box.show_for(self._table_data())
        self._follow_default_lr(*old)
        if stage.method == "pretraining" and not stage.config.get("base_model") and not stage.config.get("model") \
                and not (self._current and self.follow_check.isChecked()):
            stage.config = {**stage.config, "model": self._model()}  # from scratch: the Model tab's spec
        self._store()

    def _table_data(self) -> DataFileList | None:
        """The data list whose tables the stage's column mapping reads: SFT and DPO records, not GRPO's prompts."""
        return self.panel.data_list if self.panel.method.data in ("sft", "dpo") else None

    def _on_panel_changed(self) -> None:
        if self._loading or not 0 <= self._current < len(self.stages):
            return
        self.columns_box.show_for(self._table_data())
        stage = self.stages[self._current]
        kind = (stage.config.get("adapter") or {}).get("kind", "none")
        if self.panel.adapter() != kind:
            self._follow_default_lr(METHOD_BY_KEY[stage.method], kind)
        self._store()

    def _follow_default_lr(self, old_method: Method, old_adapter: str) -> None:
        """A learning rate still at the old method's default follows the new method's (the user's own stays)."""
        old = old_method.default_lr(old_adapter)
        new = self.panel.method.default_lr(self.panel.adapter())
        current = self.form.spec().lr
        if abs(current - old) <= 1e-12 * max(1.0, abs(current)):
            self._loading = True
            try:
                self.form.set_value("lr", new)
            finally:
                self._loading = False

    def _store(self) -> None:
        """The selected stage's widgets -> its config (and its row's text)."""
        i = self._current
        if self._loading or not 0 <= i < len(self.stages):
            return
        stage = self.stages[i]
        name = self.name_edit.text().strip()
        if name and name != stage.name:
            stage.name = name
            self.stage_group.setTitle(f"Stage {i + 1}: {name}")
        follows = i > 0 and self.follow_check.isChecked()
        train = self.form.spec().to_dict()
        if stage.method == "pretraining":
            model = {} if follows else stage.config.get("model") or {}
            base = "" if follows or model else stage.config.get("base_model", "")
            config, _unknown = make_run_config(model=model, base_model=base,
                                               dataset=self.dataset_box.currentData() or "", train=train)
        else:
            fields = self.panel.config_fields()
            if follows:
                fields["base_model"] = ""
            table_data = self._table_data()
            columns = dict(table_data.columns) if table_data is not None and table_data.tables() else {}
            config, _unknown = make_run_config(**fields, columns=columns, train=train)
        stage.config = compact_config(config)
        self._update_stage_fields()
        self._refresh_texts(i)
        self.changed.emit()

    def _use_model_tab_spec(self) -> None:
        i = self._current
        model = self._model()
        if not model:
            self.error.emit("The Model tab's spec has problems; fix them first.")
            return
        if 0 <= i < len(self.stages):
            self.stages[i].config = {**self.stages[i].config, "model": model, "base_model": ""}
            self._store()

    # --- workspace lists ---
    def refresh(self) -> None:
        """Datasets and base models of the workspace (the Library changed)."""
        self.panel.base_picker.refresh()
        current = self.dataset_box.currentData()
        self._loading, was = True, self._loading
        try:
            self.dataset_box.clear()
            try:
                items = self._workspace().items("datasets")
            except OSError:
                items = []
            for p in items:
                if (p / "manifest.json").exists():
                    self.dataset_box.addItem(p.name, str(p))
            if current:
                self._select_dataset(current)
        finally:
            self._loading = was

    def _select_dataset(self, path: str) -> None:
        if not path:
            self.dataset_box.setCurrentIndex(-1)  # none: never another stage's dataset by accident
            return
        i = self.dataset_box.findData(str(path))
        if i < 0:
            self.dataset_box.addItem(Path(path).name, str(path))
            i = self.dataset_box.count() - 1
        self.dataset_box.setCurrentIndex(i)
