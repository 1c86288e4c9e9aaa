"""Where files arrive: a dashed drop area with 'Add files' / 'Add folder' buttons.

The main window also accepts drops anywhere and forwards them here (see `paths_from_mime`).
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QMimeData, Qt, Signal
from PySide6.QtGui import QDragEnterEvent, QDragMoveEvent, QDropEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFileDialog,
    QFrame,
    QHBoxLayout,
    QLabel,
    QListWidget,
    QPushButton,
    QVBoxLayout,
    QWidget,
)


def paths_from_mime(mime: QMimeData | None) -> list[str]:
    if mime is None or not mime.hasUrls():
        return []
    return [url.toLocalFile() for url in mime.urls() if url.isLocalFile() and url.toLocalFile()]


class PathDropList(QListWidget):
    """A list that takes dropped files and folders (nothing else) and hands their paths to `paths_dropped_on`:
    `on_paths` when given, or a subclass's override."""

    def __init__(self, on_paths: Callable[[list[str]], object] | None = None, parent: QWidget | None = None):
        super().__init__(parent)
        self._on_paths = on_paths
        self.setAcceptDrops(True)
        self.viewport().setAcceptDrops(True)
        self.setDragDropMode(QAbstractItemView.DragDropMode.DropOnly)

    def paths_dropped_on(self, paths: list[str]) -> None:
        if self._on_paths is not None:
            self._on_paths(paths)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        _accept_paths(event)

    def dragMoveEvent(self, event: QDragMoveEvent) -> None:
        _accept_paths(event)  # asked again over every row: the list's own rule would refuse a drop between rows

    def dropEvent(self, event: QDropEvent) -> None:
        paths = paths_from_mime(event.mimeData())
        if paths:
            event.acceptProposedAction()
            self.paths_dropped_on(paths)


def _accept_paths(event: QDragMoveEvent) -> None:
    """Take a drag that carries local files or folders; refuse anything else (text, links)."""
    if paths_from_mime(event.mimeData()):
        event.acceptProposedAction()
    else:
        event.ignore()


class DropZone(QFrame):
    paths_dropped = Signal(list)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName("dropZone")
        self.setAcceptDrops(True)
        self.setMinimumHeight(92)
        layout = QVBoxLayout(self)
        title = QLabel("Drop files or folders here — anywhere on the window works too")
        title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        title.setProperty("role", "title")
        title.setWordWrap(True)
        hint = QLabel(".txt .md .jsonl · .pdf .epub .docx .html · .csv .tsv .parquet, datasets folders — bad files "
                      "are flagged with the reason, the rest go on")
        hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        hint.setProperty("role", "muted")
        hint.setWordWrap(True)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        self.add_files = QPushButton("Add files…")
        self.add_folder = QPushButton("Add folder…")
        buttons.addWidget(self.add_files)
        buttons.addWidget(self.add_folder)
        buttons.addStretch(1)
        layout.addWidget(title)
        layout.addWidget(hint)
        layout.addLayout(buttons)
        self.add_files.clicked.connect(self._choose_files)
        self.add_folder.clicked.connect(self._choose_folder)

    def _choose_files(self, _checked: bool = False) -> None:
        files, _ = QFileDialog.getOpenFileNames(self, "Add training files", "",
                                                "Text, documents and tables (*.txt *.md *.markdown *.jsonl *.pdf "
                                                "*.epub *.docx *.html *.htm *.csv *.tsv *.parquet *.arrow);;"
                                                "All files (*)")
        if files:
            self.paths_dropped.emit(files)

    def _choose_folder(self, _checked: bool = False) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Add a folder of training files")
        if folder:
            self.paths_dropped.emit([folder])

    def _set_active(self, on: bool) -> None:
        self.setProperty("active", "true" if on else "false")
        self.style().unpolish(self)
        self.style().polish(self)

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        if paths_from_mime(event.mimeData()):
            self._set_active(True)
            event.acceptProposedAction()
        else:
            event.ignore()

    def dragLeaveEvent(self, event) -> None:
        self._set_active(False)

    def dropEvent(self, event: QDropEvent) -> None:
        self._set_active(False)
        paths = paths_from_mime(event.mimeData())
        if paths:
            event.acceptProposedAction()
            self.paths_dropped.emit(paths)
