"""A read-only text view fed token by token: text is buffered and appended on a ~30 ms timer.

Appending at the end (never re-setting the whole document) keeps long outputs cheap; the timer
turns hundreds of tiny deltas per second into a few repaints.
"""

from __future__ import annotations

from PySide6.QtCore import QTimer
from PySide6.QtGui import QColor, QFont, QTextCharFormat, QTextCursor
from PySide6.QtWidgets import QPlainTextEdit, QWidget


class StreamView(QPlainTextEdit):
    def __init__(self, parent: QWidget | None = None, interval_ms: int = 30):
        super().__init__(parent)
        self.setReadOnly(True)
        self.setAcceptDrops(False)
        font = QFont("DejaVu Sans Mono")
        font.setStyleHint(QFont.StyleHint.Monospace)
        self.setFont(font)
        self._pending: list[str] = []
        self._timer = QTimer(self)
        self._timer.setObjectName("azr-stream-flush")
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self.flush)
        self.flushes = 0
        self._prefix = ""

    def set_prefix(self, text: str) -> None:
        """Show `text` (the prompt) greyed before the generated text."""
        self.reset()
        self._prefix = text
        if text:
            fmt = QTextCharFormat()
            fmt.setForeground(QColor("#6b7280"))
            fmt.setFontWeight(600)
            cursor = QTextCursor(self.document())
            cursor.insertText(text, fmt)

    def generated_text(self) -> str:
        return self.text()[len(self._prefix):]

    def append_text(self, text: str) -> None:
        if not text:
            return
        self._pending.append(text)
        if not self._timer.isActive():
            self._timer.start()

    def flush(self) -> None:
        if not self._pending:
            self._timer.stop()
            return
        chunk = "".join(self._pending)
        self._pending.clear()
        bar = self.verticalScrollBar()
        at_bottom = bar.value() >= bar.maximum() - 4
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertText(chunk, QTextCharFormat())
        if at_bottom:
            bar.setValue(bar.maximum())
        self.flushes += 1

    def text(self) -> str:
        return self.toPlainText() + "".join(self._pending)

    def reset(self, text: str = "") -> None:
        self._pending.clear()
        self._timer.stop()
        self._prefix = ""
        self.setPlainText(text)

    def stop_timers(self) -> None:
        self.flush()
        self._timer.stop()
