"""The Train tab's column mapping for table data (CSV, Parquet, a datasets folder): the first table of the method's
data list with its columns and a few rows (the engine's preview, data/preview.py), and the mapping as the Data tab's
column panel shows it. A change goes to the data list (every file checked again with it) and from there into the run
request (RunConfig.columns), so the run reads its tables exactly as shown."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import QGroupBox, QVBoxLayout, QWidget

from desktop_app.ui.widgets.columns_panel import ColumnsPanel
from desktop_app.ui.widgets.data_files import DataFileList
from desktop_app.ui.widgets.layouts import note_label


class DataColumnsBox(QGroupBox):
    """Shown while the data list holds a table; hidden otherwise."""

    def __init__(self, parent: QWidget | None = None):
        super().__init__("Table columns", parent)
        self.setObjectName("trainColumnsGroup")
        self.title_label = note_label()
        self.panel = ColumnsPanel()
        self.panel.setObjectName("trainColumnsPanel")
        self.panel.setMinimumHeight(220)
        layout = QVBoxLayout(self)
        layout.addWidget(self.title_label)
        layout.addWidget(self.panel)
        self.data_list: DataFileList | None = None
        self.shown: tuple = ()  # (table, mapping) shown: nothing is read again while they stay
        self.panel.mapping_changed.connect(self._on_mapping)
        self.setVisible(False)

    def show_for(self, data_list: DataFileList | None) -> None:
        """Follow `data_list` (the method's, None for a method without data files): its first table, or hidden."""
        from desktop_app.engine.data.preview import preview_source  # lazy: numpy

        self.data_list = data_list
        tables = data_list.tables() if data_list is not None else []
        self.setVisible(bool(tables))
        if not tables or data_list is None:
            self.shown = ()
            return
        key = (tables[0], tuple(data_list.columns.items()))
        if key == self.shown:
            return
        self.shown = key
        preview = preview_source(tables[0], data_list.columns or None)  # a schema and one batch: quick
        more = f" (the mapping applies to all {len(tables)} tables)" if len(tables) > 1 else ""
        self.title_label.setText(f"{Path(tables[0]).name}: which column holds what{more}. "
                                 f"{preview.problem}".strip())
        if preview.table is not None:
            self.panel.show_table(preview.table.columns, preview.table.rows, preview.mapping, preview.note)

    def _on_mapping(self, mapping: dict[str, str]) -> None:
        if self.data_list is not None:
            self.data_list.set_columns(mapping)
