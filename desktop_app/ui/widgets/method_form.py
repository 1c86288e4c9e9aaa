"""The Train tab's method-specific settings: base model, data files, adapter and the method's options.

Methods as the user sees them map onto the run config's (objective, adapter kind):
    Pretraining -> causal_lm      SFT -> sft        LoRA -> sft + lora      QLoRA -> sft + qlora
    DPO -> dpo (+ optional adapter)   GRPO -> grpo (+ adapter)   Self-play -> selfplay (+ adapter)
SFT and DPO options come from their spec dataclasses (help text as tooltips); GRPO's and self-play's are
plain dicts of defaults in their engine modules, read when the method is first shown (those modules load
torch, so never at window start-up). Nothing here trains: the Train tab builds a RunConfig from
`MethodPanel`'s values and hands it to the engine.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PySide6.QtCore import QSettings, Qt, Signal
from PySide6.QtGui import QDragEnterEvent, QDropEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from desktop_app.engine import specs
from desktop_app.ui import theme
from desktop_app.ui.widgets.drop_zone import paths_from_mime
from desktop_app.ui.widgets.spec_form import FloatBox, SpecForm


@dataclass(frozen=True)
class Method:
    key: str  # what the selector and the CLI's --method call it
    label: str
    objective: str  # RunConfig.objective
    adapter: str | None  # fixed adapter kind, or None: the user picks (full weights / LoRA / QLoRA)
    data: str  # "" (no record files) | "sft" | "dpo" | "grpo"
    help: str

    @property
    def finetune(self) -> bool:
        """Starts from a base model (everything but pretraining)."""
        return self.key != "pretraining"


METHODS: tuple[Method, ...] = (
    Method("pretraining", "Pretraining", "causal_lm", "none", "",
           "Next-token prediction on a prepared dataset: a model from the Model tab's spec, trained from scratch "
           "(or continued from the Model tab's base)."),
    Method("sft", "SFT (full fine-tuning)", "sft", "none", "sft",
           "Supervised fine-tuning on chats or instructions: every weight of the base model trains. Loss falls "
           "on the assistant's replies only (see the record preview)."),
    Method("lora", "LoRA", "sft", "lora", "sft",
           "SFT with low-rank adapters: the base stays frozen and only small adapter matrices train. Far less "
           "memory and a small result (PEFT format); merge it into the base when exporting."),
    Method("qlora", "QLoRA", "sft", "qlora", "sft",
           "LoRA on a 4-bit (NF4) copy of the base: the least memory. Needs bitsandbytes."),
    Method("dpo", "DPO", "dpo", None, "dpo",
           "Direct preference optimisation on pairs of answers (prompt, chosen, rejected): the model learns to "
           "prefer the chosen answer, staying close to the base (the reference)."),
    Method("grpo", "GRPO", "grpo", None, "grpo",
           "Reinforcement learning with reward functions: a group of completions per prompt is scored "
           "(answer match, format, length, diversity, your own reward file) and the better ones are reinforced."),
    Method("selfplay", "Self-play", "selfplay", None, "",
           "Absolute Zero self-play: the model proposes tasks (deduction, abduction, induction), solves them, "
           "and a task world checks every answer; rewards flow to both roles. No data needed."),
)
METHOD_BY_KEY = {m.key: m for m in METHODS}
# Not a method of one run: a list of stages, each one of METHODS (the Train tab lists it after them).
PIPELINE = Method("pipeline", "Pipeline", "pipeline", None, "",
                  "Several stages in a row (e.g. pretraining -> SFT -> DPO), each one of the methods above with its "
                  "own data and settings; each stage starts from the previous stage's output. Stop it any time: "
                  "Resume continues the interrupted stage.")
ADAPTER_CHOICES = (("none", "Full weights"), ("lora", "LoRA adapters"), ("qlora", "QLoRA (4-bit base + LoRA)"))
DATA_TITLES = {
    "sft": "Data: chat, ShareGPT or Alpaca files",
    "dpo": "Data: preference pairs (prompt, chosen, rejected)",
    "grpo": "Data: prompts (JSONL: prompt, optional answer)",
}
OPTIONS_TITLES = {"sft": "SFT options", "dpo": "DPO options", "grpo": "GRPO options", "selfplay": "Self-play options"}
RECENT_KEY = "train/recent_base_models"
MAX_RECENT = 8
CHOOSE = "\x00choose"  # combo data of "Choose folder…"

# --- GRPO / self-play options: plain dicts in the engine; help and widgets here -----------------------------
DICT_HELP: dict[str, str] = {
    # self-play
    "world": "Task world the proposer writes tasks in: mini (a tiny built-in language; fast, the CPU default) or "
             "python (real Python programs, run in the sandboxed executor).",
    "task_types": "Task types to play: deduction (program + input → predict the output), abduction (program + "
                  "output → find an input), induction (input/output pairs → write the program).",
    "proposals_per_type": "Tasks the proposer writes per task type each step.",
    "solver_tasks_per_type": "Tasks the solver answers per type each step (new valid proposals first, then tasks "
                             "from the buffer).",
    "solver_samples": "Answers sampled per task (N). Their solve rate sets the proposer's learnability reward "
                      "(1 − solve rate, 0 when always or never solved); at least 2.",
    "references": "Tasks from the buffer shown to the proposer as examples in each prompt (K).",
    "heldout_per_type": "Held-out tasks per type whose solve rate is measured at each evaluation (set the cadence "
                        "with 'Eval every' below); the run keeps its best checkpoint by it.",
    "heldout_seed": "Seed of the held-out tasks (the same seed gives the same held-out set).",
    "seed_tasks_per_type": "Tasks the world generates per type to seed each buffer (besides the identity program).",
    "seeds": "Your own seed tasks: a JSON list of task objects (type, program, inputs, outputs).",
    "strict_sandbox": "Refuse to run when any isolation layer of the sandbox is missing (matters for the python "
                      "world, whose programs are model-written code).",
    "world_options": "Extra options of the task world, as a JSON object (e.g. {\"depth\": 2}).",
    # shared by GRPO and self-play
    "temperature": "Sampling temperature of the rollouts (above 0: greedy rollouts cannot explore).",
    "top_p": "Sample among the most likely tokens whose probabilities add up to P (1 = off).",
    "max_new_tokens": "Longest completion, in tokens.",
    "kl_coef": "Weight of the KL penalty that keeps the model near the reference (0 = none; above 0 keeps a frozen "
               "copy of the base, or uses the base with adapters disabled for LoRA/QLoRA).",
    "clip": "PPO clip range of the policy ratio (0.2 is usual).",
    # GRPO
    "group_size": "Completions sampled per prompt (G). Advantages compare the completions of one prompt, so at "
                  "least 2; 4-16 is usual.",
    "prompts_per_step": "Prompts drawn from the data files each step (the batch is prompts × group size).",
    "max_lines": "Stop a completion after this many lines (0 = no limit).",
    "weights": "Weight of each reward function in the total reward (0 = off): answer (matches the record's answer, "
               "exactly or as a number), format (matches the format pattern), length (near the length target), "
               "repetition (penalises repeated n-grams), distinct (distinct-n diversity), likelihood (under the "
               "reference model), user (your reward file).",
    "length_target": "Completion length, in tokens, that the length reward aims at.",
    "format_pattern": "Regular expression a well-formatted completion matches (the format reward).",
    "reward_file": "Your Python file defining reward(prompt, completion) -> float. It is your own code and runs "
                   "as such inside the app, with your permissions: not sandboxed.",
    "eval_prompts": "Prompts answered greedily at each evaluation to measure the mean reward.",
}
DICT_CHOICES: dict[str, tuple[str, ...]] = {"world": ("mini", "python")}
DICT_MINIMUM: dict[str, int] = {"group_size": 2, "solver_samples": 2, "proposals_per_type": 1,
                                "solver_tasks_per_type": 1, "max_new_tokens": 1, "heldout_per_type": 1,
                                "prompts_per_step": 1, "eval_prompts": 1, "references": 0}
REWARD_NAMES = ("answer", "format", "length", "repetition", "distinct", "likelihood", "user")
TASK_TYPES = ("deduction", "abduction", "induction")
HIDDEN_OPTIONS = {"grpo": ("prompts",)}  # GRPO's prompts are the data files (RunConfig.data)


def method_defaults(objective: str) -> dict[str, Any]:
    """The engine's default options of a dict-options method (GRPO, self-play); imported on first use."""
    if objective == "grpo":
        from desktop_app.engine.objectives.grpo import DEFAULTS
    elif objective == "selfplay":
        from desktop_app.engine.objectives.selfplay import DEFAULTS
    else:
        return {}
    return json.loads(json.dumps(DEFAULTS))  # a deep copy


def options_spec(objective: str) -> type | None:
    """SFTOptions / DPOOptions when the engine has them (tolerant of an engine that does not yet)."""
    table = getattr(specs, "METHOD_OPTIONS", {}) or {}
    return table.get(objective)


# Used only while specs.METHOD_LR has no entry for a method (the engine's table wins once it has one).
FALLBACK_LR: dict[tuple[str, str], float] = {
    ("grpo", "none"): 1e-5, ("grpo", "lora"): 5e-5, ("grpo", "qlora"): 5e-5,
    ("selfplay", "none"): 1e-5, ("selfplay", "lora"): 5e-5, ("selfplay", "qlora"): 5e-5,
}


def default_lr(method: Method, adapter: str) -> float | None:
    """The learning rate a method starts from (specs.METHOD_LR), or the pretraining default."""
    if method.key == "pretraining":
        return specs.TrainSpec().lr
    table = getattr(specs, "METHOD_LR", {}) or {}
    key = (method.objective, adapter)
    return table.get(key, FALLBACK_LR.get(key))


def method_key_of(config: specs.RunConfig) -> str:
    """The selector's method for a run config: (objective, adapter kind) -> pretraining / sft / lora / ..."""
    objective = config.objective
    kind = (getattr(config, "adapter", None) or {}).get("kind", "none")
    if objective == "causal_lm":
        return "pretraining"
    if objective == "sft":
        return {"lora": "lora", "qlora": "qlora"}.get(kind, "sft")
    return objective if objective in METHOD_BY_KEY else "pretraining"


def make_run_config(**fields: Any) -> tuple[specs.RunConfig, list[str]]:
    """A RunConfig from the fields this engine knows; the names it does not know are returned (an engine that
    lacks a method's fields refuses to start it by name instead of failing on a TypeError)."""
    known = {f.name for f in dataclasses.fields(specs.RunConfig)}
    unknown = sorted(k for k, v in fields.items() if k not in known and v not in ("", [], {}, None))
    return specs.RunConfig(**{k: v for k, v in fields.items() if k in known}), unknown


# --- data files ------------------------------------------------------------------------------------------------

def _grpo_format(path: Path) -> str:
    """'prompts' / 'prompts with answers' for a GRPO prompt file; UserError naming the line otherwise."""
    from desktop_app.engine.errors import UserError

    answers = seen = 0
    with open(path, encoding="utf-8", errors="replace") as fh:
        for number, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                data = json.loads(line)
            except ValueError as exc:
                raise UserError(f"line {number} is not valid JSON ({exc})") from None
            if not isinstance(data, dict) or not isinstance(data.get("prompt"), str) or not data["prompt"].strip():
                keys = ", ".join(sorted(map(str, data))[:8]) if isinstance(data, dict) else type(data).__name__
                raise UserError(f"line {number} has no \"prompt\" string (keys: {keys}); GRPO reads JSONL records "
                                "{\"prompt\": ..., \"answer\": ...}")
            answers += "answer" in data
            seen += 1
            if seen >= 50:
                break
    if not seen:
        raise UserError("the file is empty: no prompts")
    return "prompts with answers" if answers else "prompts"


def describe_data_file(path: str, data_kind: str) -> tuple[str, str]:
    """(format label, problem) of one data file for a method's data kind; problem is "" when usable."""
    from desktop_app.engine.errors import UserError

    p = Path(path).expanduser()
    if not p.is_file():
        return "", f"{p} does not exist" if not p.exists() else f"{p} is not a file"
    if data_kind == "grpo":
        try:
            return _grpo_format(p), ""
        except (UserError, OSError) as exc:
            return "", f"{p.name}: {exc}"
    from desktop_app.engine.finetune.formats import FORMAT_NAMES, detect_format

    try:
        fmt = detect_format(p)
    except (UserError, OSError) as exc:
        text = str(exc)
        return "", text if p.name in text else f"{p.name}: {text}"
    label = FORMAT_NAMES.get(fmt, fmt)
    if data_kind == "dpo" and fmt != "preference":
        return label, f"{p.name}: holds {label} records: DPO needs preference pairs (prompt, chosen, rejected)"
    if data_kind == "sft" and fmt == "preference":
        return label, f"{p.name}: holds preference pairs: use it with DPO; SFT needs chat, ShareGPT or Alpaca records"
    return label, ""


def expand_data_paths(paths: list[str]) -> list[str]:
    """Files as given; folders replaced by the JSON/JSONL files anywhere inside them (sorted): the engine's own
    rule, so the list shows exactly the files training reads."""
    from desktop_app.engine.finetune import formats

    return [str(p) for p in formats.expand_data_paths(paths, check=False)]


class DataFileList(QListWidget):
    """Data files with their detected format (red with the reason when unusable); drop files or folders on it."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("dataFileList")
        self.setAcceptDrops(True)
        self.viewport().setAcceptDrops(True)
        self.setDragDropMode(QAbstractItemView.DragDropMode.DropOnly)
        self.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.setMinimumHeight(74)
        self.setMaximumHeight(110)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.data_kind = "sft"
        self.problems: dict[str, str] = {}
        self.formats: dict[str, str] = {}

    def files(self) -> list[str]:
        return [self.item(i).data(Qt.ItemDataRole.UserRole) for i in range(self.count())]

    def add_paths(self, paths: list[str]) -> int:
        have = set(self.files())
        added = 0
        for path in expand_data_paths(paths):
            if path in have:
                continue
            have.add(path)
            item = QListWidgetItem()
            item.setData(Qt.ItemDataRole.UserRole, path)
            self.addItem(item)
            self._describe(item)
            added += 1
        if added:
            self.changed.emit()
        return added

    def set_files(self, paths: list[str]) -> None:
        self.clear()
        self.problems.clear()
        self.formats.clear()
        self.blockSignals(True)
        self.add_paths(list(paths))
        self.blockSignals(False)
        self.changed.emit()

    def remove_selected(self) -> None:
        for item in self.selectedItems():
            path = item.data(Qt.ItemDataRole.UserRole)
            self.problems.pop(path, None)
            self.formats.pop(path, None)
            self.takeItem(self.row(item))
        self.changed.emit()

    def set_data_kind(self, kind: str) -> None:
        """Re-check every file against what the method reads (SFT records, preference pairs or prompts)."""
        if kind == self.data_kind:
            return
        self.data_kind = kind
        for i in range(self.count()):
            self._describe(self.item(i))

    def _describe(self, item: QListWidgetItem) -> None:
        path = item.data(Qt.ItemDataRole.UserRole)
        label, problem = describe_data_file(path, self.data_kind) if self.data_kind else ("", "")
        name = Path(path).name
        self.formats[path] = label
        if problem:
            self.problems[path] = problem
            item.setText(f"✗ {name} — {short_reason(problem, path)}")
            item.setForeground(_color(theme.ERROR))
            item.setToolTip(f"{path}\n{problem}")
        else:
            self.problems.pop(path, None)
            item.setText(f"{name} — {label}" if label else name)
            item.setForeground(_color(theme.TEXT))
            item.setToolTip(path)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if paths_from_mime(event.mimeData()):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dragMoveEvent(self, event) -> None:
        if paths_from_mime(event.mimeData()):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:
        paths = paths_from_mime(event.mimeData())
        if paths:
            event.acceptProposedAction()
            self.add_paths(paths)


def short_reason(problem: str, path: str) -> str:
    """The gist of a file problem for a list row ("unknown data format"); the whole text goes in the tooltip."""
    text = problem
    for prefix in (f"{Path(path).expanduser()}: ", f"{Path(path).name}: "):
        if text.startswith(prefix):
            text = text[len(prefix):]
    if text.endswith("does not exist"):
        return "does not exist"
    gist = text.split("; ")[0]
    if len(gist) > 80:
        gist = gist.split(": ")[0]
    return gist if len(gist) <= 80 else gist[:79] + "…"


def _color(name: str) -> Any:
    from PySide6.QtGui import QColor

    return QColor(name)


# --- base model ----------------------------------------------------------------------------------------------

def _has_checkpoint(run: Path) -> bool:
    folder = run / "checkpoints"
    return folder.is_dir() and any((p / "manifest.json").exists() for p in folder.iterdir() if p.is_dir())


def library_bases(workspace: Any) -> list[tuple[str, str]]:
    """(label, path) of the workspace's runs with a checkpoint, models and exports (newest first)."""
    out: list[tuple[str, str]] = []
    for run in workspace.items("runs"):
        if run.is_dir() and _has_checkpoint(run):
            out.append((f"run {run.name}", str(run)))
    for kind in ("models", "exports"):
        for p in workspace.items(kind):
            if p.is_dir() and ((p / "config.json").exists() or (p / "model_spec.json").exists()):
                out.append((f"{kind[:-1]} {p.name}", str(p)))
    return out


class BasePicker(QWidget):
    """Library runs/models/exports, recent choices and "Choose folder…" in one combo."""

    changed = Signal(str)

    def __init__(self, workspace_getter: Callable[[], Any], settings: QSettings | None = None,
                 parent: QWidget | None = None):
        super().__init__(parent)
        self._workspace = workspace_getter
        self._settings = settings
        self.box = QComboBox()
        self.box.setObjectName("baseModelBox")
        self.box.setMinimumWidth(200)
        self.box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.box.setMinimumContentsLength(18)
        self.box.setToolTip(specs.help_text(specs.RunConfig, "base_model")
                            if "base_model" in {f.name for f in dataclasses.fields(specs.RunConfig)} else
                            "The model to start from")
        self.path_label = QLabel("")
        self.path_label.setProperty("role", "muted")
        self.path_label.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.box)
        layout.addWidget(self.path_label)
        self._path = ""
        self.refresh()
        self.box.activated.connect(self._on_activated)

    def path(self) -> str:
        return self._path

    @property
    def settings(self) -> QSettings:
        """The settings given, else the main window's (`window().settings`), else the app's own."""
        if self._settings is not None:
            return self._settings
        window = self.window()
        window_settings = getattr(window, "settings", None) if window is not self else None
        return window_settings if isinstance(window_settings, QSettings) else QSettings("AZR", "AZR Model Trainer")

    def recent(self) -> list[str]:
        value = self.settings.value(RECENT_KEY, [])
        if isinstance(value, str):
            value = [value]
        return [str(v) for v in (value or []) if v]

    def remember(self, path: str) -> None:
        if not path:
            return
        items = [path] + [p for p in self.recent() if p != path]
        self.settings.setValue(RECENT_KEY, items[:MAX_RECENT])

    def refresh(self) -> None:
        box = self.box
        box.blockSignals(True)
        box.clear()
        box.addItem("Choose a base model…", "")
        library: list[tuple[str, str]] = []
        with contextlib.suppress(OSError):
            library = library_bases(self._workspace())
        paths = {p for _, p in library}
        if library:
            self._header("Library")
            for label, path in library:
                box.addItem(label, path)
                box.setItemData(box.count() - 1, path, Qt.ItemDataRole.ToolTipRole)
        recent = [p for p in self.recent() if p not in paths]
        if recent:
            self._header("Recent")
            for path in recent:
                box.addItem(Path(path).name or path, path)
                box.setItemData(box.count() - 1, path, Qt.ItemDataRole.ToolTipRole)
        box.insertSeparator(box.count())
        box.addItem("Choose folder…", CHOOSE)
        self._select(self._path)
        box.blockSignals(False)

    def _header(self, text: str) -> None:
        self.box.addItem(f"— {text} —", None)
        item = self.box.model().item(self.box.count() - 1)
        item.setEnabled(False)

    def _select(self, path: str) -> None:
        i = self.box.findData(path) if path else 0
        if i < 0:
            self.box.insertItem(1, Path(path).name or path, path)
            self.box.setItemData(1, path, Qt.ItemDataRole.ToolTipRole)
            i = 1
        self.box.setCurrentIndex(i)
        self.path_label.setText(path)
        self.path_label.setVisible(bool(path))

    def set_path(self, path: str) -> None:
        path = str(path or "")
        changed = path != self._path
        self._path = path
        self.box.blockSignals(True)
        self._select(path)
        self.box.blockSignals(False)
        if changed:
            self.changed.emit(path)

    def _on_activated(self, index: int) -> None:
        data = self.box.itemData(index)
        if data == CHOOSE:
            start = self._path or str(self._workspace().root)
            folder = QFileDialog.getExistingDirectory(self, "Choose a base model folder (a run, checkpoint, "
                                                      "export or Hugging Face model)", start)
            if folder:
                self.remember(folder)
                self.refresh()
                self.set_path(folder)
            else:
                self.set_path(self._path)  # back to what was chosen
            return
        self.set_path(data or "")


# --- dict options (GRPO, self-play) ----------------------------------------------------------------------------

class DictForm(QWidget):
    """Editors for a dict of defaults: spin boxes, check boxes, choices, per-function weights, JSON for the rest."""

    changed = Signal()

    def __init__(self, defaults: dict[str, Any], *, exclude: tuple[str, ...] = (), parent: QWidget | None = None):
        super().__init__(parent)
        self.defaults = defaults
        self.hidden = {k: defaults[k] for k in exclude if k in defaults}
        self.editors: dict[str, tuple[str, Any]] = {}
        layout = QFormLayout(self)
        layout.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.ExpandingFieldsGrow)
        layout.setHorizontalSpacing(12)
        layout.setVerticalSpacing(6)
        self.layout_ = layout
        for key, default in defaults.items():
            if key in exclude:
                continue
            kind, editor = self._make(key, default)
            help_ = DICT_HELP.get(key, "")
            editor.setToolTip(help_)
            editor.setObjectName(f"option_{key}")
            label = QLabel(key.replace("_", " ").capitalize())
            label.setToolTip(help_)
            layout.addRow(label, editor)
            self.editors[key] = (kind, editor)
            if key == "reward_file":
                note = QLabel("Your reward file is your own code: it runs inside the app with your permissions, "
                              "not in the sandbox.")
                note.setProperty("role", "muted")
                note.setWordWrap(True)
                layout.addRow(note)
        self.problem_label = QLabel("")
        self.problem_label.setProperty("role", "error")
        self.problem_label.setWordWrap(True)
        self.problem_label.setVisible(False)
        layout.addRow(self.problem_label)
        self.set_values(defaults)

    def _make(self, key: str, default: Any) -> tuple[str, QWidget]:
        if key in DICT_CHOICES:
            box = QComboBox()
            box.addItems(list(DICT_CHOICES[key]))
            box.currentTextChanged.connect(self.changed)
            return "choice", box
        if key == "task_types":
            host = QWidget()
            row = QVBoxLayout(host)
            row.setContentsMargins(0, 0, 0, 0)
            row.setSpacing(2)
            checks = []
            for t in TASK_TYPES:
                check = QCheckBox(t)
                check.setObjectName(f"task_type_{t}")
                check.toggled.connect(self.changed)
                row.addWidget(check)
                checks.append(check)
            host.checks = checks  # type: ignore[attr-defined]
            return "types", host
        if isinstance(default, bool):
            check = QCheckBox()
            check.toggled.connect(self.changed)
            return "bool", check
        if isinstance(default, int):
            spin = QSpinBox()
            spin.setRange(DICT_MINIMUM.get(key, 0), 10**6 if "seed" not in key else 2**31 - 1)
            spin.setGroupSeparatorShown("seed" not in key)
            spin.setKeyboardTracking(False)
            spin.valueChanged.connect(self.changed)
            return "int", spin
        if isinstance(default, float):
            fbox = FloatBox()
            fbox.setMinimum(0.0)
            fbox.valueChanged.connect(self.changed)
            return "float", fbox
        if key == "weights" and isinstance(default, dict):
            host = QWidget()
            grid = QFormLayout(host)
            grid.setContentsMargins(0, 0, 0, 0)
            grid.setVerticalSpacing(2)
            boxes = {}
            for name in REWARD_NAMES:
                fbox = FloatBox()
                fbox.setRange(-100.0, 100.0)
                fbox.setObjectName(f"weight_{name}")
                fbox.valueChanged.connect(self.changed)
                grid.addRow(name, fbox)
                boxes[name] = fbox
            host.boxes = boxes  # type: ignore[attr-defined]
            return "weights", host
        if key.endswith("_file"):
            host = QWidget()
            row = QHBoxLayout(host)
            row.setContentsMargins(0, 0, 0, 0)
            line = QLineEdit()
            line.setPlaceholderText("none")
            line.editingFinished.connect(self.changed)
            browse = QPushButton("Browse…")
            browse.clicked.connect(lambda _=False, ln=line: self._browse(ln))
            row.addWidget(line, 1)
            row.addWidget(browse)
            host.line = line  # type: ignore[attr-defined]
            return "file", host
        if isinstance(default, str):
            line = QLineEdit()
            line.editingFinished.connect(self.changed)
            return "str", line
        line = QLineEdit()
        line.setPlaceholderText("JSON")
        line.editingFinished.connect(self.changed)
        return "json", line

    def _browse(self, line: QLineEdit) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Choose your reward file", line.text(), "Python (*.py)")
        if path:
            line.setText(path)
            self.changed.emit()

    def values(self) -> dict[str, Any]:
        """Every option (hidden ones at their defaults); a JSON field that does not parse keeps its default
        and is named by `problems()`."""
        out: dict[str, Any] = {}
        for key, (kind, editor) in self.editors.items():
            if kind == "choice":
                out[key] = editor.currentText()
            elif kind == "types":
                out[key] = [c.text() for c in editor.checks if c.isChecked()]
            elif kind == "bool":
                out[key] = editor.isChecked()
            elif kind in ("int", "float"):
                out[key] = editor.value()
            elif kind == "weights":
                out[key] = {n: b.value() for n, b in editor.boxes.items() if b.value() != 0.0}
            elif kind == "file":
                out[key] = editor.line.text().strip()
            elif kind == "str":
                out[key] = editor.text()
            else:
                text = editor.text().strip()
                try:
                    out[key] = json.loads(text) if text else type(self.defaults[key])()
                except ValueError:
                    out[key] = self.defaults[key]
        return {k: out.get(k, self.hidden.get(k)) for k in self.defaults}

    def problems(self) -> list[str]:
        p = []
        for key, (kind, editor) in self.editors.items():
            if kind == "json":
                text = editor.text().strip()
                try:
                    value = json.loads(text) if text else None
                except ValueError as exc:
                    p.append(f"{key} is not valid JSON: {exc}")
                    continue
                if value is not None and not isinstance(value, type(self.defaults[key])):
                    p.append(f"{key} must be a JSON {'object' if isinstance(self.defaults[key], dict) else 'list'}")
            elif kind == "types" and not any(c.isChecked() for c in editor.checks):
                p.append("choose at least one task type")
        self.problem_label.setText("\n".join(f"• {x}" for x in p))
        self.problem_label.setVisible(bool(p))
        return p

    def set_values(self, values: dict[str, Any]) -> None:
        self.blockSignals(True)
        try:
            for key, (kind, editor) in self.editors.items():
                if key not in values:
                    continue
                value = values[key]
                widgets = editor.checks if kind == "types" else editor.boxes.values() if kind == "weights" \
                    else [editor.line] if kind == "file" else [editor]
                for w in widgets:
                    w.blockSignals(True)
                if kind == "choice":
                    if editor.findText(str(value)) < 0:
                        editor.addItem(str(value))
                    editor.setCurrentText(str(value))
                elif kind == "types":
                    chosen = value.split(",") if isinstance(value, str) else list(value or [])
                    for c in editor.checks:
                        c.setChecked(c.text() in chosen)
                elif kind == "bool":
                    editor.setChecked(bool(value))
                elif kind == "int":
                    editor.setValue(int(value))
                elif kind == "float":
                    editor.setValue(float(value))
                elif kind == "weights":
                    for name, b in editor.boxes.items():
                        b.setValue(float((value or {}).get(name, 0.0)))
                elif kind == "file":
                    editor.line.setText(str(value or ""))
                elif kind == "str":
                    editor.setText(str(value))
                else:
                    empty = value in ({}, [], None)
                    editor.setText("" if empty else json.dumps(value))
                for w in widgets:
                    w.blockSignals(False)
            for key in self.hidden:
                if key in values:
                    self.hidden[key] = values[key]
        finally:
            self.blockSignals(False)
        self.changed.emit()


# --- the panel -------------------------------------------------------------------------------------------------

def _group(title: str, name: str) -> tuple[QGroupBox, QVBoxLayout]:
    box = QGroupBox(title)
    box.setObjectName(name)
    layout = QVBoxLayout(box)
    layout.setContentsMargins(8, 6, 8, 8)
    return box, layout


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

        self.base_group, bl = _group("Base model", "baseGroup")
        self.base_picker = BasePicker(workspace_getter, settings)
        bl.addWidget(self.base_picker)

        self.data_group, dl = _group("Data", "dataGroup")
        self.data_list = DataFileList()
        self.add_data_btn = QPushButton("Add files…")
        self.remove_data_btn = QPushButton("Remove")
        hint = QLabel("Drop .jsonl files or folders on the list")
        hint.setProperty("role", "muted")
        row = QHBoxLayout()
        row.addWidget(self.add_data_btn)
        row.addWidget(self.remove_data_btn)
        row.addStretch(1)
        dl.addWidget(self.data_list)
        dl.addLayout(row)
        dl.addWidget(hint)

        self.adapter_group, al = _group("Adapter", "adapterGroup")
        self.adapter_box = QComboBox()
        self.adapter_box.setObjectName("adapterKindBox")
        for kind, label in ADAPTER_CHOICES:
            self.adapter_box.addItem(label, kind)
        adapter_cls = getattr(specs, "AdapterSpec", None)
        self.adapter_box.setToolTip(specs.help_text(adapter_cls, "kind") if adapter_cls else "")
        self.adapter_row = QWidget()
        ar = QHBoxLayout(self.adapter_row)
        ar.setContentsMargins(0, 0, 0, 0)
        ar.addWidget(QLabel("Weights that train"))
        ar.addWidget(self.adapter_box, 1)
        al.addWidget(self.adapter_row)
        self.adapter_form = SpecForm(adapter_cls, exclude=("kind",)) if adapter_cls else None
        if self.adapter_form is not None:
            al.addWidget(self.adapter_form)

        self.options_group, ol = _group("Options", "optionsGroup")
        self.options_layout = ol
        self.option_forms: dict[str, Any] = {}  # objective -> SpecForm | DictForm
        self.options_error = QLabel("")
        self.options_error.setProperty("role", "error")
        self.options_error.setWordWrap(True)
        self.options_error.setVisible(False)
        ol.addWidget(self.options_error)

        self.sandbox_group, sl = _group("Sandbox", "sandboxGroup")
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

        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(4)
        for w in (self.help_label, self.base_group, self.data_group, self.adapter_group, self.options_group,
                  self.sandbox_group):
            layout.addWidget(w)

        self.base_picker.changed.connect(lambda _p: self.changed.emit())
        self.data_list.changed.connect(self.changed)
        self.add_data_btn.clicked.connect(self._choose_files)
        self.remove_data_btn.clicked.connect(lambda _=False: self.data_list.remove_selected())
        self.adapter_box.currentIndexChanged.connect(self._on_adapter_box)
        if self.adapter_form is not None:
            self.adapter_form.changed.connect(self.changed)
        self.sandbox_btn.clicked.connect(lambda _=False: self.sandbox_check_requested.emit())
        self.demo_btn.clicked.connect(lambda _=False: self.demo_requested.emit())
        self.set_method("pretraining")

    # --- method ---
    def set_method(self, key: str) -> None:
        self.method = METHOD_BY_KEY[key]
        m = self.method
        self.help_label.setText(m.help)
        self.base_group.setVisible(m.finetune)
        self.data_group.setVisible(bool(m.data))
        if m.data:
            self.data_group.setTitle(DATA_TITLES[m.data])
            self.data_list.set_data_kind(m.data)
        self.adapter_row.setVisible(m.finetune and m.adapter is None)
        self._update_adapter()
        self.sandbox_group.setVisible(m.key == "selfplay")
        form = self._options_form(m.objective) if m.finetune else None
        for f in self.option_forms.values():
            f.setVisible(f is form)
        self.options_group.setVisible(m.finetune and (form is not None or self.options_error.isVisible()))
        if form is not None:
            self.options_group.setTitle(OPTIONS_TITLES.get(m.objective, "Options"))
        self.changed.emit()

    def _options_form(self, objective: str) -> Any:
        if objective in self.option_forms:
            self.options_error.setVisible(False)
            return self.option_forms[objective]
        form: Any = None
        try:
            cls = options_spec(objective)
            if cls is not None:
                form = SpecForm(cls)
            else:
                defaults = method_defaults(objective)
                if defaults:
                    form = DictForm(defaults, exclude=HIDDEN_OPTIONS.get(objective, ()))
        except Exception as exc:  # an engine without this method yet: say so, keep the rest usable
            self.options_error.setText(f"The options of this method cannot be shown: {exc}")
            self.options_error.setVisible(True)
            return None
        self.options_error.setVisible(False)
        if form is None:
            return None
        self.option_forms[objective] = form
        self.options_layout.addWidget(form)
        form.changed.connect(self.changed)
        return form

    def options_form(self) -> Any:
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
        show_form = kind != "none" and self.adapter_form is not None
        self.adapter_group.setVisible(self.method.finetune and (self.method.adapter is None or show_form))
        self.adapter_group.setTitle({"lora": "LoRA adapter", "qlora": "QLoRA adapter"}.get(kind, "Weights"))
        if self.adapter_form is not None:
            self.adapter_form.setVisible(show_form)
            layout = self.adapter_form.layout()
            for name in ("quant_type", "double_quant"):
                editor = self.adapter_form.editors.get(name)
                if editor is not None:
                    layout.setRowVisible(editor, kind == "qlora")

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
        if kind == "none" or self.adapter_form is None:
            return {}
        return {"kind": kind, **self.adapter_form.values()}

    def options_dict(self) -> dict[str, Any]:
        form = self.options_form()
        if form is None:
            return {}
        if isinstance(form, DictForm):
            values = form.values()
            return {k: v for k, v in values.items() if k not in HIDDEN_OPTIONS.get(self.method.objective, ())}
        return form.spec().to_dict()

    def config_fields(self) -> dict[str, Any]:
        """The run-config fields this panel sets for a fine-tuning method (make_run_config's keywords)."""
        return {"base_model": self.base_model(), "objective": self.method.objective, "data": self.data_files(),
                "adapter": self.adapter_dict(), "method_options": self.options_dict()}

    def loss_on(self) -> str:
        form = self.options_form()
        if isinstance(form, SpecForm) and "loss_on" in form.editors:
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
                _label, problem = describe_data_file(path, m.data)
                if problem:
                    p.append(problem)
        form = self.options_form()
        if isinstance(form, DictForm):
            p += form.problems()
        elif isinstance(form, SpecForm):
            p += [f"options: {x}" for x in form.validate()]
        if self.adapter() != "none" and self.adapter_form is not None:
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
        if self.adapter_form is not None and adapter:
            cls = self.adapter_form.spec_cls
            names = {f.name for f in dataclasses.fields(cls)}
            self.adapter_form.set_spec(cls(**{k: v for k, v in adapter.items() if k in names}))
        form = self.options_form()
        if form is not None and options is not None:
            if isinstance(form, DictForm):
                form.set_values({**form.defaults, **options})
            else:
                form.set_spec(form.spec_cls.from_dict(options))
        self._update_adapter()

    def apply_config(self, config: specs.RunConfig) -> None:
        """`apply` with a run config's parts (resume, Library, a pipeline stage)."""
        self.apply(base_model=getattr(config, "base_model", ""), data=getattr(config, "data", []),
                   adapter=getattr(config, "adapter", {}), options=getattr(config, "method_options", {}))

    def _choose_files(self, _checked: bool = False) -> None:
        files, _ = QFileDialog.getOpenFileNames(self, "Add data files", "",
                                                "JSON Lines (*.jsonl *.json *.ndjson);;All files (*)")
        if files:
            self.data_list.add_paths(files)

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
