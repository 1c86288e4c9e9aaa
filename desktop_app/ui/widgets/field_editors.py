"""Editors for spec fields that a plain spin box, check box or line cannot hold (spec_base.py's `widget` hints).

Each composite editor has the same small interface so a form can treat them alike: a `changed` signal,
`value()`, `set_value(value)` and `problems()` (what does not parse, in words; [] when fine).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QValidator
from PySide6.QtWidgets import (
    QAbstractItemView,
    QAbstractSpinBox,
    QBoxLayout,
    QCheckBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QGridLayout,
    QHBoxLayout,
    QLineEdit,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from desktop_app.ui.widgets.data_files import new_data_paths
from desktop_app.ui.widgets.drop_zone import PathDropList
from desktop_app.ui.widgets.layouts import note_label


class FloatBox(QDoubleSpinBox):
    """A spin box that shows floats compactly (1e-05, 0.001, 10000) and accepts scientific notation."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setDecimals(12)
        self.setRange(-1e12, 1e12)
        self.setKeyboardTracking(False)
        self.setStepType(QAbstractSpinBox.StepType.AdaptiveDecimalStepType)

    def _number_text(self, text: str) -> str:
        # Qt hands the overridden methods the whole text, prefix and suffix (a unit) included.
        return text.removeprefix(self.prefix()).removesuffix(self.suffix()).strip()

    def textFromValue(self, value: float) -> str:
        return f"{value:.6g}"

    def valueFromText(self, text: str) -> float:
        if self.specialValueText() and text == self.specialValueText():
            return self.minimum()
        try:
            return float(self._number_text(text))
        except ValueError:
            return self.value()

    def validate(self, text: str, pos: int) -> object:
        if self.specialValueText() and text == self.specialValueText():
            return QValidator.State.Acceptable
        number = self._number_text(text)
        try:
            float(number)
            return QValidator.State.Acceptable
        except ValueError:
            ok = all(c in "0123456789.eE+-" for c in number)
            return QValidator.State.Intermediate if ok else QValidator.State.Invalid


class _Composite(QWidget):
    """What the composite editors share: `changed`, and no problems of their own (every state they can show is a
    value; one a spec cannot take is the spec's to refuse, its validate names why)."""

    changed = Signal()

    def problems(self) -> list[str]:
        return []


def _snug(layout: QBoxLayout | QFormLayout | QGridLayout) -> None:
    """No margins and 2 px between rows: a composite editor sits in its form row like a single widget."""
    layout.setContentsMargins(0, 0, 0, 0)
    if isinstance(layout, QFormLayout):
        layout.setVerticalSpacing(2)
    else:
        layout.setSpacing(2)


class FileListEdit(_Composite):
    """widget="files": a list of file paths with Add files…, Add folder… and Remove; files and folders can be dropped
    on the list (a folder brings the data files inside it, by the engine's one rule for data folders)."""

    def __init__(self, title: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.title = title
        self.list = PathDropList(self._add_paths)
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.list.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        # long names elide (the tooltip has the path) instead of a scroll bar over a short list
        self.list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.list.setMaximumHeight(72)
        self.list.setToolTip("Drop files or folders here")
        self.add_btn = QPushButton("Add…")
        self.folder_btn = QPushButton("Folder…")
        self.remove_btn = QPushButton("Remove")
        # The buttons in a column beside the list: a row of three would be wider than the field column of a
        # narrow form, which then puts this field under its label, out of line with the other rows.
        buttons = QVBoxLayout()
        _snug(buttons)
        buttons.addWidget(self.add_btn)
        buttons.addWidget(self.folder_btn)
        buttons.addWidget(self.remove_btn)
        buttons.addStretch(1)
        layout = QHBoxLayout(self)
        _snug(layout)
        layout.addWidget(self.list, 1)
        layout.addLayout(buttons)
        self.add_btn.clicked.connect(self._choose)
        self.folder_btn.clicked.connect(self._choose_folder)
        self.remove_btn.clicked.connect(self._remove_selected)

    def value(self) -> list[str]:
        return [self.list.item(i).data(Qt.ItemDataRole.UserRole) for i in range(self.list.count())]

    def set_value(self, value: Any) -> None:
        self.list.clear()
        for path in value if isinstance(value, list) else []:
            self._append(str(path))

    def _append(self, path: str) -> None:
        item = QListWidgetItem(Path(path).name or path)
        item.setData(Qt.ItemDataRole.UserRole, path)
        item.setToolTip(path)
        self.list.addItem(item)

    def _add_paths(self, paths: list[str]) -> int:
        """Files as given, folders replaced by the data files inside them; returns how many were new."""
        fresh = new_data_paths(paths, self.value())
        for path in fresh:
            self._append(path)
        if fresh:
            self.changed.emit()
        return len(fresh)

    def _choose(self, _checked: bool = False) -> None:
        files, _ = QFileDialog.getOpenFileNames(self, f"Add {self.title.lower()}", "",
                                                "JSON Lines (*.jsonl *.json *.ndjson);;All files (*)")
        if files:
            self._add_paths(files)

    def _choose_folder(self, _checked: bool = False) -> None:
        folder = QFileDialog.getExistingDirectory(self, f"Add a folder of {self.title.lower()}")
        if folder:
            self._add_paths([folder])

    def _remove_selected(self, _checked: bool = False) -> None:
        for item in self.list.selectedItems():
            self.list.takeItem(self.list.row(item))
        self.changed.emit()


class PathEdit(_Composite):
    """widget="file": one file path, typed or chosen with Browse…; empty means none."""

    def __init__(self, title: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.title = title
        self.line = QLineEdit()
        self.line.setPlaceholderText("none")
        self.browse_btn = QPushButton("Browse…")
        row = QHBoxLayout(self)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.line, 1)
        row.addWidget(self.browse_btn)
        self.line.editingFinished.connect(self.changed)
        self.browse_btn.clicked.connect(self._browse)

    def value(self) -> str:
        return self.line.text().strip()

    def set_value(self, value: Any) -> None:
        self.line.setText(str(value or ""))

    def _browse(self, _checked: bool = False) -> None:
        path, _ = QFileDialog.getOpenFileName(self, f"Choose the {self.title.lower()}", self.line.text())
        if path:
            self.line.setText(path)
            self.changed.emit()


class FolderEdit(PathEdit):
    """widget="folder": one folder path, typed or chosen with Browse…; empty means none."""

    def _browse(self, _checked: bool = False) -> None:
        folder = QFileDialog.getExistingDirectory(self, f"Choose the {self.title.lower()}", self.line.text())
        if folder:
            self.line.setText(folder)
            self.changed.emit()


class CheckList(_Composite):
    """widget="checklist": some of `choices`, one check box each; the value keeps the choices' order."""

    def __init__(self, name: str, choices: Sequence[str], parent: QWidget | None = None):
        super().__init__(parent)
        layout = QVBoxLayout(self)
        _snug(layout)
        self.checks: dict[str, QCheckBox] = {}
        for choice in choices:
            check = QCheckBox(str(choice).replace("&", "&&"))  # shown as written: "&" is no shortcut here
            check.setObjectName(f"{name}_{choice}")
            check.toggled.connect(self.changed)
            layout.addWidget(check)
            self.checks[str(choice)] = check

    def value(self) -> list[str]:
        return [name for name, check in self.checks.items() if check.isChecked()]

    def set_value(self, value: Any) -> None:
        chosen = {str(v) for v in value} if isinstance(value, (list, tuple)) else set()
        for name, check in self.checks.items():
            check.setChecked(name in chosen)


class WeightsEdit(_Composite):
    """widget="weights": a number per name of `keys`. 0 means off and is left out of the value, unless the value
    set last held that name (a config shown and read back stays the same)."""

    def __init__(self, name: str, keys: Sequence[str], parent: QWidget | None = None):
        super().__init__(parent)
        grid = QFormLayout(self)
        _snug(grid)
        self.boxes: dict[str, FloatBox] = {}
        self._given: set[str] = set()
        for key in keys:
            box = FloatBox()
            box.setRange(-100.0, 100.0)
            box.setObjectName(f"{name}_{key}")
            box.valueChanged.connect(self.changed)
            grid.addRow(str(key), box)
            self.boxes[str(key)] = box

    def value(self) -> dict[str, float]:
        return {k: b.value() for k, b in self.boxes.items() if b.value() != 0.0 or k in self._given}

    def set_value(self, value: Any) -> None:
        weights = value if isinstance(value, dict) else {}
        self._given = {str(k) for k in weights}
        for key, box in self.boxes.items():
            box.setValue(float(weights.get(key, 0.0)))


class JsonEdit(QLineEdit):
    """widget="json": free-form JSON of the default's type (an object or a list); empty is the empty one."""

    changed = Signal()

    def __init__(self, default: Any, parent: QWidget | None = None):
        super().__init__(parent)
        self.default = default
        self.setPlaceholderText("JSON")
        self.editingFinished.connect(self.changed)

    def _parsed(self) -> tuple[Any, str]:
        text = self.text().strip()
        if not text:
            return type(self.default)(), ""
        try:
            value = json.loads(text)
        except ValueError as exc:
            return self.default, f"not valid JSON: {exc}"
        if not isinstance(value, type(self.default)):
            return self.default, f"must be a JSON {'object' if isinstance(self.default, dict) else 'list'}"
        return value, ""

    def value(self) -> Any:
        """The parsed value; text that does not parse gives the default (and a problem)."""
        return self._parsed()[0]

    def set_value(self, value: Any) -> None:
        self.setText("" if value in ({}, [], None) else json.dumps(value))

    def problems(self) -> list[str]:
        problem = self._parsed()[1]
        return [problem] if problem else []


class LinesEdit(QPlainTextEdit):
    """widget="lines": a list of strings, one per line (blank lines dropped). Nothing typed gives `blank` (e.g. [""]:
    one sample from the start of the text), which the placeholder says."""

    changed = Signal()

    def __init__(self, blank: list[str] | None = None, placeholder: str = "One per line",
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.blank = list(blank or [])
        self.setPlaceholderText(placeholder)
        self.setMaximumHeight(64)
        self.setTabChangesFocus(True)
        self.textChanged.connect(self.changed)

    def value(self) -> list[str]:
        lines = [line for line in self.toPlainText().splitlines() if line.strip()]
        return lines or list(self.blank)

    def set_value(self, value: Any) -> None:
        shown = [str(v) for v in value if str(v).strip()] if isinstance(value, list) else []
        self.setPlainText("\n".join(shown))

    def problems(self) -> list[str]:
        return []


class NumbersEdit(_Composite):
    """widget="numbers": a whole number per name of `keys`, each "default" (left out of the value) until set. Names
    the value set last held that are not among `keys` are kept as they were."""

    def __init__(self, name: str, keys: Sequence[str], parent: QWidget | None = None):
        super().__init__(parent)
        grid = QFormLayout(self)
        _snug(grid)
        self.boxes: dict[str, QSpinBox] = {}
        self._other: dict[str, Any] = {}
        for key in keys:
            box = QSpinBox()
            box.setRange(0, 10_000)
            box.setSpecialValueText("default")
            box.setObjectName(f"{name}_{key}")
            box.setKeyboardTracking(False)
            box.valueChanged.connect(self.changed)
            grid.addRow(str(key), box)
            self.boxes[str(key)] = box

    def value(self) -> dict[str, Any]:
        return {**self._other, **{k: b.value() for k, b in self.boxes.items() if b.value()}}

    def set_value(self, value: Any) -> None:
        given = value if isinstance(value, dict) else {}
        self._other = {k: v for k, v in given.items() if k not in self.boxes}
        for key, box in self.boxes.items():
            number = given.get(key, 0)
            box.setValue(int(number) if isinstance(number, (int, float)) and not isinstance(number, bool) else 0)


class RecordsEdit(_Composite):
    """widget="records": a list of JSON objects (e.g. task objects), loaded from a JSON Lines (or JSON list) file;
    the row says how many there are, by type when they have one."""

    def __init__(self, title: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.title = title
        self.records: list[dict[str, Any]] = []
        self._problems: list[str] = []
        self.summary = note_label("none")
        self.load_btn = QPushButton("Load…")
        self.clear_btn = QPushButton("Clear")
        # The summary over its buttons: the three side by side are wider than a narrow form's field column.
        buttons = QHBoxLayout()
        buttons.addWidget(self.load_btn)
        buttons.addWidget(self.clear_btn)
        buttons.addStretch(1)
        column = QVBoxLayout(self)
        _snug(column)
        column.addWidget(self.summary)
        column.addLayout(buttons)
        self.load_btn.clicked.connect(self._choose)
        self.clear_btn.clicked.connect(lambda _=False: self._set(list(), []))

    def value(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.records]

    def set_value(self, value: Any) -> None:
        records = [dict(r) for r in value if isinstance(r, dict)] if isinstance(value, list) else []
        self._set(records, [], emit=False)

    def problems(self) -> list[str]:
        return list(self._problems)

    def load_file(self, path: str | Path) -> bool:
        """Read the objects of a JSON Lines file (or a JSON list); lines that are no object are named, not kept."""
        p = Path(path)
        try:
            text = p.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            self._set(self.records, [f"cannot read {p.name}: {getattr(exc, 'strerror', None) or exc}"])
            return False
        records, problems = parse_records(text, p.name)
        self._set(records if records else self.records, problems)
        return bool(records) and not problems

    def _set(self, records: list[dict[str, Any]], problems: list[str], *, emit: bool = True) -> None:
        self.records, self._problems = records, problems
        kinds = Counter(str(r.get("type")) for r in records if r.get("type"))
        text = f"{len(records)} loaded" if records else "none"
        if kinds:
            text += " (" + ", ".join(f"{k} {n}" for k, n in kinds.items()) + ")"
        self.summary.setText(text)
        if emit:
            self.changed.emit()

    def _choose(self, _checked: bool = False) -> None:
        path, _ = QFileDialog.getOpenFileName(self, f"Load {self.title.lower()}", "",
                                              "JSON Lines (*.jsonl *.json *.ndjson);;All files (*)")
        if path:
            self.load_file(path)


def parse_records(text: str, name: str) -> tuple[list[dict[str, Any]], list[str]]:
    """JSON objects of a JSON Lines text (or of one JSON list), and what is wrong with the rest, by line."""
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            data = json.loads(stripped)
        except ValueError as exc:
            return [], [f"{name} is not valid JSON: {exc}"]
        good = [r for r in data if isinstance(r, dict)]
        return good, ([f"{name}: {len(data) - len(good)} item(s) are not JSON objects"] if len(good) < len(data)
                      else [])
    records, problems = [], []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            item = json.loads(line)
        except ValueError:
            problems.append(f"{name} line {number} is not valid JSON")
            continue
        if isinstance(item, dict):
            records.append(item)
        else:
            problems.append(f"{name} line {number} is not a JSON object")
    if not records and not problems:
        problems.append(f"{name} holds no JSON objects")
    return records, problems


class ModulesEdit(_Composite):
    """widget="modules": some of the base model's linear layers (by name), one check box each; none ticked means
    every linear layer (the usual best choice). `set_choices` lists the base's layers; names set that are not among
    them are kept, ticked, so a config shown reads back the same."""

    ALL = "every linear layer of the base (attention and MLP)"

    def __init__(self, name: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.name = name
        self.checks: dict[str, QCheckBox] = {}
        self.note = note_label(self.ALL)
        self.grid = QGridLayout()
        _snug(self.grid)
        layout = QVBoxLayout(self)
        _snug(layout)
        layout.addLayout(self.grid)
        layout.addWidget(self.note)
        self._choices: list[str] = []

    def set_choices(self, names: Sequence[str]) -> None:
        """The base model's linear layers; the ticked ones stay ticked."""
        chosen = self.value()
        self._choices = list(names)
        self._rebuild([*self._choices, *[n for n in chosen if n not in self._choices]], set(chosen))

    def _rebuild(self, names: list[str], chosen: set[str]) -> None:
        for check in self.checks.values():
            self.grid.removeWidget(check)
            check.deleteLater()
        self.checks = {}
        for i, module in enumerate(names):
            check = QCheckBox(module)
            check.setObjectName(f"{self.name}_{module}")
            check.setChecked(module in chosen)
            check.toggled.connect(self._toggled)
            self.grid.addWidget(check, i // 2, i % 2)
            self.checks[module] = check
        self._update_note()

    def _toggled(self, _on: bool) -> None:
        self._update_note()
        self.changed.emit()

    def _update_note(self) -> None:
        if not self.checks:
            self.note.setText(self.ALL + " (choose a base model to pick some)")
        else:
            self.note.setText("none ticked: " + self.ALL if not self.value() else "only the ticked layers")

    def value(self) -> list[str]:
        return [name for name, check in self.checks.items() if check.isChecked()]

    def set_value(self, value: Any) -> None:
        chosen = [str(v) for v in value] if isinstance(value, (list, tuple)) else []
        self._rebuild([*self._choices, *[n for n in chosen if n not in self._choices]], set(chosen))
