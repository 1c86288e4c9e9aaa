"""Small layout builders the tabs and widgets share: each one writes down once a few Qt calls that many places make
in the same way (a frameless scroll area, a splitter with its proportions, a label beside a widget...)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QBoxLayout,
    QComboBox,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLayout,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

LayoutItem = QWidget | QLayout | tuple[QWidget | QLayout, int]  # a tuple: (widget or layout, stretch)
Box = TypeVar("Box", bound=QBoxLayout)


def add_items(layout: Box, *items: LayoutItem, margins: int | None = None) -> Box:
    """Add widgets and layouts to `layout` in order, `(item, stretch)` for a stretch; `margins` sets all four."""
    if margins is not None:
        layout.setContentsMargins(margins, margins, margins, margins)
    for entry in items:
        item, stretch = entry if isinstance(entry, tuple) else (entry, 0)
        if isinstance(item, QLayout):
            layout.addLayout(item, stretch)
        else:
            layout.addWidget(item, stretch)
    return layout


def button(text: str, name: str = "", tip: str = "", *, primary: bool = False, enabled: bool = True) -> QPushButton:
    """A push button with its object name (tests and styles find it), tooltip, primary look and enabled state."""
    btn = QPushButton(text)
    if name:
        btn.setObjectName(name)
    if tip:
        btn.setToolTip(tip)
    if primary:
        btn.setProperty("primary", True)
    if not enabled:
        btn.setEnabled(False)
    return btn


def group_column(title: str, name: str = "") -> tuple[QGroupBox, QVBoxLayout]:
    """A titled group box and its column layout, with the snug margins of the Train tab's groups."""
    box = QGroupBox(title)
    if name:
        box.setObjectName(name)
    layout = QVBoxLayout(box)
    layout.setContentsMargins(8, 6, 8, 8)
    return box, layout


def labeled_row(label: str, widget: QWidget, stretch: int = 1) -> QHBoxLayout:
    """A caption and the widget it names, on one row; the widget takes the width."""
    return add_items(QHBoxLayout(), QLabel(label), (widget, stretch))


def note_label(text: str = "", role: str = "muted", *, wrap: bool = True) -> QLabel:
    """A label styled by the theme's `role` property (muted, error, ok...)."""
    label = QLabel(text)
    label.setProperty("role", role)
    label.setWordWrap(wrap)
    return label


def scroll_area(widget: QWidget, *, vertical_only: bool = True) -> QScrollArea:
    """A frameless scroll area that gives `widget` its width: a long form scrolls instead of growing the window."""
    area = QScrollArea()
    area.setWidgetResizable(True)
    area.setFrameShape(QScrollArea.Shape.NoFrame)
    if vertical_only:
        area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
    area.setWidget(widget)
    return area


def splitter(orientation: Qt.Orientation, widgets: Sequence[QWidget], *, stretch: Sequence[int] = (),
             sizes: Sequence[int] = (), collapsible: bool = True) -> QSplitter:
    """A splitter holding `widgets`, with their stretch factors and first sizes when given."""
    split = QSplitter(orientation)
    for widget in widgets:
        split.addWidget(widget)
    for index, factor in enumerate(stretch):
        split.setStretchFactor(index, factor)
    if sizes:
        split.setSizes(list(sizes))
    if not collapsible:
        split.setChildrenCollapsible(False)
    return split


def path_combo(name: str, min_width: int, min_chars: int) -> QComboBox:
    """A combo box of names or paths that keeps `min_chars` readable without widening the window to the longest."""
    box = QComboBox()
    box.setObjectName(name)
    box.setMinimumWidth(min_width)
    box.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
    box.setMinimumContentsLength(min_chars)
    return box


def progress_bar(text: str) -> QProgressBar:
    """A progress bar in thousandths (smooth for long jobs), empty, showing `text` until work starts."""
    bar = QProgressBar()
    bar.setRange(0, 1000)
    bar.setFormat(text)
    bar.setValue(0)
    return bar
