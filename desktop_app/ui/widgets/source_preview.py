"""The selected file before anything is tokenized: its extracted text (PDF, EPUB, DOCX, HTML, text files), or a
table's columns with a few rows and the column mapping (ColumnsPanel); the problem in red when it cannot be read.
The preview itself is the engine's (data/preview.py), made in the background runner."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtWidgets import QLabel, QStackedWidget, QTextBrowser, QVBoxLayout, QWidget

from desktop_app.ui import theme
from desktop_app.ui.widgets.columns_panel import ColumnsPanel
from desktop_app.ui.widgets.layouts import note_label

if TYPE_CHECKING:
    from desktop_app.engine.data.preview import SourcePreview


class SourcePreviewPanel(QWidget):
    """Text or columns of one file; `columns.mapping_changed` reports a new mapping."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("sourcePreview")
        self.title = QLabel("Select a file above to see what will be read from it.")
        self.title.setWordWrap(True)
        self.problem = note_label()
        self.problem.setStyleSheet(f"color: {theme.ERROR}")
        self.problem.hide()
        self.text = QTextBrowser()
        self.text.setObjectName("extractedText")
        self.text.setPlaceholderText("The text extracted from the file, as the tokenizer will read it")
        self.columns = ColumnsPanel()
        self.stack = QStackedWidget()
        self.stack.addWidget(self.text)
        self.stack.addWidget(self.columns)
        layout = QVBoxLayout(self)
        layout.addWidget(self.title)
        layout.addWidget(self.problem)
        layout.addWidget(self.stack, 1)
        self.path = ""

    def show_loading(self, path: str) -> None:
        self.path = path
        self.title.setText(f"Reading {Path(path).name}…")

    def show_preview(self, preview: SourcePreview) -> None:
        self.path = preview.path
        name = Path(preview.path).name
        self.problem.setVisible(bool(preview.problem))
        self.problem.setText(preview.problem)
        if preview.kind == "table" and preview.table is not None:
            rows = preview.table.total_rows
            count = f" ({rows:,} rows)" if rows is not None else ""
            self.title.setText(f"<b>{name}</b>{count}: {len(preview.table.columns)} columns, the first "
                               f"{len(preview.table.rows)} rows")
            self.columns.show_table(preview.table.columns, preview.table.rows, preview.mapping, preview.note)
            self.stack.setCurrentWidget(self.columns)
        else:
            more = " (the beginning)" if preview.more else ""
            self.title.setText(f"<b>{name}</b>: the text that will be tokenized{more}")
            self.text.setPlainText(preview.text)
            self.stack.setCurrentWidget(self.text)
