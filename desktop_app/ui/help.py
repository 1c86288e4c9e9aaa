"""Help menu pages: the keyboard shortcuts (read from the window's own actions, so the list cannot drift) and where
the documentation is."""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtGui import QAction
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QVBoxLayout, QWidget

# Keys that widgets handle themselves (no action of the window holds them).
WIDGET_KEYS = (
    ("Enter", "Generate tab, chat: send the message"),
    ("Shift+Enter", "Generate tab, chat: a new line in the message"),
    ("Ctrl+Enter", "Generate tab: send the message, or generate the completion"),
)


def docs_file() -> Path | None:
    """The README of a source checkout (the app's documentation), when it is there."""
    from desktop_app.engine.paths import resources_dir

    readme = resources_dir().parent / "README.md"
    return readme if readme.is_file() else None


def shortcuts_html(actions: list[tuple[QAction, str]]) -> str:
    """A table of (action, where it works) with their keys, then the keys widgets handle."""
    rows = []
    for action, where in actions:
        keys = action.shortcut().toString()
        if keys:
            text = action.text().replace("&", "").rstrip("…")
            rows.append((keys, f"{text}" + (f" <span style='color:#6b7280'>({html.escape(where)})</span>"
                                            if where else "")))
    rows += [(keys, html.escape(what)) for keys, what in WIDGET_KEYS]
    cells = "".join(f"<tr><td style='padding-right:18px'><b>{html.escape(k)}</b></td><td>{v}</td></tr>"
                    for k, v in rows)
    return f"<table cellspacing='4'>{cells}</table>"


class ShortcutsDialog(QDialog):
    def __init__(self, actions: list[tuple[QAction, str]], parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Keyboard shortcuts")
        layout = QVBoxLayout(self)
        self.label = QLabel(shortcuts_html(actions))
        self.label.setObjectName("shortcutsTable")
        layout.addWidget(self.label)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout.addWidget(buttons)
