"""The window fits the screen it opens on, and every tab is usable in a small window (1366x768 and 1024x700): no
field squashed under its minimum size or cut off where no scroll bar reaches it, lists with at least three rows in
sight, and the Library's Size column in view. Checked with the app's theme, as the app shows the window (the bare
test style pads nothing: fields there are smaller than anyone sees them)."""

from __future__ import annotations

import pytest
from PySide6.QtCore import QByteArray, QPoint, QRect, QSize, Qt
from PySide6.QtGui import QPalette, QScreen
from PySide6.QtWidgets import (
    QAbstractItemView,
    QAbstractScrollArea,
    QAbstractSpinBox,
    QApplication,
    QCheckBox,
    QComboBox,
    QHeaderView,
    QLineEdit,
    QPushButton,
    QTableView,
    QWidget,
)

from desktop_app.ui.window_size import FRAME_ROOM, PREFERRED_SIZE, fitted_size

SIZES = [(1366, 768), (1024, 700)]
FIELDS = (QAbstractSpinBox, QLineEdit, QComboBox, QPushButton, QCheckBox)
TABS = ["model_tab", "data_tab", "train_tab", "generate_tab", "library_tab"]


# --- the first size ---
def test_the_preferred_size_is_kept_on_a_big_screen():
    assert fitted_size((1920, 1080)) == PREFERRED_SIZE


@pytest.mark.parametrize("available", [(1366, 768), (1366, 728), (1280, 720), (1024, 700)])
def test_the_first_size_leaves_room_for_the_frame_and_task_bar(available):
    width, height = fitted_size(available)
    assert width + FRAME_ROOM[0] <= available[0] and height + FRAME_ROOM[1] <= available[1]
    assert (width, height) == (min(PREFERRED_SIZE[0], available[0] - FRAME_ROOM[0]),
                               min(PREFERRED_SIZE[1], available[1] - FRAME_ROOM[1]))


def test_a_screen_that_reports_no_room_still_gets_a_window():
    assert fitted_size((0, 0)) == (1, 1) and fitted_size((-5, 300), frame=(0, 0)) == (1, 300)


def _open_window(qtbot, workspace, settings):
    from desktop_app.ui.main_window import MainWindow

    win = MainWindow(workspace, settings=settings, preload=False)
    win.ctx.dialogs_enabled = False
    qtbot.addWidget(win)
    return win


def test_a_new_window_opens_inside_a_1366_by_768_screen(qtbot, workspace, settings, monkeypatch):
    screen = QRect(0, 0, 1366, 768)
    monkeypatch.setattr(QScreen, "availableGeometry", lambda _self: QRect(screen))
    win = _open_window(qtbot, workspace, settings)
    assert win.width() + FRAME_ROOM[0] <= screen.width() and win.height() + FRAME_ROOM[1] <= screen.height()
    assert win.height() < PREFERRED_SIZE[1]  # 800 was taller than the screen: the status bar was out of sight
    outer = QRect(win.pos(), QSize(win.width() + FRAME_ROOM[0], win.height() + FRAME_ROOM[1]))
    assert screen.contains(outer)  # placed inside the screen, frame included
    win.show()
    qtbot.waitExposed(win)
    bar = win.statusBar()
    assert bar.isVisible() and bar.mapTo(win, QPoint(0, bar.height())).y() <= win.height()
    win.shutdown()


def test_a_size_saved_on_a_bigger_monitor_is_made_to_fit(qtbot, workspace, settings, monkeypatch):
    screen = QRect(0, 0, 2560, 1440)
    monkeypatch.setattr(QScreen, "availableGeometry", lambda _self: QRect(screen))
    big = _open_window(qtbot, workspace, settings)
    big.resize(1900, 1150)
    big.save_settings()
    big.shutdown()
    screen.setRect(0, 0, 1366, 728)  # a laptop, its task bar taking 40 pixels
    win = _open_window(qtbot, workspace, settings)
    assert win.width() + FRAME_ROOM[0] <= 1366 and win.height() + FRAME_ROOM[1] <= 728
    win.shutdown()


def test_a_damaged_saved_size_opens_the_window_at_the_fitted_size(qtbot, workspace, settings, monkeypatch):
    monkeypatch.setattr(QScreen, "availableGeometry", lambda _self: QRect(0, 0, 1366, 768))
    settings.setValue("geometry", QByteArray(b"not a saved geometry"))
    win = _open_window(qtbot, workspace, settings)
    assert (win.width(), win.height()) == fitted_size((1366, 768)) and not win.ctx.errors
    win.shutdown()


# --- every tab in a small window ---
@pytest.fixture
def themed(qapp):
    """The app's theme (style, colours, paddings) for one test; the bare test style is restored after it."""
    from desktop_app.ui.theme import apply_theme

    style, palette, sheet = qapp.style().name(), QPalette(qapp.palette()), qapp.styleSheet()
    apply_theme(qapp)
    yield qapp
    qapp.setStyleSheet(sheet)
    qapp.setPalette(palette)
    qapp.setStyle(style)


def _scrollable(area: QAbstractScrollArea, vertical: bool) -> bool:
    bar, policy = ((area.verticalScrollBar(), area.verticalScrollBarPolicy()) if vertical else
                   (area.horizontalScrollBar(), area.horizontalScrollBarPolicy()))
    return policy != Qt.ScrollBarPolicy.ScrollBarAlwaysOff and bar.maximum() > 0


def hidden_by(field: QWidget, tab: QWidget) -> str:
    """What cuts `field` off, "" when nothing does: a parent it overflows, or a scroll area that cannot scroll to
    it (its scroll bar is off that way, or the field is larger than the area's view)."""
    rect = QRect(field.mapTo(tab, QPoint(0, 0)), field.size())
    parent = field.parentWidget()
    while parent is not None:
        clip = QRect(parent.mapTo(tab, QPoint(0, 0)), parent.size())
        area = parent.parentWidget()
        if isinstance(area, QAbstractScrollArea) and parent is area.viewport():
            side = rect.left() < clip.left() or rect.right() > clip.right()
            updown = rect.top() < clip.top() or rect.bottom() > clip.bottom()
            if (side and (not _scrollable(area, False) or rect.width() > clip.width())) or \
                    (updown and (not _scrollable(area, True) or rect.height() > clip.height())):
                return f"cut by the scroll area {type(area).__name__} {area.objectName()!r}"
            rect = QRect(clip.topLeft(), rect.size())  # scrolled into view
        elif not clip.contains(rect):
            return f"cut by {type(parent).__name__} {parent.objectName()!r}"
        if parent is tab:
            return ""
        parent = parent.parentWidget()
    return ""


def clipped_fields(tab: QWidget) -> list[str]:
    """The visible fields of `tab` that are smaller than their minimum size hint, or cut off where no scroll bar
    reaches them."""
    out = []
    for field in tab.findChildren(QWidget):
        if not isinstance(field, FIELDS) or not field.isVisibleTo(tab):
            continue
        if isinstance(field.parentWidget(), (QAbstractSpinBox, QComboBox)):
            continue  # a spin box's or combo box's own line edit
        name = f"{type(field).__name__} {field.objectName() or getattr(field, 'text', lambda: '')()!r}"
        hint = field.minimumSizeHint()
        if field.width() < hint.width() or field.height() < hint.height():
            out.append(f"{name} squashed to {field.width()}x{field.height()}, needs {hint.width()}x{hint.height()}")
        elif why := hidden_by(field, tab):
            out.append(f"{name} {why}")
    return out


def short_lists(tab: QWidget, rows: int = 3) -> list[str]:
    """The visible lists, tables and trees of `tab` that show fewer than `rows` rows."""
    out = []
    for view in tab.findChildren(QAbstractItemView):
        if isinstance(view, QHeaderView) or not view.isVisibleTo(tab):
            continue
        model = view.model()
        row = view.sizeHintForRow(0) if model is not None and model.rowCount() else 0
        row = row if row > 0 else view.fontMetrics().height() + 8
        if isinstance(view, QTableView):
            row = max(row, view.verticalHeader().defaultSectionSize())
        if view.viewport().height() < rows * row:
            out.append(f"{type(view).__name__} {view.objectName()!r} shows {view.viewport().height() / row:.1f} rows")
    return out


def _show_at(win, qtbot, size: tuple[int, int], tab: QWidget) -> None:
    """The window at `size` showing `tab`; a tab (any tab) too big for that size fails with every tab's needs."""
    win.resize(*size)
    win.tabs.setCurrentWidget(tab)
    try:
        qtbot.waitUntil(lambda: (win.width(), win.height()) == size, timeout=3000)
    except qtbot.TimeoutError:
        needs = {win.tabs.tabText(i): win.tabs.widget(i).minimumSizeHint().toTuple() for i in range(win.tabs.count())}
        pytest.fail(f"the window cannot be {size[0]}x{size[1]}: it is {win.width()}x{win.height()}, its tabs need at "
                    f"least {needs} plus the menus, tool bar, banner and status bar")


@pytest.fixture
def small_window(themed, window, populated_workspace, qtbot):
    window.ctx.workspace_items_changed.emit()  # a run and a dataset listed: the Library's columns have text
    return window


@pytest.mark.parametrize("tab_name", TABS)
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_every_field_of_a_tab_shows_whole_in_a_small_window(small_window, qtbot, size, tab_name):
    win = small_window
    tab = getattr(win, tab_name)
    _show_at(win, qtbot, size, tab)
    for _ in range(3):  # the tab lays out once shown; the Data tab's plot arrives a moment later
        QApplication.processEvents()
    assert clipped_fields(tab) == []
    assert short_lists(tab) == []


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_the_library_keeps_names_and_size_in_sight(small_window, qtbot, size):
    from desktop_app.ui.tabs.library_tab import NAME, NAME_MIN_CHARS, SIZE

    win = small_window
    lib = win.library_tab
    _show_at(win, qtbot, size, lib)
    QApplication.processEvents()
    tree, header = lib.tree, lib.tree.header()
    assert not header.isSectionHidden(SIZE)
    assert header.sectionViewportPosition(SIZE) + header.sectionSize(SIZE) <= tree.viewport().width()
    assert header.sectionSize(SIZE) >= tree.fontMetrics().horizontalAdvance("999.9 MB")
    assert header.sectionSize(NAME) >= NAME_MIN_CHARS * tree.fontMetrics().averageCharWidth()
    run = win.ctx.workspace.folder("runs") / "tiny-run"
    assert lib.select(str(run))
    item = tree.currentItem()
    assert item.text(SIZE).endswith("B") and item.toolTip(NAME) == str(run)  # the full path, whatever is elided
