"""Keeping a tab usable in a small window (1024x700): a column of fields that scrolls up and down but is never
cut at the side, and lists that keep a few rows in sight however the window is split."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import QEvent, QObject, QSize, Qt
from PySide6.QtWidgets import QAbstractItemView, QFormLayout, QScrollArea, QTableView, QWidget


class ColumnScroll(QScrollArea):
    """A frameless scroll area for a column of fields: it scrolls vertically when the window is short, and asks
    for its column's minimum width (plus the scroll bar) so that no field is ever cut at the side. `forms` are the
    column's forms (widgets with a QFormLayout) whose fields must keep their width beside their labels."""

    def __init__(self, widget: QWidget, forms: Sequence[QWidget] = (), parent: QWidget | None = None):
        super().__init__(parent)
        self._forms = list(forms)
        self.setWidgetResizable(True)
        self.setFrameShape(QScrollArea.Shape.NoFrame)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setWidget(widget)

    def minimumSizeHint(self) -> QSize:
        hint = super().minimumSizeHint()
        inner = self.widget()
        if inner is None:
            return hint
        margins = inner.layout().contentsMargins() if inner.layout() is not None else None
        sides = margins.left() + margins.right() if margins is not None else 0
        width = max([inner.minimumSizeHint().width()] + [unsquashed_width(f) + sides for f in self._forms])
        width += self.verticalScrollBar().sizeHint().width() + 2 * self.frameWidth()
        return QSize(max(hint.width(), width), hint.height())

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        if watched is self.widget() and event.type() == QEvent.Type.LayoutRequest:
            self.updateGeometry()  # rows shown or hidden: the column's width may have changed
        return super().eventFilter(watched, event)


def unsquashed_width(form: QWidget) -> int:
    """The width at which every shown field of `form`'s QFormLayout gets its minimum width beside its label. The
    layout wraps a row only when that row's own label and field do not fit, but places every field after the
    widest label: a field beside a short label gets squashed in between. 0 for a widget without a form layout."""
    layout = form.layout()
    if not isinstance(layout, QFormLayout):
        return 0
    labels, fields = [0], [0]
    for row in range(layout.rowCount()):
        label = layout.itemAt(row, QFormLayout.ItemRole.LabelRole)
        field = layout.itemAt(row, QFormLayout.ItemRole.FieldRole)
        if label is None or field is None or not layout.isRowVisible(row):
            continue
        labels.append(label.sizeHint().width())
        widget = field.widget()  # its own minimum size hint too: an explicit smaller minimum would still cut it
        fields.append(max(field.minimumSize().width(), widget.minimumSizeHint().width() if widget else 0))
    margins = layout.contentsMargins()
    return max(labels) + max(0, layout.horizontalSpacing()) + max(fields) + margins.left() + margins.right()


def row_height(view: QAbstractItemView) -> int:
    """The height of one row of `view`: its first row's, else a table's default row or a line of text with the
    padding the theme gives items."""
    model = view.model()
    if model is not None and model.rowCount() > 0 and view.sizeHintForRow(0) > 0:
        height = view.sizeHintForRow(0)
    else:
        height = view.fontMetrics().height() + 8
    if isinstance(view, QTableView):
        height = max(height, view.verticalHeader().defaultSectionSize())
    return height


def show_rows(view: QAbstractItemView, rows: int) -> int:
    """Make `view` at least tall enough to show `rows` rows under its header, with room for a horizontal scroll
    bar; returns that minimum height."""
    header = view.horizontalHeader() if isinstance(view, QTableView) else getattr(view, "header", lambda: None)()
    height = rows * row_height(view) + 2 * view.frameWidth()
    if header is not None and not header.isHidden():
        height += header.sizeHint().height()
    if view.horizontalScrollBarPolicy() != Qt.ScrollBarPolicy.ScrollBarAlwaysOff:
        height += view.horizontalScrollBar().sizeHint().height()
    view.setMinimumHeight(height)
    return height


class WrappedHeight(QObject):
    """Keeps a widget's minimum height at what its layout needs at its width, word-wrapped labels included: a
    splitter (and a scroll area's page made of splitters) asks its parts only for their minimum sizes, which count
    a wrapped label on one line, so a narrow window would lay the next part over the label's second line."""

    def __init__(self, widget: QWidget):
        super().__init__(widget)
        widget.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        layout = watched.layout() if isinstance(watched, QWidget) else None
        if event.type() in (QEvent.Type.Resize, QEvent.Type.LayoutRequest) and layout is not None \
                and layout.hasHeightForWidth():  # resized, or a part of it asks for another size (more rows)
            need = max(layout.totalHeightForWidth(watched.width()),  # type: ignore[union-attr]  # a QWidget's
                       layout.totalMinimumSize().height())
            if need != watched.minimumHeight():  # type: ignore[union-attr]
                watched.setMinimumHeight(need)  # type: ignore[union-attr]
        return False
