"""A checkable push button as wide as its text needs when checked: the theme draws a checked button's text bold
(theme.py, QPushButton:checked), but Qt sizes a style-sheeted button for its plain text, so "Text completion" was
cut to "ext completio" once chosen."""

from __future__ import annotations

from PySide6.QtCore import QSize
from PySide6.QtGui import QFont, QFontMetrics
from PySide6.QtWidgets import QPushButton, QWidget


class ModeButton(QPushButton):
    """A checkable button whose size hints leave room for its text in bold."""

    def __init__(self, text: str, parent: QWidget | None = None):
        super().__init__(text, parent)
        self.setCheckable(True)

    def bold_extra(self) -> int:
        """How much wider the text is in bold than as the button is sized for it (pixels, never below 0)."""
        bold = QFont(self.font())
        bold.setWeight(QFont.Weight.Bold)  # the theme's 600 or anything up to bold
        text = self.text().replace("&&", "&")
        return max(0, QFontMetrics(bold).horizontalAdvance(text) - self.fontMetrics().horizontalAdvance(text))

    def sizeHint(self) -> QSize:
        hint = super().sizeHint()
        return QSize(hint.width() + self.bold_extra(), hint.height())

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        return QSize(hint.width() + self.bold_extra(), hint.height())
