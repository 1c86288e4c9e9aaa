"""What every tab gets from the main window: workspace, background runner, error reporting, dialogs.

Tabs never import each other; they talk through this object and the main window's wiring.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QApplication, QMessageBox, QWidget

from desktop_app.engine.fault_report import error_parts
from desktop_app.engine.workspace import Workspace
from desktop_app.ui.background import BackgroundRunner

log = logging.getLogger(__name__)


class AppContext(QObject):
    """Shared services. Signals carry cross-tab news; the main window routes them."""

    workspace_changed = Signal(object)  # Workspace
    workspace_items_changed = Signal()  # something was added/removed (Library, pickers refresh)
    error_reported = Signal(str, str)  # message, details
    status_message = Signal(str)

    def __init__(self, workspace: Workspace, parent: QObject | None = None):
        super().__init__(parent)
        self.workspace = workspace
        self.runner = BackgroundRunner(self)
        self.errors: list[tuple[str, str]] = []  # every error shown (tests read it)
        self.dialogs_enabled = True  # tests switch modal pop-ups off
        self._open_boxes: list[QMessageBox] = []

    def set_workspace(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self.workspace_changed.emit(workspace)
        self.workspace_items_changed.emit()

    # --- errors ---
    def report_error(self, message: str, details: str = "", *, title: str = "Something went wrong",
                     parent: QWidget | None = None) -> None:
        """Show an engine error: a UserError's text as is; unexpected ones logged with a 'copy details' button."""
        log_path = self._log_details(message, details) if details else None
        self.errors.append((message, details))
        self.error_reported.emit(message, details)
        self.status_message.emit(f"Error: {status_line(message)}")
        if not self.dialogs_enabled:
            return
        box = QMessageBox(QMessageBox.Icon.Warning if not details else QMessageBox.Icon.Critical, title, message,
                          QMessageBox.StandardButton.Ok, parent or QApplication.activeWindow())
        if details:
            box.setInformativeText(f"Details were written to {log_path}." if log_path else "")
            box.setDetailedText(details)
            copy = box.addButton("Copy details", QMessageBox.ButtonRole.ActionRole)
            copy.clicked.disconnect()  # keep the box open after copying
            copy.clicked.connect(lambda _=False, d=f"{message}\n\n{details}": QApplication.clipboard().setText(d))
        box.finished.connect(lambda _r, b=box: self._forget_box(b))
        self._open_boxes.append(box)
        box.open()  # non-blocking: the event loop (and a running training) go on

    def report_exception(self, exc: BaseException, *, title: str = "Something went wrong") -> None:
        """A UserError or an OS fault the person can fix (a full disk, a read-only folder) as its one sentence, no
        traceback; anything else as an unexpected error, its traceback logged."""
        message, details = error_parts(exc)
        self.report_error(message, details, title=title)

    def _forget_box(self, box: QMessageBox) -> None:
        if box in self._open_boxes:
            self._open_boxes.remove(box)

    def _log_details(self, message: str, details: str) -> Path | None:
        try:
            folder = self.workspace.log_dir
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"error-{time.strftime('%Y%m%d')}.log"
            with path.open("a", encoding="utf-8") as fh:
                fh.write(f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} {message}\n{details}\n")
            return path
        except OSError:
            log.exception("could not write the error log")
            return None

    # --- questions (tests replace `confirm`) ---
    def confirm(self, title: str, text: str, parent: QWidget | None = None) -> bool:
        if not self.dialogs_enabled:
            return True
        answer = QMessageBox.question(parent or QApplication.activeWindow(), title, text,
                                      QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No,
                                      QMessageBox.StandardButton.No)
        return answer == QMessageBox.StandardButton.Yes

    def info(self, text: str) -> None:
        self.status_message.emit(text)


def status_line(message: str) -> str:
    """One line for the status bar: the message's first line, and the first item after it when that line only
    announces a list ("The pipeline cannot start yet:" alone says nothing)."""
    lines = [line.strip().lstrip("•-* ").strip() for line in message.splitlines() if line.strip()]
    if not lines:
        return ""
    if lines[0].endswith(":") and len(lines) > 1:
        more = f" (and {len(lines) - 2} more)" if len(lines) > 2 else ""
        return f"{lines[0]} {lines[1]}{more}"
    return lines[0]
