"""The Train tab's runs on several processes (the Distributed fields' "Processes per machine" > 1): the job of a
session the engine launches under torchrun (engine/session.py), the bar that names a process that died with the
last good checkpoint and a Resume button, and the question when the window closes while such a run goes on: stop
it, or leave it running (Library -> Watch live finds it again)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from PySide6.QtCore import QEvent, QObject, QTimer
from PySide6.QtWidgets import QHBoxLayout, QLabel, QMessageBox, QPushButton, QWidget

from desktop_app.engine.events import Event
from desktop_app.engine.session import LaunchControls, ProcessFailed, Session
from desktop_app.ui import train_jobs


class TrainTabLike(Protocol):
    """What this module uses of the Train tab (no import of it: the tab imports this module)."""

    ctx: Any
    run_view: Any

    @property
    def running(self) -> bool: ...

    def stop(self) -> None: ...

    def resume_run(self, run_dir: str | Path) -> bool: ...

    def window(self) -> QWidget: ...

Job = tuple[Callable[[], Iterable[Event]], LaunchControls]
STOP, LEAVE, CANCEL = "stop", "leave", "cancel"


class MultiProcessRuns(QObject):
    """What the tab adds for a run on several processes; `bar` sits above the run display."""

    def __init__(self, tab: TrainTabLike, parent: QObject | None = None):
        super().__init__(parent)
        self.tab = tab
        self.controls: LaunchControls | None = None  # the running multi-process job's, else None
        self.nproc = 0
        self.close_answer = STOP  # what closing answers when pop-ups are off (tests)
        self._closing = False
        self._filtered: QObject | None = None
        self.bar = QWidget()
        self.bar.setObjectName("processFailedBar")
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.resume_btn = QPushButton("Resume")
        self.resume_btn.setObjectName("resumeFailedRun")
        self.resume_btn.setToolTip("Continue this run from its last good checkpoint, on the same processes")
        row = QHBoxLayout(self.bar)
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.label, 1)
        row.addWidget(self.resume_btn)
        self.bar.setVisible(False)
        self.resume_btn.clicked.connect(self._resume)
        self.failed_dir: Path | None = None

    @property
    def active(self) -> bool:
        return self.controls is not None and self.tab.running

    def job(self, session: Session) -> Job | None:
        """The job of a session the engine runs on several processes (a new run whose Distributed block names
        several, or a resume of one launched on several: on as many again); None for one process."""
        n = session.processes
        if n < 2:
            return None
        controls = LaunchControls()
        return (lambda: train_jobs.session_job(session, controls)), self._began(controls, n)

    def _began(self, controls: LaunchControls, n: int) -> LaunchControls:
        self.controls, self.nproc = controls, n
        self.bar.setVisible(False)
        self._watch_closing()
        return controls

    def ended(self) -> None:
        """The job is over (the tab's task finished)."""
        self.controls = None
        if self._closing:
            window = self.tab.window()
            QTimer.singleShot(0, window.close)

    def show_failed(self, event: ProcessFailed, run_dir: Path | None) -> None:
        """A process died: named above the display with the last good checkpoint, and Resume when there is one."""
        self.tab.run_view.log("error", event.message)
        self.label.setText(f"<b>A process of the run stopped.</b> {event.message}")
        self.failed_dir = run_dir
        self.resume_btn.setVisible(bool(event.checkpoint) and run_dir is not None)
        self.bar.setVisible(True)

    def _resume(self) -> None:
        if self.failed_dir is not None and self.tab.resume_run(self.failed_dir):
            self.bar.setVisible(False)

    # --- closing the window while the processes run ---
    def _watch_closing(self) -> None:
        window = self.tab.window()
        if window is not self._filtered and window is not self.tab:
            window.installEventFilter(self)
            self._filtered = window

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() != QEvent.Type.Close or not self.active or self._closing:
            return False
        answer = self.ask_on_close()
        if answer == CANCEL:
            event.ignore()
            return True
        self._closing = True
        if answer == LEAVE and self.controls is not None:
            self.controls.detach.set()
            self.tab.run_view.log("info", "leaving the run's processes running: Library -> Watch live follows it")
        else:
            self.tab.stop()
        event.ignore()  # closes for real once the job has ended (ended() closes the window again)
        return True

    def ask_on_close(self) -> str:
        """Stop the run, leave it running, or stay: the person's choice (`close_answer` when pop-ups are off)."""
        if not self.tab.ctx.dialogs_enabled:
            return self.close_answer
        box = QMessageBox(QMessageBox.Icon.Question, "Training on several processes",
                          f"A run is training on {self.nproc} processes. Stop it (each process saves a checkpoint), "
                          "or leave it running after the window closes? (Library → Watch live follows it again.)",
                          parent=self.tab.window())
        stop = box.addButton("Stop the run", QMessageBox.ButtonRole.DestructiveRole)
        leave = box.addButton("Leave it running", QMessageBox.ButtonRole.AcceptRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.exec()
        clicked = box.clickedButton()
        return STOP if clicked is stop else LEAVE if clicked is leave else CANCEL
