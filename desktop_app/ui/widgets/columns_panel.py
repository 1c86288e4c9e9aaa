"""The column panel: a table's columns with its first rows, and the column mapping as combo boxes (what the data is
used as, then one box per part: which column holds it). A thin view over the engine's rules (data/columns.py):
the guess, the roles of each kind and the check come from there; this only shows them and reports a change."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QFormLayout,
    QHeaderView,
    QLabel,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from desktop_app.engine.column_roles import KIND_WORDS, KINDS, REQUIRED, ROLES
from desktop_app.ui.widgets.layouts import note_label

NONE = "(none)"
ROLE_WORDS = {"text": "Text", "instruction": "Instruction", "input": "Input (optional)", "output": "Answer",
              "messages": "Conversation", "prompt": "Prompt", "chosen": "Preferred answer",
              "rejected": "Rejected answer", "system": "System prompt (optional)"}


class ColumnsPanel(QWidget):
    """Columns with a few rows, and the mapping; `mapping_changed` carries the new role -> column dict."""

    mapping_changed = Signal(dict)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("columnsPanel")
        self.columns: list[str] = []
        self.kind_box = QComboBox()
        self.kind_box.setObjectName("columnsKind")
        for kind in KINDS:
            self.kind_box.addItem(KIND_WORDS[kind], kind)
        self.form = QFormLayout()
        self.form.addRow("Use the rows as", self.kind_box)
        self.role_boxes: dict[str, QComboBox] = {}
        for role in dict.fromkeys(r for k in KINDS for r in ROLES[k]):
            box = QComboBox()
            box.setObjectName(f"column_{role}")
            box.currentIndexChanged.connect(lambda _i: self._emit())
            self.role_boxes[role] = box
            self.form.addRow(QLabel(ROLE_WORDS[role]), box)
        self.note = note_label()
        self.rows = QTableWidget(0, 0)
        self.rows.setObjectName("columnsRows")
        self.rows.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.rows.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Interactive)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(self.form)
        layout.addWidget(self.note)
        layout.addWidget(self.rows, 1)
        self.kind_box.currentIndexChanged.connect(lambda _i: self._on_kind())
        self._show_roles("text")

    def show_table(self, columns: list[str], rows: list[list[str]], mapping: dict[str, str], note: str) -> None:
        """The table's columns and first rows, with `mapping` (the one in effect) selected in the boxes."""
        self.columns = list(columns)
        self.rows.clear()
        self.rows.setColumnCount(len(columns))
        self.rows.setRowCount(len(rows))
        self.rows.setHorizontalHeaderLabels(columns)
        for r, row in enumerate(rows):
            for c, cell in enumerate(row):
                item = QTableWidgetItem(cell)
                item.setToolTip(cell)
                self.rows.setItem(r, c, item)
        self.note.setText(note)
        self._select(mapping)

    def _select(self, mapping: dict[str, str]) -> None:
        kind = next((k for k in ("preference", "chat", "instruction", "text") if set(REQUIRED[k]) <= set(mapping)),
                    "text")
        for box in [self.kind_box, *self.role_boxes.values()]:
            box.blockSignals(True)
        for role, box in self.role_boxes.items():
            box.clear()
            box.addItems([NONE, *self.columns])
            box.setCurrentText(mapping.get(role, NONE))
        self.kind_box.setCurrentIndex(KINDS.index(kind))
        for box in [self.kind_box, *self.role_boxes.values()]:
            box.blockSignals(False)
        self._show_roles(kind)

    def _show_roles(self, kind: str) -> None:
        for role, box in self.role_boxes.items():
            self.form.setRowVisible(box, role in ROLES[kind])

    def _on_kind(self) -> None:
        self._show_roles(self.kind())
        self._emit()

    def kind(self) -> str:
        return str(self.kind_box.currentData())

    def mapping(self) -> dict[str, str]:
        """The role -> column dict the boxes show, for the chosen kind (roles set to (none) left out)."""
        return {role: self.role_boxes[role].currentText() for role in ROLES[self.kind()]
                if self.role_boxes[role].currentText() not in (NONE, "")}

    def set_role(self, role: str, column: str) -> None:
        """Pick `column` for `role` (as a person would in the box)."""
        self.role_boxes[role].setCurrentText(column)

    def set_kind(self, kind: str) -> None:
        self.kind_box.setCurrentIndex(KINDS.index(kind))

    def _emit(self) -> None:
        mapping = self.mapping()
        if all(role in mapping for role in REQUIRED[self.kind()]):
            self.mapping_changed.emit(mapping)
        else:
            missing = [ROLE_WORDS[r].lower() for r in REQUIRED[self.kind()] if r not in mapping]
            self.note.setText(f"Choose the column that holds the {' and the '.join(missing)}.")
