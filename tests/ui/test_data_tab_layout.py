"""The Data tab in a 1366x768 window (issue 51): the files list is as tall as its files (up to MOST_FILE_ROWS) and the
tab scrolls as one page, the statistics below it without a scroll box of their own; a validation share that holds
out no document says so under its setting, with how many documents there are and what share holds one out, and no
field moves when that warning comes or goes."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QPoint
from PySide6.QtWidgets import QAbstractScrollArea, QApplication

from desktop_app.engine.events import FileVerdict
from desktop_app.ui.tabs.data_tab import MOST_FILE_ROWS


@pytest.fixture
def data_tab(qapp, window, qtbot):
    """The Data tab of a 1366x768 window in the app's theme (its paddings make the rows as tall as people see)."""
    from desktop_app.ui.theme import apply_theme

    style, sheet = qapp.style().name(), qapp.styleSheet()
    apply_theme(qapp)
    window.resize(1366, 768)
    window.tabs.setCurrentWidget(window.data_tab)
    qtbot.waitUntil(lambda: (window.width(), window.height()) == (1366, 768), timeout=3000)
    yield window.data_tab
    qapp.setStyleSheet(sheet)
    qapp.setStyle(style)


def _list(tab, files: int, documents: int = 40) -> None:
    """`files` usable text files of `documents` documents each, as the scan reports them."""
    for i in range(files):
        tab.set_verdict(FileVerdict(path=f"/books/part{i}.txt", verdict="ok", format="text", encoding="utf-8",
                                    size=12_000, documents=documents, tokens=3_000))
    for _ in range(3):
        QApplication.processEvents()


def _top(widget, tab) -> int:
    return widget.mapTo(tab, QPoint(0, 0)).y()


def test_ten_files_show_all_ten_rows_and_the_tab_scrolls_instead(data_tab):
    tab = data_tab
    _list(tab, 10)
    rows = sum(tab.table.rowHeight(r) for r in range(10))
    assert tab.table.viewport().height() >= rows  # every file in sight, no scrolling inside the list
    assert tab.table.verticalScrollBar().maximum() == 0
    assert _top(tab.table, tab) + tab.table.height() <= _top(tab.summary, tab)  # nothing under the list is covered
    assert tab.page.verticalScrollBar().maximum() > 0  # the tab's own page scrolls to the statistics
    # the statistics have no scroll box of their own: the page is the only scroll area around them
    areas, parent = [], tab.dataset_box.parentWidget()
    while parent is not tab:
        areas += [parent] if isinstance(parent, QAbstractScrollArea) else []
        parent = parent.parentWidget()
    assert areas == [tab.page]
    assert tab.preview.height() >= 150


def test_more_files_than_the_list_fits_scroll_inside_it(data_tab):
    tab = data_tab
    _list(tab, MOST_FILE_ROWS + 8)
    row = tab.table.rowHeight(0)
    assert MOST_FILE_ROWS * row <= tab.table.viewport().height() < (MOST_FILE_ROWS + 1) * row
    assert tab.table.verticalScrollBar().maximum() > 0
    tab.clear_files()
    QApplication.processEvents()
    assert tab.fit_file_rows() == 3 and tab.table.minimumHeight() < MOST_FILE_ROWS * row


def test_a_share_that_holds_out_no_document_is_a_warning_under_it_and_no_field_moves(data_tab):
    tab = data_tab
    label = tab.form.labels["val_fraction"]
    fields = [tab.prepare_btn, tab.progress, tab.form.editors["vocab_size"]]
    before = [_top(f, tab) for f in fields]
    assert tab.split_note.text() == ""  # no files yet
    _list(tab, 3, documents=1)
    tab.form.set_values({"val_fraction": 0.05})
    note = tab.split_note.text()
    assert note.startswith("⚠ No validation loss: 0.05 of 3 documents is 0.15, less than one")
    assert "hold out at least 0.34" in note and "20 or more at 0.05" in note
    assert label.property("finding") == "warning" and "No validation loss" in label.toolTip()
    assert [_top(f, tab) for f in fields] == before
    tab.form.set_values({"val_fraction": 0.34})
    assert tab.split_note.text() == "0.34 of 3 documents holds out about 1 for validation."
    assert label.property("finding") == "" and [_top(f, tab) for f in fields] == before
    _list(tab, 3, documents=40)  # the same files read again, with more documents each
    tab.form.set_values({"val_fraction": 0.05})
    assert tab.split_note.text() == "0.05 of 120 documents holds out about 6 for validation."
