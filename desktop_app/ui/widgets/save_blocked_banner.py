"""The banner a run display shows while a save is blocked (the engine's SaveBlocked: a full disk, a read-only
folder): the engine's one line, and Retry / Save elsewhere… / Stop, which set the run's Controls directly (the run
waits on them in its worker thread; engine/train/saving.py)."""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtWidgets import QFileDialog, QFrame, QHBoxLayout, QLabel, QPushButton, QWidget

from desktop_app.engine.events import Controls, SaveBlocked
from desktop_app.engine.os_faults import size_text


def ask_folder(parent: QWidget, start: str) -> str:
    return QFileDialog.getExistingDirectory(parent, "Save the run elsewhere: choose a folder on a disk with space",
                                            start)


def blocked_text(event: SaveBlocked) -> str:
    """What the banner says: the engine's line, then where the run stands (plain text)."""
    space = f" ({size_text(event.needed)} needed, {size_text(event.free)} free)" \
        if event.needed > 0 and event.free >= 0 and "free" not in event.message else ""
    return (f"Training is paused at step {event.step}: {event.message}{space}. The last checkpoint is intact. "
            "Free some space and press Retry, save the run in another folder, or stop it.")


class SaveBlockedBanner(QFrame):
    """Hidden until `show_blocked`; each button answers once (the run hides the banner when it goes on)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("saveBlocked")
        self.controls: Controls | None = None
        self.shown_event: SaveBlocked | None = None
        self.choose_folder: Callable[[QWidget, str], str] = ask_folder  # tests put their own answer here
        self.label = QLabel("")
        self.label.setWordWrap(True)
        self.retry_btn = QPushButton("Retry")
        self.retry_btn.setToolTip("Try to save the checkpoint again (after freeing some space)")
        self.retry_btn.setProperty("primary", True)
        self.elsewhere_btn = QPushButton("Save elsewhere…")
        self.elsewhere_btn.setToolTip("Move the run to a folder on another disk and save there; the old folder "
                                      "keeps its earlier checkpoints")
        self.stop_btn = QPushButton("Stop")
        self.stop_btn.setToolTip("End the run without this checkpoint; the last checkpoint stays intact")
        row = QHBoxLayout(self)
        row.setContentsMargins(8, 4, 8, 4)
        row.addWidget(self.label, 1)
        for button in (self.retry_btn, self.elsewhere_btn, self.stop_btn):
            row.addWidget(button)
        self.retry_btn.clicked.connect(lambda _=False: self._answer(retry=True))
        self.elsewhere_btn.clicked.connect(lambda _=False: self._elsewhere())
        self.stop_btn.clicked.connect(lambda _=False: self._answer(stop=True))
        self.setVisible(False)

    def follow(self, controls: Controls) -> None:
        """The run now shown trains with `controls`: someone (this banner) answers its blocked saves."""
        controls.answers_faults = True
        self.controls = controls
        self.dismiss()

    def show_blocked(self, event: SaveBlocked) -> None:
        self.shown_event = event
        self.label.setText(blocked_text(event))
        self.label.setToolTip(event.folder)
        self._enable(True)
        self.setVisible(True)

    def dismiss(self) -> None:
        self.shown_event = None
        self.setVisible(False)

    def _enable(self, on: bool) -> None:
        for button in (self.retry_btn, self.elsewhere_btn, self.stop_btn):
            button.setEnabled(on)

    def _elsewhere(self) -> None:
        folder = self.choose_folder(self, self.shown_event.folder if self.shown_event is not None else "")
        if folder:
            self._answer(folder=folder)

    def _answer(self, *, retry: bool = False, folder: str = "", stop: bool = False) -> None:
        if self.controls is None:
            return
        self._enable(False)  # answered: the run's next event says how it went
        if stop:
            self.controls.stop.set()
            self.controls.pause.clear()
            self.label.setText("Stopping without this checkpoint; the last checkpoint stays intact…")
        elif folder:
            self.controls.save_elsewhere(folder)
            self.label.setText(f"Moving the run to {folder} and saving there…")
        elif retry:
            self.controls.retry.set()
            self.label.setText("Trying to save again…")
