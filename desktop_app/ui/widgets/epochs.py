"""How many times a run goes over its data: steps × batch over the data's size, shown beside the hyperparameters as
an Epochs field (typing epochs sets the steps) and a warning when the run would learn a small set by heart.

The size of the data is what one step draws from: the prepared dataset's training windows (pretraining), the
records of the data files (SFT, DPO: about one per non-empty line) or the prompts (GRPO, drawn `prompts_per_step`
at a time). Self-play makes its own tasks: no epochs.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QHBoxLayout, QLabel, QVBoxLayout, QWidget

from desktop_app.ui import theme
from desktop_app.ui.widgets.field_editors import FloatBox

MANY_EPOCHS = 10.0  # beyond this a small set is learnt by heart: say so
_COUNT_BYTES = 64 << 20  # lines counted exactly up to this much of a file, then estimated from its size


def dataset_windows(folder: str | Path) -> int:
    """Training windows of a prepared dataset (its manifest's count; 0 when unreadable)."""
    try:
        manifest = json.loads((Path(folder) / "manifest.json").read_text(encoding="utf-8"))
        return int(manifest["splits"]["train"]["chunks"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


def count_records(files: list[str]) -> int:
    """About how many records JSON Lines files hold: their non-empty lines (a big file's count is estimated from
    its first 64 MB). A record training drops for a bad line still counts: an estimate, said as one."""
    total = 0
    for name in files:
        try:
            with open(name, "rb") as fh:
                data = fh.read(_COUNT_BYTES)
                size = fh.seek(0, 2)
        except OSError:
            continue
        lines = sum(1 for line in data.split(b"\n") if line.strip())
        total += lines if size <= len(data) or not data else round(lines * size / len(data))
    return total


class EpochsRow(QWidget):
    """Epochs = steps × items per step / items. Editing it asks for the steps that give it (`steps_wanted`)."""

    steps_wanted = Signal(int)

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent)
        self.items = 0  # what the data holds (windows, records, prompts)
        self.per_step = 0  # how many of them one step takes
        self.what = "records"
        self.steps = 0
        self.box = FloatBox()
        self.box.setObjectName("epochsBox")
        self.box.setRange(0.0, 1e9)
        self.box.setSuffix(" epochs")
        self.box.setToolTip("How many times the run goes over its data (steps × batch ÷ data size). Type a number "
                            "of epochs to set the training steps.")
        self.box.setMinimumWidth(self.box.fontMetrics().horizontalAdvance("1000.5 epochs") + 36)
        self.detail = QLabel("")
        self.detail.setProperty("role", "muted")
        self.detail.setWordWrap(True)
        self.warning = QLabel("")
        self.warning.setObjectName("epochsWarning")
        self.warning.setWordWrap(True)
        self.warning.setStyleSheet(f"color: {theme.WARN};")
        self.warning.setVisible(False)
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        label = QLabel("Epochs")
        label.setToolTip(self.box.toolTip())
        row.addWidget(label)
        row.addWidget(self.box)
        row.addWidget(self.detail, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addLayout(row)
        layout.addWidget(self.warning)
        self.box.valueChanged.connect(self._typed)
        self.setVisible(False)

    @property
    def epochs(self) -> float:
        return self.steps * self.per_step / self.items if self.items else 0.0

    def update_run(self, steps: int, per_step: int, items: int, what: str) -> None:
        """The run's steps, items per step and the data's size; a size of 0 (unknown, or no data) hides the row."""
        self.steps, self.per_step, self.items, self.what = steps, per_step, items, what
        known = items > 0 and per_step > 0
        self.setVisible(known)
        if not known:
            return
        self.box.blockSignals(True)
        self.box.setValue(round(self.epochs, 2))
        self.box.blockSignals(False)
        self.detail.setText(f"over about {items:,} {what}" if what == "records" else f"over {items:,} {what}")
        many = self.epochs > MANY_EPOCHS
        self.warning.setVisible(many)
        if many:
            self.warning.setText(f"⚠ {steps:,} steps × {per_step:,} over {items:,} {what} is about "
                                 f"{self.epochs:,.0f} epochs: the model will learn this data by heart. Use fewer "
                                 "steps (type the epochs you want) or more data.")

    def _typed(self, epochs: float) -> None:
        if self.items and self.per_step:
            self.steps_wanted.emit(max(1, math.ceil(epochs * self.items / self.per_step)))
