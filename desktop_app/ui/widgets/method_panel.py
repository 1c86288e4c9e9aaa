"""The Train tab's method-specific settings: base model, data files, adapter and the method's options.

Methods as the user sees them map onto the run config's (objective, adapter kind) (engine/methods.py):
    Pretraining -> causal_lm      SFT -> sft        LoRA -> sft + lora      QLoRA -> sft + qlora
    DPO -> dpo (+ optional adapter)   GRPO -> grpo (+ adapter)   Self-play -> selfplay (+ adapter)
Each method's options are a typed spec (engine/method_options.py) shown by the one SpecForm, words and widgets
from the spec's hints. Nothing here trains: the Train tab puts `MethodPanel`'s values in a RunRequest and
hands it to the engine.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import QSettings, Qt, Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from desktop_app.engine.methods import METHOD_BY_KEY, METHODS
from desktop_app.engine.spec_base import help_text
from desktop_app.engine.specs import AdapterSpec
from desktop_app.ui import theme
from desktop_app.ui.widgets.base_picker import BasePicker
from desktop_app.ui.widgets.data_files import DataFileList, describe_data_file
from desktop_app.ui.widgets.layouts import group_column
from desktop_app.ui.widgets.spec_form import SpecForm

if TYPE_CHECKING:
    from desktop_app.engine.specs import RunConfig

ADAPTER_CHOICES = (("none", "Full weights"), ("lora", "LoRA adapters"), ("qlora", "QLoRA (4-bit base + LoRA)"))
DATA_TITLES = {
    "sft": "Data: chat, ShareGPT or Alpaca files",
    "dpo": "Data: preference pairs (prompt, chosen, rejected)",
    "grpo": "Data: prompts (JSONL: prompt, optional answer)",
}
OPTIONS_TITLES = {"sft": "SFT options", "dpo": "DPO options", "grpo": "GRPO options", "selfplay": "Self-play options"}
REWARD_FILE_NOTE = ("Your reward file is your own code: it runs inside the app with your permissions, not in the "
                    "sandbox.")


class MethodPanel(QWidget):
    """Base model, data files, adapter and method options of the chosen method (hidden where not used)."""

    changed = Signal()
    sandbox_check_requested = Signal()
    demo_requested = Signal()

    def __init__(self, workspace_getter: Callable[[], Any], settings: QSettings | None = None,
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.method = METHODS[0]
        self.adapter_kind = "none"  # the user's choice for methods without a fixed adapter

        self.help_label = QLabel(self.method.help)
        self.help_label.setObjectName("methodHelp")
        self.help_label.setWordWrap(True)
        self.help_label.setProperty("role", "muted")
        self.show_advanced = False
        self.base_group, bl = group_column("Base model", "baseGroup")
        self.base_picker = BasePicker(workspace_getter, settings)
        bl.addWidget(self.base_picker)
        self._build_datagroup_column()
        self._build_adaptergroup_column()
        self.options_group, ol = group_column("Options", "optionsGroup")
        self.options_layout = ol
        self.option_forms: dict[str, SpecForm] = {}  # objective -> its options' form, made when first shown
        self.options_error = QLabel("")
        self.options_error.setProperty("role", "error")
        self.options_error.setWordWrap(True)
        self.options_error.setVisible(False)
        ol.addWidget(self.options_error)
        self._build_sandboxgroup_column()
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        for w in (self.help_label, self.base_group, self.data_group, self.adapter_group, self.options_group,
                  self.sandbox_group):
            layout.addWidget(w)
        self._connect()
        self.set_method("pretraining")

    def _build_datagroup_column(self) -> None:
        self.data_group, dl = group_column("Data", "dataGroup")
        # One list per kind of data (chat records, preference pairs, prompts): a file chosen for LoRA is not
        # offered to DPO or GRPO. SFT, LoRA and QLoRA read the same records, so they share theirs.
        self.data_lists: dict[str, DataFileList] = {}
        for kind in DATA_TITLES:
            files = DataFileList()
            files.setObjectName(f"dataFileList_{kind}")
            files.set_data_kind(kind)
            files.setVisible(False)
            files.changed.connect(self.changed)
            self.data_lists[kind] = files
            dl.addWidget(files)
        self.data_kind = "sft"  # the kind of the data list shown last
        self.add_data_btn = QPushButton("Add files…")
        self.add_folder_btn = QPushButton("Add folder…")
        self.remove_data_btn = QPushButton("Remove")
        hint = QLabel("or drop .jsonl, .csv, .tsv, .parquet files or folders on the list")
        hint.setProperty("role", "muted")
        row = QHBoxLayout()
        row.addWidget(self.add_data_btn)
        row.addWidget(self.add_folder_btn)
        row.addWidget(self.remove_data_btn)
        row.addStretch(1)
        dl.addLayout(row)
        dl.addWidget(hint)

    def _build_adaptergroup_column(self) -> None:
        self.adapter_group, al = group_column("Adapter", "adapterGroup")
        self.adapter_box = QComboBox()
        self.adapter_box.setObjectName("adapterKindBox")
        for kind, label in ADAPTER_CHOICES:
            self.adapter_box.addItem(label, kind)
        self.adapter_box.setToolTip(help_text(AdapterSpec, "kind"))
        self.adapter_row = QWidget()
        ar = QHBoxLayout(self.adapter_row)
        ar.setContentsMargins(0, 0, 0, 0)
        ar.addWidget(QLabel("Weights that train"))
        ar.addWidget(self.adapter_box, 1)
        al.addWidget(self.adapter_row)
        self.adapter_form = SpecForm(AdapterSpec, exclude=("kind",), advanced_switch=False)
        al.addWidget(self.adapter_form)

    def _build_sandboxgroup_column(self) -> None:
        """Self-play's sandbox status and the CPU demo."""
        self.sandbox_group, sl = group_column("Sandbox", "sandboxGroup")
        self.sandbox_label = QLabel("The sandboxed executor checks every model-written program.")
        self.sandbox_label.setWordWrap(True)
        self.sandbox_label.setObjectName("sandboxLabel")
        self.sandbox_btn = QPushButton("Sandbox status")
        self.sandbox_btn.setToolTip("Start the executor once and list its isolation layers")
        self.sandbox_state: dict | None = None
        srow = QHBoxLayout()
        srow.addWidget(self.sandbox_label, 1)
        srow.addWidget(self.sandbox_btn, 0, Qt.AlignmentFlag.AlignTop)
        sl.addLayout(srow)
        self.demo_btn = QPushButton("Run the CPU demo (~15 min)")
        self.demo_btn.setObjectName("selfplayDemoButton")
        self.demo_btn.setToolTip("Generate the mini world's seed corpus, pretrain a tiny model on it, then self-play: "
                                 "every curve live; the held-out solve rates before and after end the log")
        sl.addWidget(self.demo_btn)

    def _connect(self) -> None:
        self.base_picker.changed.connect(self._on_base_changed)
        self.add_data_btn.clicked.connect(self._choose_files)
        self.add_folder_btn.clicked.connect(self._choose_folder)
        self.remove_data_btn.clicked.connect(lambda _=False: self.data_list.remove_selected())
        self.adapter_box.currentIndexChanged.connect(self._on_adapter_box)
        self.adapter_form.changed.connect(self.changed)
        self.sandbox_btn.clicked.connect(lambda _=False: self.sandbox_check_requested.emit())
        self.demo_btn.clicked.connect(lambda _=False: self.demo_requested.emit())

    # --- method ---
    def set_method(self, key: str) -> None:
        self.method = METHOD_BY_KEY[key]
        m = self.method
        self.help_label.setText(m.help)
        self.base_group.setVisible(m.finetune)
        self.data_group.setVisible(bool(m.data))
        if m.data:
            self.data_group.setTitle(DATA_TITLES[m.data])
            self.data_kind = m.data
            for kind, files in self.data_lists.items():
                files.setVisible(kind == m.data)
        self.adapter_row.setVisible(m.finetune and m.adapter is None)
        self._update_adapter()
        self.sandbox_group.setVisible(m.key == "selfplay")
        form = self._options_form() if m.finetune else None
        for f in self.option_forms.values():
            f.setVisible(f is form)
        self.options_group.setVisible(m.finetune and (form is not None or self.options_error.isVisible()))
        if form is not None:
            self.options_group.setTitle(OPTIONS_TITLES.get(m.objective, "Options"))
        self.changed.emit()

    def _options_form(self) -> SpecForm | None:
        """The chosen method's options form, made the first time the method is shown."""
        objective = self.method.objective
        if objective in self.option_forms:
            self.options_error.setVisible(False)
            return self.option_forms[objective]
        cls = self.method.options_spec
        if cls is None:
            return None
        try:
            form = SpecForm(cls, advanced_switch=False)
            form.set_show_advanced(self.show_advanced)
        except Exception as exc:  # a spec this form cannot show: say so, keep the rest usable
            self.options_error.setText(f"The options of this method cannot be shown: {exc}")
            self.options_error.setVisible(True)
            return None
        self.options_error.setVisible(False)
        if "reward_file" in form.editors:
            form.add_note("reward_file", REWARD_FILE_NOTE)
        self.option_forms[objective] = form
        self.options_layout.addWidget(form)
        form.changed.connect(self.changed)
        return form

    @property
    def data_list(self) -> DataFileList:
        """The data files of the chosen method's kind of data (the last one shown for a method without data)."""
        return self.data_lists[self.data_kind]

    def set_show_advanced(self, on: bool) -> None:
        """Show the advanced rows of the adapter's and every method's options (one switch for the column)."""
        self.show_advanced = bool(on)
        self.adapter_form.set_show_advanced(on)
        for form in self.option_forms.values():
            form.set_show_advanced(on)

    def _on_base_changed(self, path: str) -> None:
        """The adapter's layer list follows the base model's family (read from its config, nothing loaded)."""
        from desktop_app.engine.finetune.adapters import family_targets  # lazy: start-up

        editor = self.adapter_form.editors.get("target_modules")
        if editor is not None:
            editor.set_choices(family_targets(path) if path else [])  # type: ignore[attr-defined]
        self.changed.emit()

    def options_form(self) -> SpecForm | None:
        return self.option_forms.get(self.method.objective) if self.method.finetune else None

    # --- adapter ---
    def _on_adapter_box(self, _index: int) -> None:
        self.adapter_kind = self.adapter_box.currentData()
        self._update_adapter()
        self.changed.emit()

    def adapter(self) -> str:
        if not self.method.finetune:
            return "none"
        return self.method.adapter if self.method.adapter is not None else self.adapter_kind

    def _update_adapter(self) -> None:
        kind = self.adapter()
        show_form = kind != "none"
        self.adapter_group.setVisible(self.method.finetune and (self.method.adapter is None or show_form))
        self.adapter_group.setTitle({"lora": "LoRA adapter", "qlora": "QLoRA adapter"}.get(kind, "Weights"))
        self.adapter_form.setVisible(show_form)
        for name in ("quant_type", "double_quant"):
            if name in self.adapter_form.editors:
                self.adapter_form.set_row_hidden(name, kind != "qlora")

    def set_adapter_kind(self, kind: str) -> None:
        i = self.adapter_box.findData(kind)
        if i >= 0:
            self.adapter_box.setCurrentIndex(i)

    # --- values ---
    def base_model(self) -> str:
        return self.base_picker.path() if self.method.finetune else ""

    def data_files(self) -> list[str]:
        return self.data_list.files() if self.method.data else []

    def adapter_dict(self) -> dict[str, Any]:
        kind = self.adapter()
        if kind == "none":
            return {}
        return {"kind": kind, **self.adapter_form.values()}

    def options_dict(self) -> dict[str, Any]:
        """The options the form shows (a hidden one, such as GRPO's prompts, is set from elsewhere)."""
        form = self.options_form()
        if form is None:
            return {}
        return {k: v for k, v in form.spec().to_dict().items() if k in form.editors}

    def config_fields(self) -> dict[str, Any]:
        """The run-config fields this panel sets for a fine-tuning method (RunRequest's fields)."""
        return {"base_model": self.base_model(), "objective": self.method.objective, "data": self.data_files(),
                "adapter": self.adapter_dict(), "method_options": self.options_dict()}

    def loss_on(self) -> str:
        form = self.options_form()
        if form is not None and "loss_on" in form.editors:
            return form.values()["loss_on"]
        return "assistant"

    def problems(self) -> list[str]:
        """What stops this method from starting, in words (before the engine sees the config)."""
        m = self.method
        p: list[str] = []
        if not m.finetune:
            return p
        if not self.base_model():
            p.append(f"choose a base model for {m.label.split(' (')[0]}: a run or model from the Library, or "
                     "'Choose folder…' for a Hugging Face model folder")
        elif not Path(self.base_model()).expanduser().exists():
            p.append(f"the base model {self.base_model()} does not exist")
        if m.data:
            files = self.data_files()
            if not files:
                p.append(f"add the data files ({DATA_TITLES[m.data].split(': ', 1)[1]}) to train on")
            for path in files:
                _label, problem = describe_data_file(path, m.data, self.data_list.columns)
                if problem:
                    p.append(problem)
        form = self.options_form()
        if form is not None:
            p += [f"options: {x}" for x in form.validate()]
        if self.adapter() != "none":
            p += [f"adapter: {x}" for x in self.adapter_form.validate()]
        return p

    def apply(self, *, base_model: str = "", data: list[str] | None = None, adapter: dict[str, Any] | None = None,
              options: dict[str, Any] | None = None) -> None:
        """Fill the panel from a run config's parts (the method is set first, by the caller)."""
        if self.method.finetune:
            self.base_picker.set_path(base_model)
        if self.method.data:
            self.data_list.set_files(list(data or []))
        adapter = dict(adapter or {})
        kind = adapter.get("kind", "none")
        if self.method.adapter is None:
            self.set_adapter_kind(kind)
        if adapter:
            names = {f.name for f in dataclasses.fields(AdapterSpec)}
            self.adapter_form.set_spec(AdapterSpec(**{k: v for k, v in adapter.items() if k in names}))
        form = self.options_form()
        if form is not None and options is not None:
            form.set_spec(form.spec_cls.from_dict(options))
        self._update_adapter()

    def apply_config(self, config: RunConfig) -> None:
        """`apply` with a run config's parts (resume, Library, a pipeline stage)."""
        self.apply(base_model=config.base_model, data=config.data, adapter=config.adapter,
                   options=config.method_options)

    def _choose_files(self, _checked: bool = False) -> None:
        files, _ = QFileDialog.getOpenFileNames(self, "Add data files", "",
                                                "Records (*.jsonl *.json *.ndjson *.csv *.tsv *.parquet *.arrow);;"
                                                "All files (*)")
        if files:
            self.data_list.add_paths(files)

    def _choose_folder(self, _checked: bool = False) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Add a folder of data files")
        if folder:
            self.data_list.add_paths([folder])

    # --- sandbox ---
    def set_sandbox_state(self, state: dict | None, checking: bool = False) -> None:
        self.sandbox_state = state
        if checking:
            self.sandbox_label.setText("Checking the sandboxed executor…")
            return
        if state is None:
            self.sandbox_label.setText("The sandboxed executor checks every model-written program.")
            return
        if state.get("error"):
            text = f"<span style='color:{theme.ERROR}'>✗ The sandbox cannot run here:</span> {state['error']}"
        elif state.get("missing"):
            missing = ", ".join(state["missing"])
            text = (f"<span style='color:{theme.WARN}'>⚠ {len(state['layers'])} isolation layers active; "
                    f"missing: {missing}</span> (strict sandbox refuses to run)")
        else:
            text = f"<span style='color:{theme.OK}'>✓ All {len(state.get('layers', []))} isolation layers active</span>"
        self.sandbox_label.setText(text)
