"""The Generate tab's chat: one bubble per message (system, you, the model), each with Copy; the model's last reply
with Regenerate, your messages with Edit; and the input box (Enter sends, Shift+Enter starts a new line; the chat and
text completion each keep their own draft). Each reply names the model that wrote it; a line ("model: NAME") above a
reply marks where the conversation changed model. Regenerate keeps the replies it replaces: ‹ 1/2 › goes through
them, and the one shown is the one the conversation goes on from.

A reply streams into its bubble: text is buffered and appended at the end of the bubble's document on a ~30 ms
timer (never re-set whole), as the other stream views do. Nothing here generates: the tab sends, this shows.
"""

from __future__ import annotations

import html

from PySide6.QtCore import QSize, Qt, QTimer, Signal
from PySide6.QtGui import QKeyEvent, QTextCursor
from PySide6.QtWidgets import (
    QApplication,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QScrollArea,
    QSizePolicy,
    QTextEdit,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

ROLE_NAMES = {"system": "System", "user": "You", "assistant": "Model"}


class MessageText(QTextEdit):
    """A message's read-only text, as tall as its content (the chat scrolls, not the bubble)."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.setReadOnly(True)
        self.setAcceptRichText(False)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setStyleSheet("QTextEdit { background: transparent; border: none; padding: 0; }")
        self.document().setDocumentMargin(2)
        self.document().documentLayout().documentSizeChanged.connect(lambda _s: self._fit())
        self._fit()

    def _fit(self) -> None:
        height = int(self.document().size().height()) + 4
        if height != self.height():
            self.setFixedHeight(max(height, self.fontMetrics().height() + 8))

    def resizeEvent(self, event) -> None:
        super().resizeEvent(event)
        self.document().setTextWidth(self.viewport().width())
        self._fit()

    def append(self, text: str) -> None:  # type: ignore[override]
        cursor = QTextCursor(self.document())
        cursor.movePosition(QTextCursor.MoveOperation.End)
        cursor.insertText(text)


class Bubble(QFrame):
    """One message: who, the text, a note under it (how the reply ended) and its actions."""

    copy_requested = Signal(object)
    regenerate_requested = Signal()
    edit_requested = Signal(object)
    alternative_chosen = Signal(object)  # this bubble, now showing another of its replies

    def __init__(self, role: str, text: str = "", parent: QWidget | None = None):
        super().__init__(parent)
        self.role = role
        self.in_history = False  # part of the conversation the next turn sends (not a failed turn's leftovers)
        self.model: tuple[str, str] | None = None  # (path, name) of the model that wrote this reply
        self.line = ""  # the line shown above the bubble ("model: NAME" where the model changed)
        self.setProperty("bubble", role)
        self.setObjectName(f"bubble_{role}")
        self.who = QLabel(f"<b>{ROLE_NAMES.get(role, role)}</b>")
        self.copy_btn = self._tool("Copy", "Copy this message")
        self.edit_btn = self._tool("Edit", "Put this message back in the box to change it (the chat after it is "
                                           "forgotten)")
        self.regen_btn = self._tool("Regenerate", "Ask the model again for this reply")
        self.edit_btn.setVisible(role == "user")
        self.regen_btn.setVisible(False)
        # Replies Regenerate replaced, kept: (text, note, model); `shown` is the one on screen.
        self.alternatives: list[tuple[str, str, tuple[str, str] | None]] = []
        self.shown = 0
        self.prev_btn = self._tool("‹", "The reply before this one")
        self.next_btn = self._tool("›", "The next reply")
        self.count_label = QLabel("")
        self.count_label.setProperty("role", "muted")
        head = QHBoxLayout()
        head.setContentsMargins(0, 0, 0, 0)
        head.addWidget(self.who)
        head.addStretch(1)
        for b in (self.prev_btn, self.count_label, self.next_btn, self.edit_btn, self.regen_btn, self.copy_btn):
            head.addWidget(b)
        self.body = MessageText()
        self.body.setObjectName("bubbleText")
        if text:
            self.body.setPlainText(text)
        self.note = QLabel("")
        self.note.setProperty("role", "muted")
        self.note.setWordWrap(True)
        self.note.setVisible(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(10, 6, 10, 6)
        layout.setSpacing(2)
        layout.addLayout(head)
        layout.addWidget(self.body)
        layout.addWidget(self.note)
        self._pending: list[str] = []
        self.copy_btn.clicked.connect(lambda _=False: self.copy_requested.emit(self))
        self.edit_btn.clicked.connect(lambda _=False: self.edit_requested.emit(self))
        self.regen_btn.clicked.connect(lambda _=False: self.regenerate_requested.emit())
        self.prev_btn.clicked.connect(lambda _=False: self.show_alternative(self.shown - 1))
        self.next_btn.clicked.connect(lambda _=False: self.show_alternative(self.shown + 1))
        self._sync_alternatives()

    def _tool(self, text: str, tip: str) -> QToolButton:
        button = QToolButton()
        button.setText(text)
        button.setToolTip(tip)
        button.setProperty("flat", True)
        button.setAutoRaise(True)
        button.setCursor(Qt.CursorShape.PointingHandCursor)
        return button

    def text(self) -> str:
        return self.body.toPlainText() + "".join(self._pending)

    def buffer(self, text: str) -> None:
        self._pending.append(text)

    def flush(self) -> bool:
        if not self._pending:
            return False
        chunk = "".join(self._pending)
        self._pending.clear()
        self.body.append(chunk)
        return True

    def set_note(self, text: str) -> None:
        self.note.setText(text)
        self.note.setVisible(bool(text))

    # --- the replies Regenerate gave -----------------------------------------------------------------------
    def keep(self) -> None:
        """Keep the reply shown as one of this bubble's replies (when it ended)."""
        self.flush()
        reply = (self.text(), self.note.text(), self.model)
        if self.alternatives and self.shown < len(self.alternatives) and self.alternatives[self.shown][0] == reply[0]:
            return
        self.alternatives.append(reply)
        self.shown = len(self.alternatives) - 1
        self._sync_alternatives()

    def start_over(self) -> None:
        """Empty the bubble for a new reply (Regenerate); the kept ones stay a click away."""
        self.keep()
        self.body.clear()
        self.set_note("")
        self.shown = len(self.alternatives)
        self.count_label.setText(f"{self.shown + 1}/{self.shown + 1}")
        self.prev_btn.setEnabled(False)

    def show_alternative(self, index: int) -> None:
        """Show reply `index` of the kept ones (‹ ›); says so through alternative_chosen."""
        if not 0 <= index < len(self.alternatives) or index == self.shown:
            return
        self.shown = index
        text, note, model = self.alternatives[index]
        self.body.setPlainText(text)
        self.set_note(note)
        if model is not None:
            self.set_author(*model)
        self._sync_alternatives()
        self.alternative_chosen.emit(self)

    def set_choosable(self, on: bool) -> None:
        """Only the last reply of the conversation can change (an earlier one has a chat that followed it)."""
        self.prev_btn.setEnabled(on and self.shown > 0)
        self.next_btn.setEnabled(on and self.shown < len(self.alternatives) - 1)

    def _sync_alternatives(self) -> None:
        several = len(self.alternatives) > 1
        for widget in (self.prev_btn, self.count_label, self.next_btn):
            widget.setVisible(several)
        self.count_label.setText(f"{self.shown + 1}/{len(self.alternatives)}")
        self.set_choosable(not self.regen_btn.isHidden())

    def set_author(self, path: str, name: str) -> None:
        """The model that wrote this reply: named in the bubble's head, its path in the tooltip."""
        self.model = (path, name)
        self.who.setText(f"<b>{ROLE_NAMES.get(self.role, self.role)}</b> · {html.escape(name)}")
        self.who.setToolTip(path)


class ChatView(QScrollArea):
    """The conversation as bubbles, newest at the bottom (followed while you are at the bottom)."""

    copy_requested = Signal(str)
    regenerate_requested = Signal()
    edit_requested = Signal(int)  # index of the message (in `bubbles`) to edit from
    alternative_chosen = Signal(str)  # the last reply now shows this one of its replies

    def __init__(self, parent: QWidget | None = None, interval_ms: int = 30):
        super().__init__(parent)
        self.setObjectName("chatView")
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.inner = QWidget()
        self.column = QVBoxLayout(self.inner)
        self.column.setContentsMargins(6, 6, 6, 6)
        self.column.setSpacing(8)
        self.placeholder = QLabel("Type a message below and press Enter. Shift+Enter starts a new line.")
        self.placeholder.setProperty("role", "muted")
        self.placeholder.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.column.addWidget(self.placeholder)
        self.column.addStretch(1)
        self.setWidget(self.inner)
        self.bubbles: list[Bubble] = []
        self.flushes = 0
        # Follow the newest text while the view is at its bottom; scrolled up to read, it stays where it is.
        self._follow = True
        bar = self.verticalScrollBar()
        bar.valueChanged.connect(lambda value: setattr(self, "_follow", value >= bar.maximum() - 8))
        bar.rangeChanged.connect(lambda _low, high: bar.setValue(high) if self._follow else None)
        self._timer = QTimer(self)
        self._timer.setObjectName("azr-chat-flush")
        self._timer.setInterval(interval_ms)
        self._timer.timeout.connect(self.flush)

    # --- messages ---
    def add(self, role: str, text: str = "", line: str = "") -> Bubble:
        """A new message at the bottom; `line` (when given) is shown above it, across the chat."""
        bubble = Bubble(role, text)
        bubble.line = line
        bubble.copy_requested.connect(lambda b: self.copy_requested.emit(b.text()))
        bubble.regenerate_requested.connect(self.regenerate_requested)
        bubble.edit_requested.connect(lambda b: self.edit_requested.emit(self.bubbles.index(b)))
        bubble.alternative_chosen.connect(lambda b: (self.refresh_line(b), self.alternative_chosen.emit(b.text())))
        row = QHBoxLayout()
        if role == "user":  # yours on the right, the model's on the left: who said what at a glance
            row.addStretch(1)
            row.addWidget(bubble, 6)
        else:
            row.addWidget(bubble, 6)
            row.addStretch(1)
        holder = QWidget()
        stack = QVBoxLayout(holder)
        stack.setContentsMargins(0, 0, 0, 0)
        if line:
            marker = QLabel(html.escape(line))
            marker.setObjectName("modelLine")
            marker.setProperty("role", "muted")
            marker.setAlignment(Qt.AlignmentFlag.AlignCenter)
            stack.addWidget(marker)
        stack.addLayout(row)
        row.setContentsMargins(0, 0, 0, 0)
        self.column.insertWidget(self.column.count() - 1, holder)
        self.bubbles.append(bubble)
        self.placeholder.setVisible(False)
        QTimer.singleShot(0, self._to_bottom)
        return bubble

    def refresh_line(self, bubble: Bubble) -> None:
        """The line above a reply that changed in place (Regenerate, ‹ ›): "model: NAME" when the reply before it came
        from another model, else none."""
        index = self.bubbles.index(bubble)
        before = next((b for b in reversed(self.bubbles[:index]) if b.role == "assistant" and b.in_history), None)
        bubble.line = f"model: {bubble.model[1]}" if before is not None and bubble.model is not None \
            and before.model != bubble.model else ""
        holder = bubble.parentWidget()
        marker = holder.findChild(QLabel, "modelLine")
        if marker is None and bubble.line:
            marker = QLabel()
            marker.setObjectName("modelLine")
            marker.setProperty("role", "muted")
            marker.setAlignment(Qt.AlignmentFlag.AlignCenter)
            holder.layout().insertWidget(0, marker)
        if marker is not None:
            marker.setText(html.escape(bubble.line))
            marker.setVisible(bool(bubble.line))

    def remove_from(self, index: int) -> None:
        """Forget the bubbles from `index` on (edit, regenerate)."""
        for bubble in self.bubbles[index:]:
            holder = bubble.parentWidget()
            self.column.removeWidget(holder)
            holder.hide()
            holder.deleteLater()
        del self.bubbles[index:]
        self.placeholder.setVisible(not self.bubbles)

    def clear(self) -> None:
        self.flush()
        self.remove_from(0)

    def last(self, role: str | None = None) -> Bubble | None:
        found = [b for b in self.bubbles if role is None or b.role == role]
        return found[-1] if found else None

    def set_regenerable(self, bubble: Bubble | None) -> None:
        """Only the model's last reply offers Regenerate, and ‹ › through the replies it gave."""
        for b in self.bubbles:
            b.regen_btn.setVisible(b is bubble)
            b.set_choosable(b is bubble)

    def set_editable(self, on: bool) -> None:
        """While a reply streams, nothing can be edited or regenerated."""
        for b in self.bubbles:
            b.edit_btn.setEnabled(on)
            b.regen_btn.setEnabled(on)
            if not on:
                b.set_choosable(False)

    # --- streaming ---
    def stream(self, bubble: Bubble, text: str) -> None:
        if text:
            bubble.buffer(text)
            if not self._timer.isActive():
                self._timer.start()

    def flush(self) -> None:
        wrote = [b.flush() for b in self.bubbles]
        if not any(wrote):
            self._timer.stop()
            return
        self.flushes += 1

    def _to_bottom(self) -> None:
        self._follow = True
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    def text(self) -> str:
        """The conversation as plain text ("You: ...", "Model: ..."; a change of model as its own line "model: NAME"),
        as Copy chat gives it."""
        parts: list[str] = []
        for b in self.bubbles:
            if b.line:
                parts.append(b.line)
            parts.append(f"{ROLE_NAMES.get(b.role, b.role)}: {b.text()}")
        return "\n\n".join(parts)

    def lines(self) -> list[str]:
        """The lines shown between messages (each change of model), in order."""
        return [b.line for b in self.bubbles if b.line]

    def stop_timers(self) -> None:
        self.flush()
        self._timer.stop()


class ChatInput(QPlainTextEdit):
    """The message box: Enter sends, Shift+Enter starts a new line (Ctrl+Enter sends too)."""

    submitted = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.send_on_enter = True  # chat; a text completion sends on Ctrl+Enter only (a prompt may span lines)
        self.setTabChangesFocus(True)
        self.use = "chat"
        self.drafts: dict[str, str] = {}

    def use_for(self, use: str) -> None:
        """The box now serves `use` (chat, completion): what was typed for the other stays its own draft, so a
        completion's prompt is never sent in front of a chat message."""
        if use == self.use:
            return
        self.drafts[self.use] = self.toPlainText()
        self.use = use
        self.setPlainText(self.drafts.pop(use, ""))

    def keyPressEvent(self, event: QKeyEvent) -> None:
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
            mods = event.modifiers()
            if mods & Qt.KeyboardModifier.ControlModifier or (
                    self.send_on_enter and not mods & Qt.KeyboardModifier.ShiftModifier):
                self.submitted.emit()
                event.accept()
                return
            if mods & Qt.KeyboardModifier.ShiftModifier:  # a plain new line (Qt would insert a line separator)
                self.insertPlainText("\n")
                event.accept()
                return
        super().keyPressEvent(event)

    def sizeHint(self) -> QSize:
        return QSize(super().sizeHint().width(), self.fontMetrics().height() * 3 + 16)


def copy_text(text: str) -> None:
    QApplication.clipboard().setText(text)
