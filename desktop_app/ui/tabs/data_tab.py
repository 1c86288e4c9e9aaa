"""Data tab: drop files, see each file's verdict (documents read in parallel, a progress bar per file), preview the
selected file before tokenizing (its text, or a table's columns and their mapping), set tokenizer/chunking, prepare a
dataset, inspect it."""

from __future__ import annotations

import html
import itertools
import os
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QComboBox,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QTabWidget,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from desktop_app.engine.data.items import FileProgress
from desktop_app.engine.data.preview import preview_source
from desktop_app.engine.data.tables import table_kind
from desktop_app.engine.events import Controls, FileVerdict, Finished, Log, Progress
from desktop_app.engine.paths import sample_corpus_dir
from desktop_app.engine.specs import DataSpec
from desktop_app.ui import theme
from desktop_app.ui.context import AppContext
from desktop_app.ui.widgets.drop_zone import DropZone
from desktop_app.ui.widgets.fitting import ColumnScroll, WrappedHeight, show_rows
from desktop_app.ui.widgets.layouts import add_items, button, labeled_row, note_label, progress_bar, splitter
from desktop_app.ui.widgets.live_plot import pg
from desktop_app.ui.widgets.live_plot import pg as _pg
from desktop_app.ui.widgets.source_preview import SourcePreviewPanel
from desktop_app.ui.widgets.spec_form import SpecForm
from desktop_app.ui.widgets.split_note import split_note_under

COLUMNS = ("File", "Size", "Format", "Encoding", "Docs", "Tokens", "Verdict", "Reason")
FILE_ROWS = 3  # the files list keeps this many rows in sight in the smallest window
MOST_FILE_ROWS = 12  # it is made tall enough for its files up to this many (the tab scrolls); more scroll in it
USABLE = ("ok", "partly")  # ingest.USABLE_VERDICTS: "partly" files are prepared, their reason says what is missing
VERDICT_COL = 6
DOCS_COL = 4
STATS_HEIGHT = 180  # the histogram's and the chunk preview's height: a page of chunks in sight


def human_size(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def _scan(paths: list[str], columns: dict[str, str]):
    from desktop_app.engine.data.extract import scan_sources  # lazy: start-up

    for item in scan_sources(paths, columns=columns or None):
        yield item if isinstance(item, FileProgress) else item.to_event()


def _preview(path: str, columns: dict[str, str]):
    yield preview_source(path, columns or None)


def _prepare(paths: list[str], out_dir: Path, spec: DataSpec, controls: Controls):
    from desktop_app.engine.data.prepare import prepare_dataset  # lazy: start-up

    yield from prepare_dataset(paths, out_dir, spec, controls=controls)
    # Stats computed here, in the worker, so the GUI never tokenizes or reads big files.
    from desktop_app.engine.data.dataset_stats import dataset_stats  # lazy: start-up

    if (out_dir / "manifest.json").exists():
        yield ("stats", str(out_dir), dataset_stats(out_dir, preview_chunks=3))


def _stats(path: str):
    from desktop_app.engine.data.dataset_stats import dataset_stats  # lazy: start-up

    yield ("stats", path, dataset_stats(Path(path), preview_chunks=3))


class DataTab(QWidget):
    dataset_ready = Signal(str)  # path of a prepared dataset

    def __init__(self, ctx: AppContext, parent: QWidget | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self.rows: dict[str, int] = {}  # file path -> table row
        self._scan_counter = 0
        self.task = None
        self.last_result: dict[str, Any] | None = None
        self.last_stats: dict[str, Any] | None = None
        self.columns: dict[str, str] = {}  # the column mapping for tables (DataSpec.columns); {} = guessed

        top = splitter(Qt.Orientation.Horizontal, [self._build_files_box(), self._build_settings_box()],
                       stretch=(3, 2))
        self.file_preview = SourcePreviewPanel()
        self.lower = QTabWidget()
        self.lower.setObjectName("dataLower")
        self.lower.addTab(self._build_stats_box(), "Dataset statistics")
        self.lower.addTab(ColumnScroll(self.file_preview), "Selected file")  # a short window scrolls it
        vsplit = splitter(Qt.Orientation.Vertical, [top, self.lower], stretch=(3, 2))
        self.page = ColumnScroll(vsplit)  # the tab scrolls as one page: every part keeps its rows in sight
        self.page.setObjectName("dataPage")
        add_items(QVBoxLayout(self), self.page, margins=0)
        self._connect_signals()
        self.refresh_datasets()

    def _build_files_box(self) -> QGroupBox:
        """The drop zone, the files with their verdicts, and the buttons that add or remove files."""
        self.drop_zone = DropZone()
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("filesTable")
        self.table.setHorizontalHeaderLabels(list(COLUMNS))
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(len(COLUMNS) - 1, QHeaderView.ResizeMode.Stretch)
        self.table.verticalHeader().setVisible(False)
        self.table.setAlternatingRowColors(True)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.setSelectionBehavior(QTableWidget.SelectionBehavior.SelectRows)
        self.summary = note_label("No files yet.", wrap=False)
        self.sample_btn = button("Add the sample corpus",
                                 tip="A small bundled set of public-domain texts, good for a first run")
        self.remove_btn = QPushButton("Remove selected")
        self.clear_btn = QPushButton("Clear")
        files_buttons = add_items(QHBoxLayout(), (self.summary, 1), self.sample_btn, self.remove_btn, self.clear_btn)
        files_box = QGroupBox("Files")
        add_items(QVBoxLayout(files_box), self.drop_zone, (self.table, 1), files_buttons)
        WrappedHeight(files_box)  # the drop zone's line wraps in a narrow window: the list never covers the buttons
        self.fit_file_rows()
        return files_box

    def fit_file_rows(self) -> int:
        """The files list made tall enough for its rows (at least FILE_ROWS, at most MOST_FILE_ROWS): the tab's page
        scrolls rather than the list; returns the rows it fits."""
        rows = max(FILE_ROWS, min(self.table.rowCount(), MOST_FILE_ROWS))
        show_rows(self.table, rows)
        return rows

    def _build_settings_box(self) -> QGroupBox:
        """The dataset's name, the tokenizer and chunking settings, Prepare and its progress."""
        self.name_edit = QLineEdit()
        self.name_edit.setPlaceholderText("dataset name (default: from the first file)")
        self.form = SpecForm(DataSpec)
        self.split_note = split_note_under(self.form)  # what the validation share holds out of the files' documents
        self.prepare_btn = button("Prepare dataset", "prepareButton", primary=True)
        self.cancel_btn = button("Cancel", enabled=False)
        self.progress = progress_bar("idle")
        self.stage_label = note_label()
        buttons = add_items(QHBoxLayout(), (self.prepare_btn, 1), self.cancel_btn)
        column = QWidget()
        sl = add_items(QVBoxLayout(column), labeled_row("Name", self.name_edit), self.form, buttons, self.progress,
                       self.stage_label, margins=0)
        sl.addStretch(1)
        settings_box = QGroupBox("Tokenizer and chunking")
        # a short window scrolls the fields; a narrow one never squashes them
        QVBoxLayout(settings_box).addWidget(ColumnScroll(column, [self.form]))
        return settings_box

    def _build_stats_box(self) -> QGroupBox:
        """A prepared dataset's figures, its token-length histogram and a preview of its chunks."""
        self.dataset_box = QComboBox()
        self.dataset_box.setObjectName("datasetBox")
        self.dataset_box.setMinimumWidth(260)
        self.stats_label = QLabel("Prepare a dataset, or pick one, to see its statistics.")
        self.stats_label.setWordWrap(True)
        self.stats_label.setTextFormat(Qt.TextFormat.RichText)
        self.hist = None  # pyqtgraph PlotWidget, made once the tab is shown (fast start-up)
        self.hist_holder = QVBoxLayout()
        self.hist_holder.setContentsMargins(0, 0, 0, 0)
        self.preview = QTextBrowser()
        self.preview.setObjectName("chunkPreview")
        self.preview.setPlaceholderText("Chunk preview: consecutive training windows, the overlap highlighted")
        self.preview.setMinimumHeight(STATS_HEIGHT)
        split = add_items(QHBoxLayout(), (self.hist_holder, 1), (self.preview, 1))
        stats_box = QGroupBox("Dataset statistics")  # no scroll area of its own: the tab's page scrolls
        add_items(QVBoxLayout(stats_box), labeled_row("Dataset", self.dataset_box), self.stats_label, (split, 1))
        WrappedHeight(stats_box)  # a long line of figures wraps: the plot and the chunks never cover it
        return stats_box

    def _connect_signals(self) -> None:
        self.drop_zone.paths_dropped.connect(self.add_paths)
        self.sample_btn.clicked.connect(self.add_sample_corpus)
        self.remove_btn.clicked.connect(self._remove_selected)
        self.clear_btn.clicked.connect(self.clear_files)
        self.prepare_btn.clicked.connect(lambda _=False: self.prepare())
        self.cancel_btn.clicked.connect(lambda _=False: self.cancel())
        self.form.changed.connect(lambda: (self.form.validate(), self.show_split()))
        self.dataset_box.activated.connect(lambda _i: self._on_dataset_picked())
        self.table.itemSelectionChanged.connect(self._on_file_selected)
        self.file_preview.columns.mapping_changed.connect(self.set_columns)

    # --- files ---
    def add_sample_corpus(self, _checked: bool = False) -> None:
        from desktop_app.engine.data.sample_corpus import sample_corpus_files  # lazy: start-up

        files = [str(p) for p in sample_corpus_files()]
        if not files:
            self.ctx.report_error(f"The bundled sample corpus is missing ({sample_corpus_dir()}).")
            return
        if not self.name_edit.text():
            self.name_edit.setText("sample-corpus")
        self.add_paths(files)

    def add_paths(self, paths: list[str]) -> None:
        """Judge dropped/added files in the background; each verdict fills a row as it comes."""
        paths = [str(p) for p in paths if str(p)]
        if not paths:
            return
        if not self.name_edit.text():
            self.name_edit.setText(Path(paths[0]).stem or "dataset")
        self._scan_counter += 1
        task = self.ctx.runner.start(f"scan-{self._scan_counter}", lambda p=paths, c=dict(self.columns): _scan(p, c))
        task.produced.connect(self._on_scan_item)
        task.failed.connect(lambda m, d: self.ctx.report_error(m, d, title="Could not read the files"))
        task.finished.connect(self._update_summary)

    def _on_scan_item(self, item: object) -> None:
        if isinstance(item, FileProgress):
            self.show_file_progress(item)
        elif isinstance(item, FileVerdict):
            self.set_verdict(item)
        elif isinstance(item, Log) and item.level != "info":
            self.stage_label.setText(item.message)

    def _row_of(self, path: str) -> int:
        row = self.rows.get(path)
        if row is None:
            row = self.table.rowCount()
            self.table.insertRow(row)
            self.rows[path] = row
            name = QTableWidgetItem(os.path.basename(path) or path)
            name.setToolTip(path)
            name.setData(Qt.ItemDataRole.UserRole, path)
            self.table.setItem(row, 0, name)
        return row

    def show_file_progress(self, p: FileProgress) -> None:
        """A progress bar in the file's verdict cell while its pages or chapters are read."""
        row = self._row_of(p.path)
        if self.table.item(row, VERDICT_COL) is not None:
            return  # judged already (a late report): the verdict stays
        bar = self.table.cellWidget(row, VERDICT_COL)
        if not isinstance(bar, QProgressBar):
            bar = QProgressBar()
            bar.setObjectName("fileProgress")
            self.table.setCellWidget(row, VERDICT_COL, bar)
        bar.setRange(0, max(1, p.total))
        bar.setValue(p.done)
        bar.setFormat(f"reading {p.done} of {p.total}")

    def set_verdict(self, v: FileVerdict) -> None:
        row = self._row_of(v.path)
        self.table.removeCellWidget(row, VERDICT_COL)  # the reading progress bar, if any
        ok = v.verdict in USABLE
        values = (os.path.basename(v.path) or v.path, human_size(v.size) if v.size else "", v.format, v.encoding,
                  f"{v.documents:,}" if v.documents else "", f"{v.tokens:,}" if v.tokens else "",
                  v.verdict, v.reason)
        for col, text in enumerate(values):
            item = QTableWidgetItem(str(text))
            if col == 0:
                item.setToolTip(v.path)
                item.setData(Qt.ItemDataRole.UserRole, v.path)
            if col in (6, 7):
                colour = theme.WARN if v.verdict == "partly" else theme.OK if ok else theme.ERROR
                item.setForeground(QColor(colour))
                if col == 7:
                    item.setToolTip(v.reason)
            if col == DOCS_COL:
                item.setData(Qt.ItemDataRole.UserRole, v.documents)
            if col in (1, 4, 5):
                item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
            self.table.setItem(row, col, item)
        self._update_summary()

    def verdicts(self) -> dict[str, str]:
        out = {}
        for path, row in self.rows.items():
            item = self.table.item(row, 6)
            out[path] = item.text() if item else ""
        return out

    def file_paths(self) -> list[str]:
        return list(self.rows)

    def _update_summary(self) -> None:
        v = self.verdicts()
        good = sum(1 for x in v.values() if x in USABLE)
        bad = len(v) - good
        self.summary.setText(f"{len(v)} file(s): {good} usable" + (f", {bad} skipped (see Reason)" if bad else "")
                             if v else "No files yet.")
        self.fit_file_rows()
        self.show_split()

    def listed_documents(self) -> int:
        """The documents of the usable files listed: what Prepare splits into training and validation."""
        verdicts = self.verdicts()
        docs = [self.table.item(row, DOCS_COL) for path, row in self.rows.items() if verdicts[path] in USABLE]
        return sum(int(item.data(Qt.ItemDataRole.UserRole) or 0) for item in docs if item is not None)

    def show_split(self) -> None:
        """The note under "Held out for validation": what its share holds out of the listed documents."""
        share = self.form.values().get("val_fraction")
        self.split_note.show_split(self.listed_documents(), float(share) if isinstance(share, (int, float)) else 0.0)

    def _remove_selected(self, _checked: bool = False) -> None:
        rows = sorted({i.row() for i in self.table.selectedIndexes()}, reverse=True)
        for r in rows:
            self.table.removeRow(r)
        self._reindex()

    def clear_files(self, _checked: bool = False) -> None:
        self.table.setRowCount(0)
        self.rows.clear()
        self._update_summary()

    def _reindex(self) -> None:
        self.rows = {}
        for r in range(self.table.rowCount()):
            item = self.table.item(r, 0)
            if item is not None:
                self.rows[item.data(Qt.ItemDataRole.UserRole)] = r
        self._update_summary()

    # --- the selected file: its text or its columns ---
    def _on_file_selected(self) -> None:
        rows = sorted({i.row() for i in self.table.selectedIndexes()})
        item = self.table.item(rows[0], 0) if rows else None
        if item is not None:
            self.preview_file(str(item.data(Qt.ItemDataRole.UserRole)))

    def preview_file(self, path: str) -> None:
        """Show what will be read from `path` (made in the background), in the Selected file tab."""
        self.file_preview.show_loading(path)
        self.lower.setCurrentIndex(1)
        task = self.ctx.runner.start("file-preview", lambda: _preview(path, dict(self.columns)))
        task.produced.connect(self.file_preview.show_preview)
        task.failed.connect(lambda m, d: self.ctx.report_error(m, d, title="Could not preview the file"))

    def set_columns(self, mapping: dict[str, str]) -> None:
        """A new column mapping: kept for Prepare (DataSpec.columns), and the tables judged again with it."""
        self.columns = dict(mapping)
        self.form.hidden["columns"] = dict(mapping)
        tables = [p for p in self.rows if table_kind(Path(p)) or p.lower().endswith(".jsonl")]
        if tables:
            self.add_paths(tables)

    # --- prepare ---
    def prepare(self, spec: DataSpec | None = None) -> bool:
        spec = spec or self.form.spec()
        if self.columns and not spec.columns:
            spec.columns = dict(self.columns)
        problems = spec.validate()
        self.form.show_problems(problems)
        if problems:
            self.ctx.report_error("The data settings have problems:\n" + "\n".join(problems),
                                  title="Check the settings")
            return False
        paths = [p for p, verdict in self.verdicts().items() if verdict in USABLE] or self.file_paths()
        if not paths:
            self.ctx.report_error("Add some text files first: drop them on the window or use 'Add files…'.",
                                  title="No files")
            return False
        name = self.name_edit.text().strip() or "dataset"
        out_dir = self.ctx.workspace.new_path("datasets", name)
        controls = Controls()
        self.task = self.ctx.runner.start("prepare", lambda: _prepare(paths, out_dir, spec, controls), controls)
        self.task.produced.connect(self._on_prepare_item)
        self.task.failed.connect(lambda m, d: self.ctx.report_error(m, d, title="Preparing the dataset failed"))
        self.task.finished.connect(self._on_prepare_finished)
        self.prepare_btn.setEnabled(False)
        self.cancel_btn.setEnabled(True)
        self.progress.setValue(0)
        self.progress.setFormat("starting…")
        self.stage_label.setText(f"Preparing into {out_dir}")
        self.last_result = None
        return True

    def cancel(self) -> None:
        if self.task is not None and self.task.running:
            self.task.stop()
            self.stage_label.setText("Cancelling…")

    def _on_prepare_item(self, item: object) -> None:
        if isinstance(item, Progress):
            if item.total:
                frac = max(0.0, min(1.0, item.done / item.total))
                self.progress.setValue(int(frac * 1000))
                self.progress.setFormat(f"{item.stage}: {frac:.0%}")
            else:
                self.progress.setFormat(f"{item.stage}…")
            if item.message:
                self.stage_label.setText(item.message)
        elif isinstance(item, FileVerdict):
            self.set_verdict(item)
        elif isinstance(item, Log):
            self.stage_label.setText(item.message)
        elif isinstance(item, Finished):
            self.last_result = {"reason": item.reason, **(item.result or {})}
            if item.reason == "completed":
                self.progress.setValue(1000)
                self.progress.setFormat("done")
                path = str(item.result.get("path") or item.result.get("dataset") or item.result.get("out_dir") or "")
                self.stage_label.setText(item.message or "Dataset ready.")
                if path:
                    self.dataset_ready.emit(path)
            elif item.reason == "cancelled":
                self.progress.setFormat("cancelled")
                self.stage_label.setText(item.message or "Cancelled; nothing was kept.")
            else:
                self.progress.setFormat("failed")
                self.ctx.report_error(item.message or "Preparing the dataset failed.", title="Preparing failed")
        elif isinstance(item, tuple) and item and item[0] == "stats":
            _, path, stats = item
            self.show_stats_data(path, stats)
            if self.last_result is not None and not any(k in self.last_result for k in ("path", "dataset")):
                self.dataset_ready.emit(path)

    def _on_prepare_finished(self) -> None:
        self.prepare_btn.setEnabled(True)
        self.cancel_btn.setEnabled(False)
        self.refresh_datasets()

    # --- datasets and stats ---
    def refresh_datasets(self) -> None:
        current = self.dataset_box.currentData()
        self.dataset_box.blockSignals(True)
        self.dataset_box.clear()
        for p in self.ctx.workspace.items("datasets"):
            if (p / "manifest.json").exists():
                self.dataset_box.addItem(p.name, str(p))
        if current:
            i = self.dataset_box.findData(current)
            if i >= 0:
                self.dataset_box.setCurrentIndex(i)
        self.dataset_box.blockSignals(False)

    def _on_dataset_picked(self) -> None:
        path = self.dataset_box.currentData()
        if path:
            self.show_stats(path)

    def show_stats(self, path: str) -> None:
        task = self.ctx.runner.start("stats", lambda: _stats(path))
        task.produced.connect(lambda item: self.show_stats_data(item[1], item[2]))
        task.failed.connect(lambda m, d: self.ctx.report_error(m, d, title="Could not read the dataset"))

    def show_stats_data(self, path: str, stats: dict[str, Any]) -> None:
        self.last_stats = stats
        i = self.dataset_box.findData(path)
        if i < 0:
            self.refresh_datasets()
            i = self.dataset_box.findData(path)
        if i >= 0:
            self.dataset_box.setCurrentIndex(i)
        self.stats_label.setText(_stats_html(path, stats))
        self._draw_histogram(stats.get("histogram") or stats.get("doc_length_histogram") or {})
        self.preview.setHtml(_preview_html(stats))

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.fit_file_rows()  # measured again: the theme or the font may have changed the row height
        if self.hist is None:
            QTimer.singleShot(0, self._ensure_hist)

    def _ensure_hist(self) -> Any:
        if self.hist is None:

            self.hist = pg().PlotWidget()
            self.hist.setObjectName("lengthHistogram")
            self.hist.setTitle("Document length (tokens)", color="#111827", size="10pt")
            self.hist.setLabel("left", "documents")
            self.hist.showGrid(x=False, y=True, alpha=0.15)
            self.hist.setMinimumHeight(STATS_HEIGHT)
            self.hist_holder.addWidget(self.hist)
        return self.hist

    def _draw_histogram(self, hist: dict[str, Any]) -> None:
        pg = _pg()
        self._ensure_hist().clear()
        edges, counts = list(hist.get("edges") or []), list(hist.get("counts") or [])
        if len(edges) != len(counts) + 1 or not counts:
            return
        x0 = edges[:-1]
        widths = [b - a for a, b in itertools.pairwise(edges)]
        bars = pg.BarGraphItem(x0=x0, width=widths, height=counts, brush=theme.ACCENT, pen=pg.mkPen("w"))
        self.hist.addItem(bars)

    def stop_timers(self) -> None:
        pass


def _stats_html(path: str, stats: dict[str, Any]) -> str:
    parts = [f"<b>{html.escape(Path(path).name)}</b>"]
    for split in ("train", "val"):
        s = (stats.get("splits") or {}).get(split) or stats.get(split)
        if isinstance(s, dict):
            parts.append(f"<b>{split}</b> " + ", ".join(
                f"{v:,} {html.escape(str(k))}" for k, v in s.items()
                if isinstance(v, int) and k in ("documents", "tokens", "chunks")))
    for key in ("vocab_size", "context_length", "overlap"):
        if key in stats and not isinstance(stats[key], (dict, list)):
            v = stats[key]
            parts.append(f"{key.replace('_', ' ')}: {v:,}" if isinstance(v, int) else
                         f"{key.replace('_', ' ')}: {html.escape(str(v))}")
    return " &nbsp;·&nbsp; ".join(parts)


def _preview_html(stats: dict[str, Any]) -> str:
    """Consecutive chunks; text a chunk shares with its neighbour (the overlap) is highlighted."""
    preview = stats.get("preview") or []
    if not preview:
        return "<i>No preview available.</i>"
    mark = "<span style='background:#fde68a' title='shared with the {} chunk'>{}</span>"
    out = ["<div style='font-family: DejaVu Sans Mono, monospace; font-size: 9pt'>"]
    prev_shared = ""
    for i, chunk in enumerate(preview):
        chunk = chunk if isinstance(chunk, dict) else {"text": str(chunk)}
        text = str(chunk.get("text", ""))
        shared_next = str(chunk.get("overlap_text", "")) if chunk.get("has_next", True) else ""
        head = prev_shared if prev_shared and text.startswith(prev_shared) else ""
        rest = text[len(head):]
        tail = shared_next if shared_next and rest.endswith(shared_next) else ""
        middle = rest[: len(rest) - len(tail)] if tail else rest
        body = ((mark.format("previous", html.escape(head)) if head else "") + html.escape(middle)
                + (mark.format("next", html.escape(tail)) if tail else ""))
        label = chunk.get("index", i)
        out.append(f"<p><b style='color:{theme.ACCENT}'>chunk {label}</b>"
                   f"<span style='color:#6b7280'> · {chunk.get('tokens', '')} tokens</span><br>"
                   f"{body.replace(chr(10), '<br>')}</p>")
        prev_shared = str(chunk.get("overlap_text", ""))
    out.append("</div>")
    return "".join(out)
