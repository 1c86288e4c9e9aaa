"""The Train tab's dialogs: the terminal equivalent of a run or pipeline (Show CLI command), saving its config,
and choosing a run folder to resume or watch."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtWidgets import (
    QApplication,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QLabel,
    QPlainTextEdit,
    QVBoxLayout,
    QWidget,
)

from desktop_app.engine.specs import RunConfig


class CliDialog(QDialog):
    """The command (copyable) above the JSON it reads (savable), opened without blocking the window."""

    def __init__(self, title: str, command: str, json_text: str, save_label: str, save: Callable[[], None],
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Run this from a terminal")
        lay = QVBoxLayout(self)
        lay.addWidget(QLabel(title))
        self.command = QPlainTextEdit(command)
        self.command.setObjectName("cliCommand")
        self.command.setReadOnly(True)
        self.command.setMaximumHeight(170)
        text = QPlainTextEdit(json_text)
        text.setObjectName("cliJson")
        text.setReadOnly(True)
        lay.addWidget(self.command)
        lay.addWidget(text, 1)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        copy = buttons.addButton("Copy command", QDialogButtonBox.ButtonRole.ActionRole)
        save_btn = buttons.addButton(save_label, QDialogButtonBox.ButtonRole.ActionRole)
        copy.clicked.connect(lambda _=False: QApplication.clipboard().setText(self.command.toPlainText()))
        save_btn.clicked.connect(lambda _=False: save())
        buttons.rejected.connect(self.reject)
        lay.addWidget(buttons)
        self.resize(760, 520)


def save_config_dialog(parent: QWidget, config: RunConfig) -> None:
    """Ask where, then write the run config (raises what writing it raised)."""
    path, _ = QFileDialog.getSaveFileName(parent, "Save run config", "run.json", "JSON (*.json)")
    if path:
        config.save(path)


def choose_run_folder(parent: QWidget, purpose: str, runs: Path) -> str:
    """A run folder chosen by the user ("" when cancelled). purpose: "resume" or "watch"."""
    title = {"resume": "Choose a run folder to resume",
             "watch": "Choose a run folder to watch (a run launched outside the window)"}[purpose]
    return QFileDialog.getExistingDirectory(parent, title, str(runs))
