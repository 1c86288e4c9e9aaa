"""Model tab: design a ModelSpec (presets, every field with help), see its exact size and cost live."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QSpinBox,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from desktop_app.engine import presets
from desktop_app.engine.model import sizing
from desktop_app.engine.specs import ModelSpec, SpecError, load_json, save_json
from desktop_app.ui.context import AppContext
from desktop_app.ui.widgets.fitting import show_rows
from desktop_app.ui.widgets.layouts import add_items, button, note_label, scroll_area
from desktop_app.ui.widgets.spec_form import SpecForm

CUSTOM = "custom"


class ModelTab(QWidget):
    """Emits `spec_changed(ModelSpec|None)` (None while invalid) and `base_model_changed(str)`."""

    spec_changed = Signal(object)
    base_model_changed = Signal(str)

    def __init__(self, ctx: AppContext, parent: QWidget | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self.base_model = ""  # a local HF folder to start from instead of a fresh spec
        self._loading_preset = False

        top = self._build_preset_bar()
        form_box = self._build_form_box()
        figures = self._build_figures()
        self.problems = note_label(role="error")
        self.problems.setObjectName("modelProblems")
        right = add_items(QVBoxLayout(), figures, self.problems, (self._build_table_box(), 1))
        body = QHBoxLayout()
        body.addWidget(form_box, 2)
        body.addLayout(right, 3)
        add_items(QVBoxLayout(self), top, (body, 1))
        self._connect_signals()
        self.preset_box.setCurrentText(presets.DEFAULT_PRESET)
        self._on_preset(presets.DEFAULT_PRESET)

    def _build_preset_bar(self) -> QHBoxLayout:
        """The preset (its description beside it), spec files, and the Hugging Face folder to start from."""
        self.preset_box = QComboBox()
        self.preset_box.setObjectName("presetBox")
        for name, (desc, _spec) in presets.PRESETS.items():
            self.preset_box.addItem(name)
            self.preset_box.setItemData(self.preset_box.count() - 1, desc, role=3)  # tooltip role
        self.preset_box.addItem(CUSTOM)
        self.preset_desc = note_label()
        self.load_btn = QPushButton("Load spec…")
        self.save_btn = QPushButton("Save spec…")
        self.hf_btn = button("Start from a Hugging Face folder…", tip="Fine-tune a local Hugging Face causal-LM "
                                                                      "folder (llama or gpt2 family) instead of "
                                                                      "training a fresh model")
        return add_items(QHBoxLayout(), QLabel("Preset"), self.preset_box, (self.preset_desc, 1), self.load_btn,
                         self.save_btn, self.hf_btn)

    def _build_form_box(self) -> QGroupBox:
        """Every field of the spec (scrolling), and the base folder training starts from when one is chosen."""
        self.form = SpecForm(ModelSpec)
        form_box = QGroupBox("Architecture")
        self.base_label = note_label(role="ok")
        self.base_label.setVisible(False)
        self.clear_base_btn = QPushButton("Use a fresh model instead")
        self.clear_base_btn.setVisible(False)
        add_items(QVBoxLayout(form_box), scroll_area(self.form, vertical_only=False), self.base_label,
                  self.clear_base_btn)
        return form_box

    def _build_figures(self) -> QGroupBox:
        """The live figures (parameters, memory, FLOPs, tokens) and what the memory estimate assumes."""
        figures = QGroupBox("Size and cost")
        grid = QGridLayout(figures)
        self.params_label, self.memory_label, self.flops_label, self.tokens_label = labels = [
            note_label("–", role="metric", wrap=False) for _ in range(4)]
        self.params_label.setObjectName("paramsLabel")
        self.breakdown_label = note_label()
        self.batch_box = QSpinBox()
        self.batch_box.setRange(1, 4096)
        self.batch_box.setValue(16)
        self.batch_box.setToolTip("Batch size assumed by the training memory estimate")
        self.precision_box = QComboBox()
        self.precision_box.addItems(["fp32", "bf16", "fp16"])
        self.precision_box.setToolTip("Activation precision assumed by the memory estimate")
        captions = ["Parameters (exact)", "Training memory (est.)", "FLOPs / token (train)", "Compute-optimal tokens"]
        for i, (cap, lab) in enumerate(zip(captions, labels, strict=True)):
            row, col = 2 * (i // 2), i % 2  # two by two: the figures stay readable in a narrow window
            grid.addWidget(note_label(cap), row, col)
            grid.addWidget(lab, row + 1, col)
        opts = add_items(QHBoxLayout(), QLabel("Memory estimate for batch"), self.batch_box, QLabel("at"),
                         self.precision_box)
        opts.addStretch(1)
        grid.addLayout(opts, 4, 0, 1, 2)
        grid.addWidget(self.breakdown_label, 5, 0, 1, 2)
        return figures

    def _build_table_box(self) -> QGroupBox:
        """Every tensor of the model with its shape and parameter count."""
        self.table = QTableWidget(0, 3)
        self.table.setHorizontalHeaderLabels(["Tensor", "Shape", "Parameters"])
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.table.verticalHeader().setVisible(False)
        self.table.setAlternatingRowColors(True)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        show_rows(self.table, 3)  # the figures above may grow (a long breakdown): the table keeps a few rows in sight
        table_box = QGroupBox("Layer shapes")
        QVBoxLayout(table_box).addWidget(self.table)
        return table_box

    def _connect_signals(self) -> None:
        self.form.changed.connect(self._on_form_changed)
        self.preset_box.currentTextChanged.connect(self._on_preset)
        self.batch_box.valueChanged.connect(self.refresh)
        self.precision_box.currentTextChanged.connect(self.refresh)
        self.save_btn.clicked.connect(self._save_dialog)
        self.load_btn.clicked.connect(self._load_dialog)
        self.hf_btn.clicked.connect(self._hf_dialog)
        self.clear_base_btn.clicked.connect(lambda _=False: self.set_base_model(""))

    # --- state ---
    def current_spec(self) -> ModelSpec | None:
        """The spec in the form, or None while it has problems."""
        spec = self.form.spec()
        return None if spec.validate() else spec

    def set_spec(self, spec: ModelSpec, preset_name: str | None = None) -> None:
        self._loading_preset = True
        try:
            self.preset_box.setCurrentText(preset_name or CUSTOM)
            self.form.set_spec(spec)
        finally:
            self._loading_preset = False
        self.refresh()

    def _on_preset(self, name: str) -> None:
        if name == CUSTOM or name not in presets.PRESETS:
            self.preset_desc.setText("your own architecture")
            return
        self.preset_desc.setText(presets.PRESETS[name][0])
        if not self._loading_preset:
            self._loading_preset = True
            try:
                self.form.set_spec(presets.preset(name))
            finally:
                self._loading_preset = False
            self.refresh()

    def _on_form_changed(self) -> None:
        if not self._loading_preset:
            name = self.preset_box.currentText()
            if name in presets.PRESETS and self.form.spec() != presets.PRESETS[name][1]:
                self.preset_box.blockSignals(True)
                self.preset_box.setCurrentText(CUSTOM)
                self.preset_box.blockSignals(False)
                self.preset_desc.setText("your own architecture")
        self.refresh()

    def refresh(self, *_args: object) -> None:
        spec = self.form.spec()
        problems = spec.validate()
        self.form.show_problems([])
        self.problems.setText("\n".join(f"⚠ {p}" for p in problems))
        self.problems.setVisible(bool(problems))
        if problems:
            self._show_unavailable(self.form.in_words(problems[0]))
            self.spec_changed.emit(None)
            return
        self._show_figures(spec)
        self._fill_table(spec)
        self.spec_changed.emit(spec)

    def _show_unavailable(self, reason: str) -> None:
        """No figures while the spec has a problem: the last valid spec's would read as this one's."""
        for lab in (self.params_label, self.memory_label, self.flops_label, self.tokens_label):
            lab.setText("–")
        self.breakdown_label.setText(f"Memory breakdown: — (unavailable until the spec is fixed: {reason})")
        self.memory_label.setToolTip(reason)
        self.table.setRowCount(0)

    def _show_figures(self, spec: ModelSpec) -> None:
        n = sizing.count_parameters(spec)
        self.params_label.setText(f"{n:,}")
        self.params_label.setToolTip(sizing.human_count(n))
        mem = sizing.estimate_memory(spec, batch_size=self.batch_box.value(),
                                     precision=self.precision_box.currentText())
        self.memory_label.setText(sizing.human_bytes(mem["total"]))
        self.memory_label.setToolTip("")
        self.breakdown_label.setText(
            "Memory: " + ", ".join(f"{k} {sizing.human_bytes(v)}" for k, v in mem.items() if k != "total")
            + ".   Parameters: " + ", ".join(f"{k} {sizing.human_count(v)}"
                                              for k, v in sizing.parameter_breakdown(spec).items()))
        self.flops_label.setText(sizing.human_count(sizing.flops_per_token(spec)))
        self.tokens_label.setText(sizing.human_count(sizing.compute_optimal_tokens(spec)))

    def _fill_table(self, spec: ModelSpec) -> None:
        rows = sizing.layer_table(spec)
        self.table.setUpdatesEnabled(False)
        self.table.setRowCount(len(rows))
        for r, row in enumerate(rows):
            self.table.setItem(r, 0, QTableWidgetItem(row["name"]))
            self.table.setItem(r, 1, QTableWidgetItem(" × ".join(str(d) for d in row["shape"])))
            item = QTableWidgetItem(f"{row['params']:,}")
            item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self.table.setItem(r, 2, item)
        self.table.setUpdatesEnabled(True)

    # --- files ---
    def save_spec(self, path: str | Path) -> None:
        spec = self.form.spec()
        spec.check()
        save_json(spec.to_dict(), path)
        self.ctx.info(f"Saved model spec to {path}")

    def load_spec(self, path: str | Path) -> None:
        data = load_json(path)
        if "model" in data and isinstance(data["model"], dict):  # a run.json works too
            data = data["model"]
        spec = ModelSpec.from_dict(data)
        self.set_spec(spec)
        self.ctx.info(f"Loaded model spec from {path}")

    def _save_dialog(self, _checked: bool = False) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save model spec", str(self.ctx.workspace.folder("models") /
                                                                          "model_spec.json"), "JSON (*.json)")
        if path:
            self._reporting(self.save_spec, path, "Could not save the spec")

    def _load_dialog(self, _checked: bool = False) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Load model spec", str(self.ctx.workspace.root), "JSON (*.json)")
        if path:
            self._reporting(self.load_spec, path, "Could not load the spec")

    def _reporting(self, action: Callable[[str], None], path: str, title: str) -> None:
        """Run a file action chosen in a dialog; a failure is reported to the user, never raised into Qt."""
        try:
            action(path)
        except Exception as exc:
            self.ctx.report_exception(exc, title=title)

    def _hf_dialog(self, _checked: bool = False) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Choose a local Hugging Face model folder")
        if folder:
            self.use_hf_folder(folder)

    def use_hf_folder(self, folder: str | Path) -> bool:
        """Read the folder's config.json (no torch needed) and start training from it."""
        try:
            # lazy: start-up
            from desktop_app.engine.model.architecture import model_spec_from_folder  # imports torch: only on demand
            spec = model_spec_from_folder(folder)
        except SpecError as exc:
            self.ctx.report_error(f"{folder} cannot be used: {exc}", title="Unsupported model folder")
            return False
        except Exception as exc:
            self.ctx.report_exception(exc, title="Unsupported model folder")
            return False
        self.set_spec(spec)
        self.set_base_model(str(folder))
        return True

    def set_base_model(self, path: str) -> None:
        self.base_model = path
        self.base_label.setText(f"Training will start from the weights in {path}" if path else "")
        self.base_label.setVisible(bool(path))
        self.clear_base_btn.setVisible(bool(path))
        self.form.setEnabled(not path)
        self.preset_box.setEnabled(not path)
        self.base_model_changed.emit(path)
