"""The main window's size when it opens: its preferred size, made to fit the screen it opens on.

A 1366x768 laptop keeps about 728 pixels under its task bar; a window as tall as the screen would hide its own
status bar behind it. `fitted_size` decides (no Qt, tested directly); `fit_to_screen` applies it to a window.
"""

from __future__ import annotations

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QWidget

PREFERRED_SIZE = (1240, 800)  # room for every tab's columns side by side when the screen has it
FRAME_ROOM = (16, 40)  # the window manager's borders and title bar, unknown until the window is shown


def fitted_size(available: tuple[int, int], preferred: tuple[int, int] = PREFERRED_SIZE,
                frame: tuple[int, int] = FRAME_ROOM) -> tuple[int, int]:
    """The window's inner size: `preferred`, made smaller where the screen's `available` area (its size less
    task bars and docks) minus the window's `frame` has less room; never under one pixel."""
    return (max(1, min(preferred[0], available[0] - frame[0])), max(1, min(preferred[1], available[1] - frame[1])))


def fit_to_screen(window: QWidget, *, center: bool) -> None:
    """Shrink `window` to fit the available area of the screen it opens on (a saved size from a bigger monitor
    too), and with `center` place it in the middle of that area. A maximized or full-screen window is left as is."""
    if window.isMaximized() or window.isFullScreen():
        return
    # a restored window's own screen (it may be a second monitor), else the one Qt opens it on
    screen = QGuiApplication.screenAt(window.geometry().center()) or window.screen() or QGuiApplication.primaryScreen()
    if screen is None:
        return
    area = screen.availableGeometry()
    frame = window.frameGeometry().size() - window.size()
    room = (frame.width(), frame.height()) if window.isVisible() and frame.height() > 0 else FRAME_ROOM
    width, height = fitted_size((area.width(), area.height()), (window.width(), window.height()), room)
    window.resize(width, height)
    if center:
        window.move(area.x() + max(0, (area.width() - window.width() - room[0]) // 2),
                    area.y() + max(0, (area.height() - window.height() - room[1]) // 2))
