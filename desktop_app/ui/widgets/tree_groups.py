"""The Library's (and the model pickers') tree groups: a bold top-level row titled with its count."""

from __future__ import annotations

from PySide6.QtWidgets import QTreeWidget, QTreeWidgetItem


def group_item(tree: QTreeWidget, title: str, count: int) -> QTreeWidgetItem:
    """A bold "TITLE (COUNT)" row added at the top level of `tree`; its models go under it."""
    top = QTreeWidgetItem([f"{title} ({count})"])
    font = top.font(0)
    font.setBold(True)
    top.setFont(0, font)
    tree.addTopLevelItem(top)
    return top
