"""The welcome banner of a first launch: "Train the sample model" (the tiny preset on the bundled sample corpus) or
Dismiss. It is for a first launch only: gone once dismissed (remembered) or once the workspace holds a run."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton

DISMISSED = "welcome_dismissed"


class WelcomeBanner(QFrame):
    def __init__(self, settings: QSettings, runs_folder: Path, on_start: Callable[[], None]):
        super().__init__()
        self.settings = settings
        self.setObjectName("welcomeBanner")
        self.setStyleSheet("#welcomeBanner { background: #eef2ff; border: 1px solid #c7d2fe; border-radius: 6px; }")
        row = QHBoxLayout(self)
        row.setContentsMargins(12, 6, 8, 6)
        text = QLabel("<b>Welcome!</b> New here? Train the tiny preset on the bundled sample corpus: curves appear "
                      "within a minute. Or drop your own text files anywhere on this window.")
        text.setWordWrap(True)
        self.start_btn = QPushButton("Train the sample model")
        self.start_btn.setProperty("primary", True)
        self.start_btn.setObjectName("quickstartButton")
        dismiss = QPushButton("Dismiss")
        row.addWidget(text, 1)
        row.addWidget(self.start_btn)
        row.addWidget(dismiss)
        self.start_btn.clicked.connect(lambda _checked=False: on_start())
        dismiss.clicked.connect(self.dismiss)
        self.setVisible(self.wanted(runs_folder))

    def wanted(self, runs_folder: Path) -> bool:
        """Not once dismissed, nor once the workspace holds a run."""
        if self.settings.value(DISMISSED, False, bool):
            return False
        return not (runs_folder.is_dir() and any(p.is_dir() for p in runs_folder.iterdir()))

    def dismiss(self, _checked: bool = False) -> None:
        self.setVisible(False)
        self.settings.setValue(DISMISSED, True)
