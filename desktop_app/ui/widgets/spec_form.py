"""A form generated from a spec dataclass: one editor per field, with the words, units and widgets its display
hints ask for (spec_base.py), help text as tooltip, and inline problems. Every spec's form is this one: the
model, data, training and generation settings, and each method's options."""

from __future__ import annotations

import dataclasses
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QSpinBox,
    QWidget,
)

from desktop_app.engine.spec_base import field_label, help_text
from desktop_app.ui.widgets.field_editors import (
    CheckList,
    FileListEdit,
    FloatBox,
    JsonEdit,
    LinesEdit,
    PathEdit,
    WeightsEdit,
    format_list,
    parse_list,
)

COMPOSITE = ("files", "file", "checklist", "weights", "json", "lines")  # editors with value() / set_value()


class SpecForm(QWidget):
    """Editors for the fields of `spec_cls`. `changed` fires on any edit; `spec()` builds the dataclass.

    `exclude`d fields are not shown and keep their defaults; fields with the `hidden` hint are not shown either but
    keep the value last set (GRPO's prompt files: the run's data files, set elsewhere)."""

    changed = Signal()

    def __init__(self, spec_cls: type, *, exclude: tuple[str, ...] = (), parent: QWidget | None = None):
        super().__init__(parent)
        self.spec_cls = spec_cls
        self.editors: dict[str, QWidget] = {}
        self.hidden: dict[str, Any] = {}
        self._kinds: dict[str, str] = {}
        layout = QFormLayout(self)
        layout.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.ExpandingFieldsGrow)
        layout.setHorizontalSpacing(12)
        layout.setVerticalSpacing(6)
        default = spec_cls()
        for f in dataclasses.fields(spec_cls):
            if f.name in exclude:
                continue
            if f.metadata.get("hidden"):
                self.hidden[f.name] = getattr(default, f.name)
                continue
            editor, kind = self._make_editor(f, getattr(default, f.name))
            help_ = help_text(spec_cls, f.name)
            editor.setToolTip(help_)
            editor.setObjectName(f"field_{f.name}")
            label = QLabel(field_label(spec_cls, f.name))
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
        widget = meta.get("widget")
        if widget in COMPOSITE:
            label = field_label(self.spec_cls, f.name)
            editor: Any = {"files": lambda: FileListEdit(label), "file": lambda: PathEdit(label),
                           "checklist": lambda: CheckList(f.name, meta.get("choices", ())),
                           "weights": lambda: WeightsEdit(f.name, meta.get("keys", ())),
                           "json": lambda: JsonEdit(default), "lines": LinesEdit}[widget]()
            editor.changed.connect(self.changed)
            return editor, widget
        if "choices" in meta:
            box = QComboBox()
            box.addItems(list(meta["choices"]))
            box.currentTextChanged.connect(self.changed)
            return box, "choice"
        if isinstance(default, bool):
            check = QCheckBox()
            check.toggled.connect(self.changed)
            return check, "bool"
        if isinstance(default, (int, float)):
            number: QSpinBox | FloatBox
            if isinstance(default, int):
                number = QSpinBox()
                number.setRange(int(meta.get("minimum", -(2**31 - 1))), int(meta.get("maximum", 2**31 - 1)))
                number.setGroupSeparatorShown(True)
            else:
                number = FloatBox()
                if "minimum" in meta:
                    number.setMinimum(float(meta["minimum"]))
                if "maximum" in meta:
                    number.setMaximum(float(meta["maximum"]))
            number.setKeyboardTracking(False)
            if meta.get("unit"):
                number.setSuffix(f" {meta['unit']}")
            if meta.get("zero") and number.minimum() == 0:
                number.setSpecialValueText(str(meta["zero"]))  # shown instead of the minimum, 0
            number.valueChanged.connect(self.changed)
            return number, "int" if isinstance(default, int) else "float"
        if isinstance(default, list):
            line = QLineEdit()
            line.setPlaceholderText('items separated by |  (or a JSON list)')
            line.editingFinished.connect(self.changed)
            return line, "list"
        line = QLineEdit()
        line.editingFinished.connect(self.changed)
        return line, "str"

    def add_note(self, after: str, text: str) -> QLabel:
        """A muted line of text under the row of the field `after`."""
        note = QLabel(text)
        note.setProperty("role", "muted")
        note.setWordWrap(True)
        layout: QFormLayout = self.layout()  # type: ignore[assignment]
        row, _role = layout.getWidgetPosition(self.editors[after])
        layout.insertRow(row + 1, note)
        return note

    # --- values ---
    def values(self) -> dict[str, Any]:
        """The shown fields' values, by name."""
        out: dict[str, Any] = {}
        for name, editor in self.editors.items():
            kind = self._kinds[name]
            if kind in COMPOSITE:
                out[name] = editor.value()  # type: ignore[attr-defined]
            elif kind == "choice":
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
        """The dataclass built from the editors (hidden fields as last set, excluded ones at their defaults)."""
        return self.spec_cls(**{**self.hidden, **self.values()})

    def set_spec(self, spec: Any) -> None:
        self.blockSignals(True)
        try:
            for name in self.hidden:
                self.hidden[name] = getattr(spec, name)
            for name, editor in self.editors.items():
                value = getattr(spec, name)
                kind = self._kinds[name]
                editor.blockSignals(True)
                if kind in COMPOSITE:
                    editor.set_value(value)  # type: ignore[attr-defined]
                elif kind == "choice":
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

    def set_values(self, values: dict[str, Any]) -> None:
        """Set the named fields; the others keep what they show."""
        self.set_spec(self.spec().replace(**values))

    def set_value(self, name: str, value: Any) -> None:
        self.set_values({name: value})

    def show_problems(self, problems: list[str]) -> None:
        self.problems.setText("\n".join(f"• {p}" for p in problems))
        self.problems.setVisible(bool(problems))

    def input_problems(self) -> list[str]:
        """What the editors cannot read (text that is no JSON), by field name."""
        return [f"{name} {problem}" for name, editor in self.editors.items() if self._kinds[name] in COMPOSITE
                for problem in editor.problems()]  # type: ignore[attr-defined]

    def validate(self) -> list[str]:
        problems = self.input_problems() + self.spec().validate()
        self.show_problems(problems)
        return problems
