"""The Get-a-model view fits a 1366x768 laptop and is usable at 1024x700: sized to the screen's free area, no field
squashed or cut off where no scroll bar reaches it, the results and file lists with rows in sight, the Download
button in sight without scrolling, and a download row with an error sentence laid out whole."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint, QRect
from PySide6.QtGui import QScreen
from PySide6.QtWidgets import QApplication
from test_geometry import clipped_fields, short_lists, themed  # noqa: F401 - themed is a fixture
from test_get_model import GATED, WAIT, hub_busy, open_repo, search

from desktop_app.ui.widgets.get_model_view import GetModelView
from desktop_app.ui.window_size import FRAME_ROOM

TASK_BAR = 40  # what a laptop's task bar takes of the screen's height


@pytest.mark.parametrize("size", [(1366, 768), (1024, 700)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_view_fits_a_small_screen(themed, window, hub_server, qtbot, monkeypatch, size):  # noqa: F811
    free = QRect(0, 0, size[0], size[1] - TASK_BAR)
    monkeypatch.setattr(QScreen, "availableGeometry", lambda _self: QRect(free))
    window.library_tab.get_model_btn.click()
    view = window.findChild(GetModelView)
    qtbot.waitExposed(view)
    qtbot.waitUntil(lambda: not hub_busy(window), timeout=WAIT)
    frame = view.frameGeometry()  # the window manager's frame as far as it is known, else FRAME_ROOM's guess
    room = (frame.width() - view.width(), frame.height() - view.height()) if frame.height() > view.height() \
        else FRAME_ROOM
    assert view.width() + room[0] <= free.width() and view.height() + room[1] <= free.height()
    search(view, qtbot, "tiny")
    open_repo(view, qtbot, GATED)
    row = view.download()
    qtbot.waitUntil(lambda: row.state == "failed", timeout=WAIT)  # the longest text a row shows: the gated sentence
    for _ in range(3):
        QApplication.processEvents()
    assert clipped_fields(view) == []
    assert short_lists(view) == []
    button = view.download_btn  # in sight, under the details that scroll
    assert button.isVisibleTo(view) and view.rect().contains(button.mapTo(view, QPoint(0, button.height() - 1)))
    assert view.results_table.columnWidth(0) >= view.results_table.fontMetrics().horizontalAdvance("tiny-org/")
    assert row.resume_btn.isVisibleTo(row) and row.status.wordWrap()
