"""A form generated from a spec dataclass: one editor per field, help text as tooltip, inline problems."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtGui import QValidator
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QSpinBox,
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

    def textFromValue(self, value: float) -> str:
        return f"{value:.6g}"

    def valueFromText(self, text: str) -> float:
        try:
            return float(text)
        except ValueError:
            return self.value()

    def validate(self, text: str, pos: int) -> object:
        try:
            float(text)
            return QValidator.State.Acceptable
        except ValueError:
            ok = all(c in "0123456789.eE+-" for c in text)
            return QValidator.State.Intermediate if ok else QValidator.State.Invalid


def _label(name: str) -> str:
    return name.replace("_", " ").capitalize()


class SpecForm(QWidget):
    """Editors for the fields of `spec_cls`. `changed` fires on any edit; `spec()` builds the dataclass."""

    changed = Signal()

    def __init__(self, spec_cls: type, *, exclude: tuple[str, ...] = (), parent: QWidget | None = None):
        super().__init__(parent)
        self.spec_cls = spec_cls
        self.editors: dict[str, QWidget] = {}
        self._kinds: dict[str, str] = {}
        layout = QFormLayout(self)
        layout.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.ExpandingFieldsGrow)
        layout.setHorizontalSpacing(12)
        layout.setVerticalSpacing(6)
        default = spec_cls()
        for f in dataclasses.fields(spec_cls):
            if f.name in exclude:
                continue
            editor, kind = self._make_editor(f, getattr(default, f.name))
            help_ = str(f.metadata.get("help", ""))
            editor.setToolTip(help_)
            editor.setObjectName(f"field_{f.name}")
            label = QLabel(_label(f.name))
            label.setToolTip(help_)
            layout.addRow(label, editor)
            self.editors[f.name] = editor
            self._kinds[f.name] = kind
        self.problems = QLabel("")
        self.problems.setProperty("role", "error")
        self.problems.setWordWrap(True)
        self.problems.setVisible(False)
        layout.addRow(self.problems)
        self.set_spec(default)

    def _make_editor(self, f: dataclasses.Field, default: Any) -> tuple[QWidget, str]:
        meta = f.metadata
        if "choices" in meta:
            box = QComboBox()
            box.addItems(list(meta["choices"]))
            box.currentTextChanged.connect(self.changed)
            return box, "choice"
        if isinstance(default, bool):
            check = QCheckBox()
            check.toggled.connect(self.changed)
            return check, "bool"
        if isinstance(default, int):
            spin = QSpinBox()
            spin.setRange(int(meta.get("minimum", -(2**31 - 1))), int(meta.get("maximum", 2**31 - 1)))
            spin.setKeyboardTracking(False)
            spin.setGroupSeparatorShown(True)
            spin.valueChanged.connect(self.changed)
            return spin, "int"
        if isinstance(default, float):
            fbox = FloatBox()
            if "minimum" in meta:
                fbox.setMinimum(float(meta["minimum"]))
            if "maximum" in meta:
                fbox.setMaximum(float(meta["maximum"]))
            fbox.valueChanged.connect(self.changed)
            return fbox, "float"
        if isinstance(default, list):
            line = QLineEdit()
            line.setPlaceholderText('items separated by |  (or a JSON list)')
            line.editingFinished.connect(self.changed)
            return line, "list"
        line = QLineEdit()
        line.editingFinished.connect(self.changed)
        return line, "str"

    # --- values ---
    def values(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name, editor in self.editors.items():
            kind = self._kinds[name]
            if kind == "choice":
                out[name] = editor.currentText()  # type: ignore[attr-defined]
            elif kind == "bool":
                out[name] = editor.isChecked()  # type: ignore[attr-defined]
            elif kind in ("int", "float"):
                out[name] = editor.value()  # type: ignore[attr-defined]
            elif kind == "list":
                out[name] = parse_list(editor.text())  # type: ignore[attr-defined]
            else:
                out[name] = editor.text()  # type: ignore[attr-defined]
        return out

    def spec(self) -> Any:
        """The dataclass built from the editors (fields not shown keep their defaults)."""
        return self.spec_cls(**self.values())

    def set_spec(self, spec: Any) -> None:
        self.blockSignals(True)
        try:
            for name, editor in self.editors.items():
                value = getattr(spec, name)
                kind = self._kinds[name]
                editor.blockSignals(True)
                if kind == "choice":
                    editor.setCurrentText(str(value))  # type: ignore[attr-defined]
                elif kind == "bool":
                    editor.setChecked(bool(value))  # type: ignore[attr-defined]
                elif kind in ("int", "float"):
                    editor.setValue(value)  # type: ignore[attr-defined]
                elif kind == "list":
                    editor.setText(format_list(value))  # type: ignore[attr-defined]
                else:
                    editor.setText(str(value))  # type: ignore[attr-defined]
                editor.blockSignals(False)
        finally:
            self.blockSignals(False)
        self.changed.emit()

    def set_value(self, name: str, value: Any) -> None:
        spec = self.spec().replace(**{name: value})
        self.set_spec(spec)

    def show_problems(self, problems: list[str]) -> None:
        self.problems.setText("\n".join(f"• {p}" for p in problems))
        self.problems.setVisible(bool(problems))

    def validate(self) -> list[str]:
        problems = self.spec().validate()
        self.show_problems(problems)
        return problems


def parse_list(text: str) -> list[str]:
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
