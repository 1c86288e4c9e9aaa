"""Where the Train tab shows what the engine's preflight found in the settings, without ever moving a field: every
finding in one box of a fixed height above the hyperparameters (it scrolls when there are more), and the label of
the setting it is about in the finding's colour, the message in its tooltip. A finding that comes or goes while
the person types therefore changes colours and text, never the place of a field under the pointer."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QLabel, QScrollArea, QWidget

from desktop_app.engine.train.preflight import ERROR, Finding
from desktop_app.ui import theme

BOX_LINES = 3  # the box's height in lines of text: room for the usual one or two findings
NONE_FOUND = "No problems found with these settings on this machine."


def finding_lines(findings: list[Finding]) -> str:
    """Findings as lines (✗ an error, ⚠ a warning)."""
    return "\n".join(("✗ " if f.level == ERROR else "⚠ ") + f.message for f in findings)


class FindingsBox(QScrollArea):
    """The findings of the settings shown, in a box whose height never changes."""

    def __init__(self, name: str, parent: QWidget | None = None):
        super().__init__(parent)
        self.setObjectName(name)
        self.setFrameShape(QFrame.Shape.NoFrame)
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.label = QLabel(NONE_FOUND)
        self.label.setWordWrap(True)
        self.label.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.setWidget(self.label)
        self.setFixedHeight(self.fontMetrics().lineSpacing() * BOX_LINES + 6)
        self.show_findings([])

    def show_findings(self, findings: list[Finding]) -> None:
        self.label.setText(finding_lines(findings) or NONE_FOUND)
        color = theme.ERROR if any(f.level == ERROR for f in findings) else theme.WARN if findings else theme.MUTED
        self.label.setStyleSheet(f"color: {color};")

    def text(self) -> str:
        """The findings shown ("" when none)."""
        return "" if self.label.text() == NONE_FOUND else self.label.text()


def mark_labels(labels: dict[str, QLabel], findings: list[Finding]) -> None:
    """Each setting's label in the colour of its worst finding (the findings in its tooltip), or as it was."""
    for name, label in labels.items():
        own = [f for f in findings if f.field == name]
        if label.property("plain_tip") is None:
            label.setProperty("plain_tip", label.toolTip())
        plain = str(label.property("plain_tip"))
        worst = "" if not own else ERROR if any(f.level == ERROR for f in own) else "warning"
        label.setProperty("finding", worst)
        label.setStyleSheet("" if not own else f"color: {theme.ERROR if worst == ERROR else theme.WARN};")
        label.setToolTip(finding_lines(own) + ("\n\n" + plain if plain and own else "") if own else plain)
