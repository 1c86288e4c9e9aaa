"""A form generated from a spec dataclass: one editor per field, with the words, units and widgets its display
hints ask for (spec_base.py), help text as tooltip, and inline problems. Every spec's form is this one: the
model, data, training and generation settings, and each method's options.

Fields with the `advanced` hint are rows of their own that stay hidden until advanced settings are shown: by the
form's own "Show advanced settings" switch, or by its owner (`set_show_advanced`) when one switch serves several
forms (the Train tab). Hidden rows keep their values. The label column is as wide as the basic rows' widest label
(16 to 24 characters); a longer label, advanced or not, wraps onto more lines. So showing the advanced rows moves no
field: a wider label column would push the fields of a narrow form under their labels, some rows wrapped and others
not."""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from PySide6.QtCore import QEvent, Signal
from PySide6.QtWidgets import (
    QAbstractSpinBox,
    QCheckBox,
    QComboBox,
    QFormLayout,
    QLabel,
    QLineEdit,
    QSpinBox,
    QWidget,
)

from desktop_app.engine.spec_base import field_label, help_text
from desktop_app.ui.widgets.benchmark_picker import BenchmarkPicker
from desktop_app.ui.widgets.field_editors import (
    CheckList,
    FileListEdit,
    FloatBox,
    FolderEdit,
    JsonEdit,
    LinesEdit,
    ModulesEdit,
    NumbersEdit,
    PathEdit,
    RecordsEdit,
    WeightsEdit,
)

QWIDGETSIZE_MAX = 16777215  # Qt's "no maximum" for a widget's size
# editors with value() / set_value() / problems()
COMPOSITE = ("files", "file", "folder", "checklist", "weights", "numbers", "json", "lines", "records", "modules",
             "benchmarks")


class SpecForm(QWidget):
    """Editors for the fields of `spec_cls`. `changed` fires on any edit; `spec()` builds the dataclass.

    `exclude`d fields are not shown and keep their defaults; fields with the `hidden` hint are not shown either but
    keep the value last set (GRPO's prompt files: the run's data files, set elsewhere). With `advanced_switch` the
    form has its own "Show advanced settings" check box under its rows (when it has advanced fields)."""

    changed = Signal()

    def __init__(self, spec_cls: type, *, exclude: tuple[str, ...] = (), advanced_switch: bool = True,
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.spec_cls = spec_cls
        self.editors: dict[str, QWidget] = {}
        self.labels: dict[str, QLabel] = {}
        self.hidden: dict[str, Any] = {}
        self.advanced: list[str] = []  # names of the advanced fields shown
        self.show_advanced = False
        self._kinds: dict[str, str] = {}
        self._row_hidden: set[str] = set()  # rows an owner hides (e.g. QLoRA-only fields under LoRA)
        layout = QFormLayout(self)
        layout.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.ExpandingFieldsGrow)
        layout.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)  # a narrow column puts fields under labels
        layout.setHorizontalSpacing(12)
        layout.setVerticalSpacing(6)
        layout.setContentsMargins(0, 0, 0, 0)
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
            label.setBuddy(editor)
            layout.addRow(label, editor)
            self.editors[f.name] = editor
            self.labels[f.name] = label
            self._kinds[f.name] = kind
            if f.metadata.get("advanced"):
                self.advanced.append(f.name)
        self.advanced_check = QCheckBox(f"Show advanced settings ({len(self.advanced)})")
        self.advanced_check.setObjectName("showAdvanced")
        self.advanced_check.setToolTip("Settings whose defaults suit most runs")
        self.advanced_check.toggled.connect(self.set_show_advanced)
        if advanced_switch and self.advanced:
            layout.addRow(self.advanced_check)
        self.problems = QLabel("")
        self.problems.setProperty("role", "error")
        self.problems.setWordWrap(True)
        self.problems.setVisible(False)
        layout.addRow(self.problems)
        self.set_spec(default)
        self.fit_labels()
        self._apply_rows()

    def _make_editor(self, f: dataclasses.Field, default: Any) -> tuple[QWidget, str]:
        meta = f.metadata
        widget = meta.get("widget") or ("lines" if isinstance(default, list) else None)
        if widget in COMPOSITE:
            label = field_label(self.spec_cls, f.name)
            blank = list(default) if isinstance(default, list) and default and not any(default) else []
            editor: Any = {"files": lambda: FileListEdit(label), "file": lambda: PathEdit(label),
                           "folder": lambda: FolderEdit(label), "benchmarks": BenchmarkPicker,
                           "checklist": lambda: CheckList(f.name, meta.get("choices", ())),
                           "weights": lambda: WeightsEdit(f.name, meta.get("keys", ())),
                           "numbers": lambda: NumbersEdit(f.name, meta.get("keys", ())),
                           "records": lambda: RecordsEdit(label),
                           "modules": lambda: ModulesEdit(f.name),
                           "json": lambda: JsonEdit(default),
                           "lines": lambda: LinesEdit(blank, "One per line (empty: start from nothing)" if blank
                                                      else "One per line")}[widget]()
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
            return self._number_editor(meta, default), "int" if isinstance(default, int) else "float"
        line = QLineEdit()
        line.editingFinished.connect(self.changed)
        return line, "str"

    def _number_editor(self, meta: Any, default: int | float) -> QAbstractSpinBox:
        number: QSpinBox | FloatBox
        unit = str(meta.get("unit") or "")
        if isinstance(default, int):
            number = QSpinBox()
            number.setRange(int(meta.get("minimum", -(2**31 - 1))), int(meta.get("maximum", 2**31 - 1)))
            # Quantities (with a unit: steps, tokens) read better as 10,000; identifiers such as seeds do not.
            number.setGroupSeparatorShown(bool(unit))
        else:
            number = FloatBox()
            if "minimum" in meta:
                number.setMinimum(float(meta["minimum"]))
            if "maximum" in meta:
                number.setMaximum(float(meta["maximum"]))
        number.setKeyboardTracking(False)
        if unit:
            number.setSuffix(f" {unit}")
        zero = str(meta.get("zero") or "")
        if zero and number.minimum() == 0:
            number.setSpecialValueText(zero)  # shown instead of the minimum, 0
        # Room for a typical value with its unit, or the words of 0: never cut to "0."
        sample = max(f"0.0001 {unit}".strip(), zero, key=len) if isinstance(default, float) else \
            max(f"10,000 {unit}".strip(), zero, key=len)
        number.setMinimumWidth(max(96, number.fontMetrics().horizontalAdvance(sample) + 34))
        number.valueChanged.connect(self.changed)
        return number

    def add_note(self, after: str, text: str) -> QLabel:
        """A muted line of text under the row of the field `after`."""
        note = QLabel(text)
        note.setProperty("role", "muted")
        note.setWordWrap(True)
        layout: QFormLayout = self.layout()  # type: ignore[assignment]
        row, _role = layout.getWidgetPosition(self.editors[after])
        layout.insertRow(row + 1, note)
        return note

    # --- label column ---
    def label_width(self) -> int:
        """The label column's width: the widest basic label's, within 16 to 24 characters' width. Showing the
        advanced rows never widens it, and a very long label does not squeeze every field of a narrow form."""
        chars = self.fontMetrics().averageCharWidth()
        basic = [self.labels[n] for n in self.labels if n not in self.advanced] or list(self.labels.values())
        widest = max((label.sizeHint().width() for label in basic), default=0)
        return min(max(widest, 16 * chars), 24 * chars)

    def fit_labels(self) -> None:
        """Labels wider than the label column wrap onto more lines, the column's width, instead of widening it."""
        for label in self.labels.values():  # measured on one line
            label.setWordWrap(False)
            label.setMinimumWidth(0)
            label.setMaximumWidth(QWIDGETSIZE_MAX)
        width = self.label_width()
        for label in self.labels.values():
            if label.sizeHint().width() > width:
                label.setWordWrap(True)
                label.setFixedWidth(width)  # a wrapped label's own size hint would take part of the column only

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange) and getattr(self, "labels", None):
            self.fit_labels()  # the text got wider or narrower: measure the labels again

    # --- which rows show ---
    def set_show_advanced(self, on: bool) -> None:
        """Show (or hide) the rows of the advanced fields; their values are kept either way."""
        self.show_advanced = bool(on)
        if self.advanced_check.isChecked() != self.show_advanced:
            self.advanced_check.blockSignals(True)
            self.advanced_check.setChecked(self.show_advanced)
            self.advanced_check.blockSignals(False)
        self._apply_rows()

    def set_row_hidden(self, name: str, hidden: bool) -> None:
        """Hide a field's row whatever the advanced switch says (a field that does not apply now)."""
        if hidden:
            self._row_hidden.add(name)
        else:
            self._row_hidden.discard(name)
        self._apply_rows()

    def row_shown(self, name: str) -> bool:
        return name in self.editors and name not in self._row_hidden and \
            (self.show_advanced or name not in self.advanced)

    def _apply_rows(self) -> None:
        layout: QFormLayout = self.layout()  # type: ignore[assignment]
        for name, editor in self.editors.items():
            layout.setRowVisible(editor, self.row_shown(name))

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
        self.problems.setText("\n".join(f"• {self.in_words(p)}" for p in problems))
        self.problems.setVisible(bool(problems))

    def in_words(self, problem: str) -> str:
        """A problem with the fields' labels instead of their names ("batch_size 16 is not a multiple of
        micro_batch_size 5" -> "Batch size 16 is not a multiple of micro-batch size 5"): it names what the form
        shows."""
        def label(match: re.Match) -> str:
            words = field_label(self.spec_cls, match.group(0))
            if match.start() == 0 or words[1:2].isupper():  # a sentence's start, or an acronym ("KL penalty")
                return words
            return words[:1].lower() + words[1:]

        first = re.match(r"[a-z0-9_]+", problem)
        # names with "_" are never words of a sentence; a one-word name ("lr", "seeds") only where it opens one
        names = sorted((n for n in self.editors if "_" in n or (first is not None and n == first.group(0))),
                       key=len, reverse=True)
        if not names:
            return problem
        # not inside a file name ("seeds.jsonl"), and a one-word name only where it opens the sentence
        pattern = r"(?<![\w.])(" + "|".join(map(re.escape, names)) + r")(?![\w]|\.\w)"
        return re.sub(pattern, lambda m: label(m) if "_" in m.group(0) or m.start() == 0 else m.group(0), problem)

    def input_problems(self) -> list[str]:
        """What the editors cannot read (text that is no JSON, a file that holds no objects), by field name."""
        return [f"{name}: {problem}" for name, editor in self.editors.items() if self._kinds[name] in COMPOSITE
                for problem in editor.problems()]  # type: ignore[attr-defined]

    def validate(self) -> list[str]:
        problems = self.input_problems() + self.spec().validate()
        self.show_problems(problems)
        return problems
