"""The Data tab's line under "Held out for validation": how many of the listed files' documents the share holds
out, and a warning when it holds out none (the engine's words: engine/data/split_check.py), with the setting's
label in the warning's colour. The line's height is fixed (room for the warning's lines), so a warning that comes
or goes while the person types never moves a field."""

from __future__ import annotations

from PySide6.QtCore import QRect, Qt
from PySide6.QtGui import QResizeEvent
from PySide6.QtWidgets import QLabel, QWidget

from desktop_app.engine.data.split_check import held_out_words, validation_shortfall
from desktop_app.engine.train.preflight import WARNING, Finding
from desktop_app.ui import theme
from desktop_app.ui.widgets.findings_box import mark_labels

NOTE_LINES = 2  # the least room it keeps, in lines
FIELD = "val_fraction"
LONGEST = (9_999, 0.0001)  # documents and share of about the longest warning: the room it keeps at its width


class SplitNote(QLabel):
    """What the share held out for validation does with the documents listed; `label`: the setting's label."""

    def __init__(self, label: QLabel | None = None, parent: QWidget | None = None):
        super().__init__("", parent)
        self.setObjectName("splitNote")
        self.setWordWrap(True)
        self.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.label = label
        self.warning = ""
        self.show_split(0, 0.0)

    def show_split(self, documents: int, share: float) -> None:
        """The note for `documents` (the usable files' documents; 0: none listed yet) held out at `share`."""
        self.warning = validation_shortfall(documents, share)
        text = self.warning or held_out_words(documents, share)
        self.setText(f"⚠ {self.warning}" if self.warning else text)
        self.setToolTip(text)
        self.setStyleSheet(f"color: {theme.WARN if self.warning else theme.MUTED};")
        self.keep_room()
        if self.label is not None:
            mark_labels({FIELD: self.label}, [Finding(WARNING, FIELD, self.warning)] if self.warning else [])

    def keep_room(self) -> None:
        """A fixed height: room for the longest warning at this width (or the text shown, when longer), so the
        fields under it stay put while the share or the files change; only a new width changes it."""
        width = max(1, self.width())
        texts = [f"⚠ {validation_shortfall(*LONGEST)}", self.text()]
        bounds = QRect(0, 0, width, 100_000)
        need = max(self.fontMetrics().boundingRect(bounds, Qt.TextFlag.TextWordWrap, t).height() for t in texts)
        need = max(need, self.fontMetrics().lineSpacing() * NOTE_LINES) + 4
        if need != self.height():
            self.setFixedHeight(need)

    def resizeEvent(self, event: QResizeEvent) -> None:
        super().resizeEvent(event)
        self.keep_room()


def split_note_under(form: QWidget) -> SplitNote:
    """A SplitNote on the whole width under the row of "Held out for validation" in `form` (a DataSpec SpecForm)."""
    note = SplitNote(form.labels[FIELD])  # type: ignore[attr-defined]  # a SpecForm
    layout = form.layout()
    row, _role = layout.getWidgetPosition(form.editors[FIELD])  # type: ignore[attr-defined]
    layout.insertRow(row + 1, note)  # type: ignore[attr-defined]  # a QFormLayout
    return note
