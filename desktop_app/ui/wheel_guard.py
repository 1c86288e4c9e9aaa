"""The mouse wheel scrolls the form; a setting changes only in a field the person focused.

Qt's default lets a spin box, combo box or slider under the pointer take the wheel (and the focus) while a form is
being scrolled, so LoRA rank 8 became 6 without anyone noticing. One filter on the application, installed with the
main window: those widgets no longer take focus from the wheel (StrongFocus), and a wheel turned over one that has
no focus goes to the scroll area around it instead. Once clicked or tabbed into, the wheel changes it
as before.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import (
    QAbstractScrollArea,
    QAbstractSlider,
    QAbstractSpinBox,
    QApplication,
    QComboBox,
    QScrollBar,
    QWidget,
)

GUARDED = (QAbstractSpinBox, QComboBox, QAbstractSlider)
_installed: list[QObject] = []  # the one filter, kept alive with the application


class WheelGuard(QObject):
    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        kind = event.type()
        if not guarded(watched):
            return False
        if kind == QEvent.Type.Polish and watched.focusPolicy() & Qt.FocusPolicy.WheelFocus == \
                Qt.FocusPolicy.WheelFocus:
            watched.setFocusPolicy(Qt.FocusPolicy.StrongFocus)  # a turn of the wheel gives it no focus
        if kind == QEvent.Type.Wheel and not watched.hasFocus():
            area = _scroll_area_of(watched)
            if area is not None:
                QApplication.sendEvent(area.viewport(), event)  # the form scrolls; the value stays
            return True
        return False


def guarded(widget: QObject) -> bool:
    """A field whose value the wheel would change (a scroll bar is for scrolling: never one)."""
    return isinstance(widget, GUARDED) and not isinstance(widget, QScrollBar)


def _scroll_area_of(widget: QWidget) -> QAbstractScrollArea | None:
    """The nearest scroll area around `widget` (a combo box's own list is not one: it only shows when open)."""
    parent = widget.parentWidget()
    while parent is not None and not isinstance(parent, QAbstractScrollArea):
        parent = parent.parentWidget()
    return parent


def install() -> None:
    """Guard every spin box, combo box and slider of the application (once)."""
    app = QApplication.instance()
    if app is None or _installed:
        return
    guard = WheelGuard(app)
    app.installEventFilter(guard)
    _installed.append(guard)
    for widget in app.allWidgets():  # those made before the guard: polished already
        if guarded(widget) and isinstance(widget, QWidget):
            widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
