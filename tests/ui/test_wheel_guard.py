"""The mouse wheel scrolls a form; it changes a setting only in a field the person focused (issue: LoRA rank 8 became
6 and alpha 16 became 17 while the Train form was scrolled)."""

from __future__ import annotations

from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication, QComboBox, QFormLayout, QScrollArea, QSpinBox, QWidget


def wheel(widget: QWidget, notches: int = -1) -> None:
    """A real wheel turn over the middle of `widget` (down for negative notches), through the application."""
    centre = QPointF(widget.rect().center())
    event = QWheelEvent(centre, QPointF(widget.mapToGlobal(centre.toPoint())), QPoint(0, 0),
                        QPoint(0, 120 * notches), Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier,
                        Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(widget, event)


def test_the_wheel_scrolls_the_form_and_leaves_unfocused_fields_alone(window, qtbot):
    area = QScrollArea()
    form = QWidget()
    layout = QFormLayout(form)
    boxes = []
    for i in range(40):
        box = QSpinBox()
        box.setRange(0, 100)
        box.setValue(8)
        layout.addRow(f"field {i}", box)
        boxes.append(box)
    combo = QComboBox()
    combo.addItems(["lora", "qlora", "none"])
    layout.addRow("adapter", combo)
    area.setWidget(form)
    area.resize(300, 200)
    qtbot.addWidget(area)
    area.show()
    qtbot.waitExposed(area)
    bar = area.verticalScrollBar()
    assert bar.maximum() > 0 and bar.value() == 0
    qtbot.waitUntil(lambda: all(b.focusPolicy() == Qt.FocusPolicy.StrongFocus for b in boxes), timeout=3000)
    wheel(boxes[1])
    assert boxes[1].value() == 8 and bar.value() > 0  # scrolled, not changed
    assert not boxes[1].hasFocus() and boxes[1].focusPolicy() == Qt.FocusPolicy.StrongFocus
    wheel(combo)
    assert combo.currentText() == "lora"
    boxes[2].setFocus()
    qtbot.waitUntil(boxes[2].hasFocus)
    wheel(boxes[2], notches=1)
    assert boxes[2].value() == 9  # the field the person chose takes the wheel


def test_the_train_forms_fields_ignore_the_wheel_until_focused(window, qtbot):
    window.tabs.setCurrentWidget(window.train_tab)
    spins = [w for w in window.train_tab.findChildren(QSpinBox) if w.isVisibleTo(window.train_tab)]
    assert spins
    box = spins[0]
    before = box.value()
    wheel(box, notches=3)
    assert box.value() == before and box.focusPolicy() == Qt.FocusPolicy.StrongFocus
