"""Editors for spec fields that a plain spin box, check box or line cannot hold (spec_base.py's `widget` hints).

Each composite editor has the same small interface so a form can treat them alike: a `changed` signal,
`value()`, `set_value(value)` and `problems()` (what does not parse, in words; [] when fine).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QValidator
from PySide6.QtWidgets import (
    QAbstractItemView,
    QAbstractSpinBox,
    QCheckBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QHBoxLayout,
    QLineEdit,
    QListWidget,
    QListWidgetItem,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)


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


def parse_list(text: str) -> list[str]:
    """Items separated by `|`, or a JSON list."""
    text = text.strip()
    if text.startswith("["):
        try:
            data = json.loads(text)
            if isinstance(data, list):
                return [str(x) for x in data]
        except json.JSONDecodeError:
            pass
    if not text:
        return []
    return [part.strip() for part in text.split("|")]


def format_list(values: list[Any]) -> str:
    if any("|" in str(v) for v in values) or values == [""]:
        return json.dumps(values)
    return " | ".join(str(v) for v in values)


class FileListEdit(QWidget):
    """widget="files": a list of file paths with Add… and Remove."""

    changed = Signal()

    def __init__(self, title: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.title = title
        self.list = QListWidget()
        self.list.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.list.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.list.setMaximumHeight(72)
        self.add_btn = QPushButton("Add…")
        self.remove_btn = QPushButton("Remove")
        buttons = QHBoxLayout()
        buttons.addWidget(self.add_btn)
        buttons.addWidget(self.remove_btn)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.list)
        layout.addLayout(buttons)
        self.add_btn.clicked.connect(self._choose)
        self.remove_btn.clicked.connect(self._remove_selected)

    def value(self) -> list[str]:
        return [self.list.item(i).data(Qt.ItemDataRole.UserRole) for i in range(self.list.count())]

    def set_value(self, value: Any) -> None:
        self.list.clear()
        for path in value if isinstance(value, list) else []:
            self._append(str(path))

    def problems(self) -> list[str]:
        return []

    def _append(self, path: str) -> None:
        item = QListWidgetItem(Path(path).name or path)
        item.setData(Qt.ItemDataRole.UserRole, path)
        item.setToolTip(path)
        self.list.addItem(item)

    def _choose(self, _checked: bool = False) -> None:
        files, _ = QFileDialog.getOpenFileNames(self, f"Add {self.title.lower()}", "",
                                                "JSON Lines (*.jsonl *.json *.ndjson);;All files (*)")
        have = set(self.value())
        for path in files:
            if path not in have:
                self._append(path)
        if files:
            self.changed.emit()

    def _remove_selected(self, _checked: bool = False) -> None:
        for item in self.list.selectedItems():
            self.list.takeItem(self.list.row(item))
        self.changed.emit()


class PathEdit(QWidget):
    """widget="file": one file path, typed or chosen with Browse…; empty means none."""

    changed = Signal()

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

    def problems(self) -> list[str]:
        return []

    def _browse(self, _checked: bool = False) -> None:
        path, _ = QFileDialog.getOpenFileName(self, f"Choose the {self.title.lower()}", self.line.text())
        if path:
            self.line.setText(path)
            self.changed.emit()


class CheckList(QWidget):
    """widget="checklist": some of `choices`, one check box each; the value keeps the choices' order."""

    changed = Signal()

    def __init__(self, name: str, choices: Sequence[str], parent: QWidget | None = None):
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        self.checks: dict[str, QCheckBox] = {}
        for choice in choices:
            check = QCheckBox(str(choice))
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

    def problems(self) -> list[str]:
        return []  # an empty choice is the spec's to refuse (its validate names the choices)


class WeightsEdit(QWidget):
    """widget="weights": a number per name of `keys`. 0 means off and is left out of the value, unless the value
    set last held that name (a config shown and read back stays the same)."""

    changed = Signal()

    def __init__(self, name: str, keys: Sequence[str], parent: QWidget | None = None):
        super().__init__(parent)
        grid = QFormLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.setVerticalSpacing(2)
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

    def problems(self) -> list[str]:
        return []


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
            return self.default, f"is not valid JSON: {exc}"
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
    """widget="lines": a list of strings, one per line (blank lines dropped)."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setMaximumHeight(72)
        self.textChanged.connect(self.changed)

    def value(self) -> list[str]:
        return [line for line in self.toPlainText().splitlines() if line.strip()]

    def set_value(self, value: Any) -> None:
        self.setPlainText("\n".join(str(v) for v in value) if isinstance(value, list) else "")

    def problems(self) -> list[str]:
        return []
