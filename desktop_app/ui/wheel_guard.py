"""The mouse wheel scrolls the form; a setting changes only in a field the person focused.

Qt's default lets a spin box, combo box or slider under the pointer take the wheel (and the focus) while a form is
being scrolled, so LoRA rank 8 became 6 without anyone noticing. Each such field of the window gets a filter: it no
longer takes focus from the wheel (StrongFocus), and a wheel turned over it while it has no focus scrolls the scroll
area around it instead. Once clicked or tabbed into, the wheel changes it as before.

The filter sits on the fields themselves, not on the application: a Python filter on the application is called for
every event of every widget and cost the window 0.45 s of its start-up. Fields are found when the window is built,
whenever the focus moves or a tab changes, and every SWEEP_MS (a form rebuilt under a still pointer, e.g. a method's
options after choosing the method, is guarded before a hand reaches the wheel).
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt, QTimer
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
SWEEP_MS = 700
_TAG = "azrWheelGuarded"
_installed: list[WheelGuard] = []  # the one guard, kept alive with the application


class WheelGuard(QObject):
    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if event.type() == QEvent.Type.Wheel and isinstance(watched, QWidget) and not watched.hasFocus():
            area = _scroll_area_of(watched)
            if area is not None:
                QApplication.sendEvent(area.viewport(), event)  # the form scrolls; the value stays
            return True
        return False

    def sweep(self) -> None:
        """Guard every field not guarded yet (new forms, dialogs)."""
        for widget in QApplication.allWidgets():
            if guarded(widget) and not widget.property(_TAG):
                widget.setProperty(_TAG, True)
                widget.setFocusPolicy(Qt.FocusPolicy.StrongFocus)  # a turn of the wheel gives it no focus
                widget.installEventFilter(self)

    def sweep_soon(self, *_args: object) -> None:
        QTimer.singleShot(0, self.sweep)  # after the change that prompted it has built its widgets


def guarded(widget: QObject) -> bool:
    """A field whose value the wheel would change (a scroll bar is for scrolling: never one)."""
    return isinstance(widget, GUARDED) and not isinstance(widget, QScrollBar)


def _scroll_area_of(widget: QWidget) -> QAbstractScrollArea | None:
    """The nearest scroll area around `widget` (a combo box's own list is not one: it only shows when open)."""
    parent = widget.parentWidget()
    while parent is not None and not isinstance(parent, QAbstractScrollArea):
        parent = parent.parentWidget()
    return parent


def install() -> WheelGuard | None:
    """The guard of the application (made once): its fields guarded now, and again as focus moves."""
    app = QApplication.instance()
    if app is None:
        return None
    if not _installed:
        guard = WheelGuard(app)
        app.focusChanged.connect(guard.sweep_soon)
        timer = QTimer(guard)
        timer.timeout.connect(guard.sweep)
        timer.start(SWEEP_MS)
        _installed.append(guard)
    _installed[0].sweep()
    return _installed[0]
