"""Help menu pages: the keyboard shortcuts (read from the window's own actions, so the list cannot drift) and the
documentation: README.md in the browser, or in a window of the app where no browser opens it."""

from __future__ import annotations

import html
from pathlib import Path

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QAction, QDesktopServices, QTextDocument
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QTextBrowser, QVBoxLayout, QWidget

from desktop_app.engine.paths import resources_dir
from desktop_app.ui.context import AppContext

NOT_SHIPPED = ("The documentation (README.md) is not shipped with this build: it is the README.md at the top of the "
               "project's source code.")

# Keys that widgets handle themselves (no action of the window holds them).
WIDGET_KEYS = (
    ("Enter", "Generate tab, chat: send the message"),
    ("Shift+Enter", "Generate tab, chat: a new line in the message"),
    ("Ctrl+Enter", "Generate tab: send the message, or generate the completion"),
)


def docs_file() -> Path | None:
    """The README of a source checkout (the app's documentation), when it is there."""

    readme = resources_dir().parent / "README.md"
    return readme if readme.is_file() else None


def open_docs(ctx: AppContext, parent: QWidget | None = None) -> DocsDialog | None:
    """Open the README in the browser; where none opens it (no browser, no file handler), show it in a window of the
    app, which says where the file is. Returns that window, if one was needed."""
    readme = docs_file()
    if readme is None:
        ctx.info(NOT_SHIPPED)
        return None
    if QDesktopServices.openUrl(QUrl.fromLocalFile(str(readme))):
        return None
    try:
        readme.read_text(encoding="utf-8")  # a file that cannot be shown is said so, not an empty window
    except (OSError, UnicodeDecodeError) as exc:
        ctx.report_error(f"No browser opened the documentation, and {readme} cannot be read: "
                         f"{getattr(exc, 'strerror', None) or exc}", title="Documentation")
        return None
    dialog = DocsDialog(readme, parent)
    dialog.show()
    ctx.info(f"No browser opened the documentation: it is shown in a window; the file is {readme}")
    return dialog


class DocsDialog(QDialog):
    """The README rendered as markdown (its pictures and links to other pages of docs/ work), and where it is."""

    def __init__(self, readme: Path, parent: QWidget | None = None):
        super().__init__(parent)
        self.setWindowTitle("Documentation")
        self.resize(900, 640)
        where = QLabel(f"The documentation is the file <b>{html.escape(str(readme))}</b>; any text editor or web "
                       "browser shows it too.")
        where.setWordWrap(True)
        where.setTextInteractionFlags(where.textInteractionFlags() | Qt.TextInteractionFlag.TextSelectableByMouse)
        self.browser = QTextBrowser()
        self.browser.setObjectName("docsBrowser")
        self.browser.setOpenExternalLinks(True)
        self.browser.setSource(QUrl.fromLocalFile(str(readme)), QTextDocument.ResourceType.MarkdownResource)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(where)
        layout.addWidget(self.browser, 1)
        layout.addWidget(buttons)


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
