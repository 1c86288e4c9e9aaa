"""Data files of a fine-tuning method: each file checked against what the method reads (chat records, preference
pairs or prompts) and listed with its format, or in red with the reason it cannot be used. Files and folders arrive
by drop or Add files…; a folder brings the JSON / JSONL / NDJSON files and the tables (CSV, TSV, Parquet, Arrow)
inside it, and a `datasets` save_to_disk folder is one data set (`expand_data_paths`). Tables are read through the
column mapping their column names suggest (engine/data/columns.py)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import QAbstractItemView, QListWidget, QListWidgetItem, QWidget

from desktop_app.engine.errors import UserError
from desktop_app.ui import theme
from desktop_app.ui.widgets.drop_zone import PathDropList


def describe_data_file(path: str, data_kind: str, columns: dict[str, str] | None = None) -> tuple[str, str]:
    """(format label, problem) of one data file for a method's data kind (a table read through the column mapping
    `columns`, else the guessed one); problem is "" when usable."""
    from desktop_app.engine.data.tables import is_dataset_folder  # lazy: numpy

    p = Path(path).expanduser()
    if not (p.is_file() or is_dataset_folder(p)):
        return "", f"{p} does not exist" if not p.exists() else f"{p} is not a file"
    if data_kind == "grpo":
        from desktop_app.engine.data.prompt_files import describe_prompt_file  # lazy: start-up

        try:
            return describe_prompt_file(p), ""
        except (UserError, OSError) as exc:
            return "", f"{p.name}: {exc}"
    from desktop_app.engine.finetune.formats import FORMAT_NAMES, detect_format  # lazy: numpy

    try:
        fmt = detect_format(p, columns or None)
    except (UserError, OSError) as exc:
        text = str(exc)
        return "", text if p.name in text else f"{p.name}: {text}"
    label = FORMAT_NAMES.get(fmt, fmt)
    if data_kind == "dpo" and fmt != "preference":
        return label, f"{p.name}: holds {label} records: DPO needs preference pairs (prompt, chosen, rejected)"
    if data_kind == "sft" and fmt == "preference":
        return label, f"{p.name}: holds preference pairs: use it with DPO; SFT needs chat, ShareGPT or Alpaca records"
    return label, ""


def expand_data_paths(paths: list[str]) -> list[str]:
    """Files as given; folders replaced by the data files inside them: the engine's one rule (training reads
    exactly what the list shows), without its checks (a missing path is listed with its problem)."""
    from desktop_app.engine.finetune.formats import expand_data_paths as engine_rule  # lazy: numpy

    return [str(p) for p in engine_rule(paths, check=False)]


def new_data_paths(paths: list[str], have: list[str]) -> list[str]:
    """The data files `paths` bring (folders expanded) that `have` does not list yet, each once, in order."""
    seen = set(have)
    fresh = []
    for path in expand_data_paths(paths):
        if path not in seen:
            seen.add(path)
            fresh.append(path)
    return fresh


class DataFileList(PathDropList):
    """Data files with their detected format (red with the reason when unusable); drop files or folders on it."""

    changed = Signal()

    def __init__(self, parent: QWidget | None = None):
        super().__init__(parent=parent)
        self.setObjectName("dataFileList")
        self.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.setMinimumHeight(74)
        self.setMaximumHeight(130)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        # A verdict wraps at the list's width: cut in the middle it read "holds chat JSONL re…e pairs".
        self.setWordWrap(True)
        self.setTextElideMode(Qt.TextElideMode.ElideNone)
        self.setResizeMode(QListWidget.ResizeMode.Adjust)
        self.data_kind = "sft"
        self.columns: dict[str, str] = {}  # the column mapping of the tables (RunConfig.columns); {} = guessed
        self.problems: dict[str, str] = {}
        self.formats: dict[str, str] = {}

    def files(self) -> list[str]:
        return [self.item(i).data(Qt.ItemDataRole.UserRole) for i in range(self.count())]

    def add_paths(self, paths: list[str]) -> int:
        fresh = new_data_paths(paths, self.files())
        for path in fresh:
            item = QListWidgetItem()
            item.setData(Qt.ItemDataRole.UserRole, path)
            self.addItem(item)
            self._describe(item)
        if fresh:
            self.changed.emit()
        return len(fresh)

    def set_files(self, paths: list[str]) -> None:
        self.clear()
        self.problems.clear()
        self.formats.clear()
        self.blockSignals(True)
        self.add_paths(list(paths))
        self.blockSignals(False)
        self.changed.emit()

    def remove_selected(self) -> None:
        for item in self.selectedItems():
            path = item.data(Qt.ItemDataRole.UserRole)
            self.problems.pop(path, None)
            self.formats.pop(path, None)
            self.takeItem(self.row(item))
        self.changed.emit()

    def set_data_kind(self, kind: str) -> None:
        """Re-check every file against what the method reads (SFT records, preference pairs or prompts)."""
        if kind == self.data_kind:
            return
        self.data_kind = kind
        for i in range(self.count()):
            self._describe(self.item(i))

    def set_columns(self, mapping: dict[str, str]) -> None:
        """A new column mapping for the tables: every file checked again with it."""
        if dict(mapping) == self.columns:
            return
        self.columns = dict(mapping)
        for i in range(self.count()):
            self._describe(self.item(i))
        self.changed.emit()

    def tables(self) -> list[str]:
        """The files that are tables (CSV, TSV, Parquet, Arrow, a datasets folder): what the mapping applies to."""
        from desktop_app.engine.data.tables import table_kind  # lazy: numpy

        return [p for p in self.files() if table_kind(Path(p))]

    def _describe(self, item: QListWidgetItem) -> None:
        path = item.data(Qt.ItemDataRole.UserRole)
        label, problem = describe_data_file(path, self.data_kind, self.columns) if self.data_kind else ("", "")
        name = Path(path).name
        self.formats[path] = label
        if problem:
            self.problems[path] = problem
            item.setText(f"✗ {name} — {short_reason(problem, path)}")
            item.setForeground(_color(theme.ERROR))
            item.setToolTip(f"{path}\n{problem}")
        else:
            self.problems.pop(path, None)
            item.setText(f"{name} — {label}" if label else name)
            item.setForeground(_color(theme.TEXT))
            item.setToolTip(path)

    def paths_dropped_on(self, paths: list[str]) -> None:
        self.add_paths(paths)


def short_reason(problem: str, path: str) -> str:
    """The gist of a file problem for a list row ("unknown data format"); the whole text goes in the tooltip."""
    text = problem
    for prefix in (f"{Path(path).expanduser()}: ", f"{Path(path).name}: "):
        if text.startswith(prefix):
            text = text[len(prefix):]
    if text.endswith("does not exist"):
        return "does not exist"
    gist = text.split("; ")[0]
    if len(gist) > 160:  # a long reason: its first clause (the rest is in the tooltip), never cut mid-word
        gist = gist.split(": ")[0]
    return gist if len(gist) <= 160 else gist[:160].rsplit(" ", 1)[0] + " …"


def _color(name: str) -> QColor:
    return QColor(name)

