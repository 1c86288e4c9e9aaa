"""The Get-a-model view's downloads: one row per model (a progress bar with bytes, speed and time left; Cancel,
Resume, and once it is there "Chat with it" and "Fine-tune it"), run one after another in the app's background
worker. The engine pulls (engine.hub.download.pull: huggingface_hub's own download and resume); a row only shows
what its events say, and an error as the engine's sentence."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from desktop_app.engine.events import Controls, Event, Log
from desktop_app.engine.hub.download import DownloadCancelled, DownloadFinished, DownloadProgress, pull
from desktop_app.ui.context import AppContext
from desktop_app.ui.widgets.hub_words import progress_words, size_words
from desktop_app.ui.widgets.layouts import add_items, button, note_label, progress_bar, scroll_area

TASK_KIND = "hub-download"  # the background runner's kind: one download at a time, the others wait their turn
STATE_WORDS = {"queued": "waiting its turn", "downloading": "downloading", "cancelled": "cancelled",
               "failed": "stopped by an error", "done": "downloaded"}
URL = re.compile(r"https?://[^\s<>\"')]+[^\s<>\"').,;:]")


@dataclass(frozen=True)
class DownloadRequest:
    """One file set of one repository, as the person chose it in the view."""

    repo_id: str
    label: str  # the file set's name: "Safetensors (full precision)", "Q4_K_M"
    patterns: tuple[str, ...]  # the engine's allow_patterns for exactly this set
    size: int = 0  # bytes, as the details said
    revision: str | None = None  # the commit the details were read from: a resume pulls the same files


def pull_job(request: DownloadRequest, controls: Controls) -> Iterator[Event]:
    """Runs in the worker thread: the engine's pull of one request (huggingface_hub is imported there)."""

    yield from pull(request.repo_id, list(request.patterns) or None, revision=request.revision, controls=controls)


def linked(text: str) -> str:
    """`text` escaped for a rich-text label, its web addresses made into links (a gated model's licence page)."""
    out, last = [], 0
    for match in URL.finditer(text):
        out.append(html.escape(text[last:match.start()]))
        url = match.group(0)
        out.append(f"<a href='{html.escape(url)}'>{html.escape(url)}</a>")
        last = match.end()
    out.append(html.escape(text[last:]))
    return "".join(out)


class DownloadRow(QFrame):
    """One model's download: its name, where it stands in words, a progress bar and what can be done now."""

    def __init__(self, request: DownloadRequest, parent: QWidget | None = None):
        super().__init__(parent)
        self.request = request
        self.state = "queued"  # queued, downloading, cancelled, failed, done
        self.folder = ""  # where it is once done: the snapshot folder, or the .gguf file
        self.message = ""  # the engine's sentence of the last failure
        self.setObjectName("downloadRow")
        self.setFrameShape(QFrame.Shape.StyledPanel)
        title = QLabel(f"<b>{html.escape(request.repo_id)}</b> · {html.escape(request.label)}"
                       + (f" · {size_words(request.size)}" if request.size else ""))
        title.setTextFormat(Qt.TextFormat.RichText)
        self.status = note_label("waiting for the download before it to finish")
        self.status.setObjectName("downloadStatus")
        self.status.setTextFormat(Qt.TextFormat.RichText)
        self.status.setOpenExternalLinks(True)
        self.bar = progress_bar("queued")
        self.bar.setObjectName("downloadBar")
        self.cancel_btn = button("Cancel", "downloadCancel", "Stop this download; what is already fetched stays, "
                                                             "so Resume continues from there")
        self.resume_btn = button("Resume", "downloadResume", "Pull again: huggingface_hub resumes the partly "
                                                             "fetched files from where they stopped")
        self.chat_btn = button("Chat with it", "downloadChat", "Open the Generate tab with this model", primary=True)
        self.finetune_btn = button("Fine-tune it", "downloadFinetune", "Make it the base model on the Train tab")
        buttons = add_items(QHBoxLayout(), (self.bar, 1), self.cancel_btn, self.resume_btn, self.chat_btn,
                            self.finetune_btn, margins=0)
        add_items(QVBoxLayout(self), add_items(QHBoxLayout(), title, (self.status, 1), margins=0), buttons, margins=6)
        self._show_buttons()

    def _show_buttons(self) -> None:
        self.cancel_btn.setVisible(self.state in ("queued", "downloading"))
        self.resume_btn.setVisible(self.state in ("cancelled", "failed"))
        self.resume_btn.setText("Try again" if self.state == "failed" and "lost" not in self.message else "Resume")
        self.chat_btn.setVisible(self.state == "done")
        self.finetune_btn.setVisible(self.state == "done")

    def _set(self, state: str, text: str, *, role: str = "muted") -> None:
        self.state = state
        self.status.setText(text)
        self.status.setProperty("role", role)
        self.status.style().unpolish(self.status)
        self.status.style().polish(self.status)
        self._show_buttons()

    def set_queued(self) -> None:
        self.bar.setFormat("queued")
        self._set("queued", "waiting for the download before it to finish")

    def set_started(self) -> None:
        self.bar.setFormat("starting…")
        self._set("downloading", "checking the files and the free disk space…")

    def show_progress(self, done: int, total: int, speed: float, eta_s: float) -> None:
        if total > 0:
            self.bar.setValue(int(1000 * min(done, total) / total))
            self.bar.setFormat(f"{done / total:.0%}")
        self.status.setText(html.escape(progress_words(done, total, speed, eta_s)))

    def set_done(self, folder: str, verified: bool) -> None:
        self.folder = folder
        self.bar.setValue(1000)
        self.bar.setFormat("downloaded")
        check = "checked against the Hub's hashes" if verified else "not checked against the Hub's hashes"
        self._set("done", f"downloaded, {check}; it is in the Library", role="ok")
        self.bar.setToolTip(folder)

    def set_cancelled(self, done: int, total: int) -> None:
        self.bar.setFormat("cancelled")
        have = f"{size_words(done)} of {size_words(total)} fetched" if total else "cancelled"
        self._set("cancelled", f"cancelled: {have}; Resume continues from there")

    def set_failed(self, message: str) -> None:
        self.message = message
        self.bar.setFormat("stopped by an error")
        self._set("failed", linked(message), role="error")


class DownloadsPanel(QWidget):
    """The queue of downloads, shown as rows; one runs at a time in the background runner, the others wait."""

    chat_requested = Signal(str)  # the downloaded model's folder or .gguf file
    finetune_requested = Signal(str)
    downloaded = Signal(str)
    changed = Signal()  # a row was added or its state changed (queued, downloading, cancelled, failed, done)

    def __init__(self, ctx: AppContext, parent: QWidget | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self.rows: list[DownloadRow] = []
        self.queue: list[DownloadRow] = []
        self.current: DownloadRow | None = None
        self.task: Any = None
        self.empty_note = note_label("Downloads appear here, one under another. Nothing is downloaded until you "
                                     "press Download.")
        self.list_widget = QWidget()
        self.list_layout = add_items(QVBoxLayout(self.list_widget), self.empty_note, margins=0)
        self.list_layout.addStretch(1)
        self.area = scroll_area(self.list_widget)
        self.area.setObjectName("downloadsArea")
        add_items(QVBoxLayout(self), (self.area, 1), margins=0)

    def busy(self) -> bool:
        """True while a download runs or waits its turn."""
        return self.current is not None or bool(self.queue)

    def row_for(self, repo_id: str, label: str) -> DownloadRow | None:
        return next((r for r in self.rows if (r.request.repo_id, r.request.label) == (repo_id, label)), None)

    def enqueue(self, request: DownloadRequest) -> DownloadRow:
        """Add a download (the same model's row again when it was cancelled, failed or done: pulling again
        resumes it or checks it); it starts when the one before it ends."""
        row = self.row_for(request.repo_id, request.label)
        if row is not None and row.state in ("queued", "downloading"):
            return row
        if row is None:
            row = DownloadRow(request)
            row.cancel_btn.clicked.connect(lambda _=False, r=row: self.cancel(r))
            row.resume_btn.clicked.connect(lambda _=False, r=row: self.enqueue(r.request))
            row.chat_btn.clicked.connect(lambda _=False, r=row: self.chat_requested.emit(r.folder))
            row.finetune_btn.clicked.connect(lambda _=False, r=row: self.finetune_requested.emit(r.folder))
            self.rows.append(row)
            self.list_layout.insertWidget(0, row)  # the newest on top
            self.empty_note.setVisible(False)
        row.request = request
        row.set_queued()
        self.queue.append(row)
        self._start_next()
        self.changed.emit()
        return row

    def cancel(self, row: DownloadRow) -> None:
        """Stop a running download (the engine keeps its partial files) or take a waiting one off the queue."""
        if row is self.current and self.task is not None:
            self.task.stop()
            row.status.setText("cancelling…")
        elif row in self.queue:
            self.queue.remove(row)
            row.set_cancelled(0, 0)
            self.changed.emit()

    def _start_next(self) -> None:
        if self.current is not None or not self.queue:
            return
        row = self.queue.pop(0)
        self.current = row
        row.set_started()
        controls = Controls()
        request = row.request
        self.task = self.ctx.runner.start(TASK_KIND, lambda: pull_job(request, controls), controls)
        self.task.produced.connect(lambda item, r=row: self._on_item(r, item))
        self.task.failed.connect(lambda message, details, r=row: self._on_failed(r, message, details))
        self.task.finished.connect(lambda r=row: self._on_finished(r))

    def _on_item(self, row: DownloadRow, item: object) -> None:
        if isinstance(item, DownloadProgress):
            row.show_progress(item.done, item.total, item.speed, item.eta_s)
        elif isinstance(item, DownloadFinished):
            row.set_done(item.folder, item.verified)
            self.ctx.info(f"Downloaded {row.request.repo_id}: it is listed in the Library")
            self.ctx.workspace_items_changed.emit()  # the Library, the model lists and the base pickers list it
            self.downloaded.emit(row.folder)
            self.changed.emit()
        elif isinstance(item, DownloadCancelled):
            row.set_cancelled(item.done, item.total)
            self.changed.emit()
        elif isinstance(item, Log):
            self.ctx.info(item.message)

    def _on_failed(self, row: DownloadRow, message: str, details: str) -> None:
        row.set_failed(message)
        self.changed.emit()
        self.ctx.report_error(message, details, title="Download failed")

    def _on_finished(self, row: DownloadRow) -> None:
        if row.state == "downloading":  # ended without saying how (stopped before its first file)
            row.set_cancelled(0, 0)
        self.current = None
        self.task = None
        self._start_next()
        self.changed.emit()
