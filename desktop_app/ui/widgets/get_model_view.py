"""The Get-a-model view: search the Hugging Face Hub, see what a model needs and what fits this machine, download it.

Opened from the Library and from every base-model picker (hub_access.py). Nothing touches the network before the
person opens it, nor when network features are off (engine.hub.network: the view says so and offers the switch).
Searching, reading a repository's details with the fit verdicts, and downloading all run in the app's background
runner (kinds hub-search, hub-details, hub-download), never in the GUI thread. What it shows is the engine's:
the results (engine.hub.search), the file sets and their sizes (engine.hub.details), the verdicts and their reasons
(engine.train.fit) and every error sentence; this module lays them out.
"""

from __future__ import annotations

import html
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QDialog,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from desktop_app.engine.errors import UserError
from desktop_app.engine.hub import network
from desktop_app.engine.hub.details import FileSet, RepoDetails, repo_details
from desktop_app.engine.hub.search import FORMATS, SIZES, SORTS, HubModel, search_models
from desktop_app.engine.model.families import family_words, works_here
from desktop_app.engine.model.hub_cache import cached_files
from desktop_app.engine.train.fit import USES, FitVerdict, fit_verdicts
from desktop_app.engine.train.memory_plan import this_machine
from desktop_app.ui.context import AppContext
from desktop_app.ui.widgets.hub_downloads import STATE_WORDS, DownloadRequest, DownloadRow, DownloadsPanel
from desktop_app.ui.widgets.hub_words import count_words, date_words, parameters_words, size_words
from desktop_app.ui.widgets.layouts import add_items, button, note_label, scroll_area, splitter
from desktop_app.ui.window_size import fit_to_screen

SORT_WORDS = {"downloads": "Most downloaded", "recent": "Recently updated", "likes": "Most liked"}
SIZE_WORDS = {"any": "Any size", "under 1B": "Under 1B parameters", "1B-3B": "1B to 3B parameters",
              "3B-8B": "3B to 8B parameters", "over 8B": "Over 8B parameters"}
FORMAT_WORDS = {"any": "Any format", "safetensors": "Safetensors", "gguf": "GGUF (llama.cpp)"}
USE_WORDS = {"chat": "Chat", "lora": "LoRA", "qlora": "QLoRA", "full": "Full fine-tuning"}
KIND_WORDS = {"safetensors": "Safetensors", "gguf": "GGUF"}
RESULT_COLUMNS = ("Model", "Parameters", "Downloads", "Updated", "Gated")
SET_COLUMNS = ("Files", "Format", "Download size")
HUB_PAGE = "https://huggingface.co/"
SET_ROWS = 3  # file sets in sight before the list scrolls (a GGUF repository has a dozen quantizations)


@dataclass(frozen=True)
class SetFit:
    """The fit verdicts of one file set of the repository shown (what the details job yields after the details)."""

    label: str
    verdicts: tuple[FitVerdict, ...]


def search_job(query: str, sort: str, size: str, file_format: str) -> Iterator[list[HubModel]]:
    yield search_models(query, sort=sort, size=size, file_format=file_format)


def details_job(repo_id: str) -> Iterator[RepoDetails | SetFit]:
    """The repository's details, then each file set's verdicts (the machine is measured once, here)."""

    details = repo_details(repo_id)
    yield details
    machine = this_machine()
    for file_set in details.file_sets:
        yield SetFit(file_set.label, tuple(fit_verdicts(details, file_set, machine)))


def _combo(name: str, choices: tuple[str, ...], words: dict[str, str]) -> QComboBox:
    box = QComboBox()
    box.setObjectName(name)
    for value in choices:
        box.addItem(words.get(value, value), value)
    return box


def _cell(text: str, tip: str = "") -> QTableWidgetItem:
    item = QTableWidgetItem(text)
    item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsEditable)
    if tip:
        item.setToolTip(tip)
    return item


def _table(name: str, columns: tuple[str, ...]) -> QTableWidget:
    table = QTableWidget(0, len(columns))
    table.setObjectName(name)
    table.setHorizontalHeaderLabels(list(columns))
    table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
    table.verticalHeader().setVisible(False)
    table.setAlternatingRowColors(True)
    table.setWordWrap(False)
    table.setTextElideMode(Qt.TextElideMode.ElideMiddle)
    header = table.horizontalHeader()
    header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
    for column in range(1, len(columns)):
        header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
    return table


class GetModelView(QDialog):
    """Search, details with what fits this machine, and the downloads, in a window of its own."""

    def __init__(self, ctx: AppContext, parent: QWidget | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self.setObjectName("getModelView")
        self.setWindowTitle("Get a model from Hugging Face")
        self.results: list[HubModel] = []
        self.details: RepoDetails | None = None
        self.fits: dict[str, tuple[FitVerdict, ...]] = {}
        self.searched = False  # the first search runs when the view is first shown with the network allowed
        self._placed = False  # sized to the screen when first shown
        self.downloads = DownloadsPanel(ctx)
        downloads_box = QGroupBox("Downloads")
        downloads_box.setObjectName("downloadsGroup")
        add_items(QVBoxLayout(downloads_box), (self.downloads, 1), margins=6)
        top = splitter(Qt.Orientation.Horizontal, [self._build_results(), self._build_details()],
                       stretch=(1, 1), sizes=(600, 560), collapsible=False)
        body = splitter(Qt.Orientation.Vertical, [top, downloads_box], stretch=(1, 0), sizes=(560, 100),
                        collapsible=False)
        add_items(QVBoxLayout(self), self._build_search_bar(), self._build_network_row(), (body, 1), margins=10)
        self._connect_signals()
        self.resize(1180, 680)
        self._update_network()
        self._show_details(None)

    # --- construction ---
    def _build_search_bar(self) -> QHBoxLayout:
        self.query = QLineEdit()
        self.query.setObjectName("hubQuery")
        self.query.setPlaceholderText("Search models, e.g. Qwen2.5 Instruct, SmolLM2, Llama 3.2 GGUF")
        self.query.setClearButtonEnabled(True)
        self.sort_box = _combo("hubSort", SORTS, SORT_WORDS)
        self.size_box = _combo("hubSize", SIZES, SIZE_WORDS)
        self.format_box = _combo("hubFormat", FORMATS, FORMAT_WORDS)
        self.search_btn = button("Search", "hubSearch", "Search the Hugging Face Hub for text-generation models",
                                 primary=True)
        return add_items(QHBoxLayout(), (self.query, 1), self.sort_box, self.size_box, self.format_box,
                         self.search_btn, margins=0)

    def _build_network_row(self) -> QHBoxLayout:
        self.network_note = note_label(role="error")
        self.network_note.setObjectName("networkNote")
        self.network_check = QCheckBox("Network features")
        self.network_check.setObjectName("networkCheck")
        self.network_check.setToolTip("Searching and downloading from the Hugging Face Hub; off, the app never "
                                      "touches the network (everything downloaded still opens)")
        return add_items(QHBoxLayout(), (self.network_note, 1), self.network_check, margins=0)

    def _build_results(self) -> QWidget:
        self.results_table = _table("hubResults", RESULT_COLUMNS)
        self.results_status = note_label("")
        self.results_status.setObjectName("hubResultsStatus")
        self.results_status.setTextFormat(Qt.TextFormat.PlainText)
        panel = QWidget()
        add_items(QVBoxLayout(panel), (self.results_table, 1), self.results_status, margins=0)
        return panel

    def _build_details(self) -> QWidget:
        self.facts = QLabel()
        self.facts.setObjectName("hubFacts")
        self.facts.setWordWrap(True)
        self.facts.setTextFormat(Qt.TextFormat.RichText)
        self.facts.setOpenExternalLinks(True)
        self.facts.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.sets_table = _table("hubFileSets", SET_COLUMNS)
        self.fit_box = QGroupBox("What fits this machine")
        self.fit_box.setObjectName("hubFit")
        self.fit_grid = QGridLayout(self.fit_box)
        self.fit_grid.setColumnStretch(2, 1)
        self.fit_labels: dict[str, tuple[QLabel, QLabel]] = {}
        for row, use in enumerate(USES):
            mark, reason = QLabel(""), note_label("")
            mark.setObjectName(f"fitMark_{use}")
            reason.setObjectName(f"fitReason_{use}")
            self.fit_grid.addWidget(QLabel(f"<b>{html.escape(USE_WORDS.get(use, use))}</b>"), row, 0,
                                    Qt.AlignmentFlag.AlignTop)
            self.fit_grid.addWidget(mark, row, 1, Qt.AlignmentFlag.AlignTop)
            self.fit_grid.addWidget(reason, row, 2)
            self.fit_labels[use] = (mark, reason)
        self.download_btn = button("Download", "hubDownload", "Download the chosen files into the Hugging Face cache "
                                   "(shared with other tools); pulling again resumes", primary=True)
        self.download_note = note_label("")
        self.sets_title = QLabel("<b>Files to download</b>")
        inner = QWidget()
        add_items(QVBoxLayout(inner), self.facts, self.sets_title, self.sets_table, self.fit_box, margins=0)
        inner.layout().addStretch(1)
        area = scroll_area(inner)
        area.setObjectName("hubDetailsArea")
        column = QWidget()  # the Download button under the scrolling details: always in sight
        add_items(QVBoxLayout(column), (area, 1), add_items(QHBoxLayout(), self.download_btn, (self.download_note, 1)),
                  margins=0)
        return column

    def _connect_signals(self) -> None:
        self.search_btn.clicked.connect(lambda _=False: self.search())
        self.query.returnPressed.connect(self.search)
        for box in (self.sort_box, self.size_box, self.format_box):
            box.activated.connect(lambda _i: self.search())
        self.network_check.toggled.connect(self.set_network)
        self.results_table.itemSelectionChanged.connect(self._on_result_chosen)
        self.sets_table.itemSelectionChanged.connect(self._on_set_chosen)
        self.download_btn.clicked.connect(lambda _=False: self.download())
        self.downloads.changed.connect(self._update_download_button)

    # --- network ---
    def network_on(self) -> bool:
        return network.network_allowed()

    def _update_network(self) -> None:
        """The line that says the network is off (the engine's sentence), the switch, and what needs the network."""
        on = self.network_on()
        why = ""
        if not on:
            try:
                network.require_network()
            except UserError as exc:
                why = str(exc)
        self.network_note.setText(why[:1].upper() + why[1:] if why else "")
        self.network_note.setVisible(not on)
        self.network_check.blockSignals(True)
        self.network_check.setChecked(on)
        self.network_check.blockSignals(False)
        self.network_check.setEnabled(not network.off_by_environment())  # AZR_NETWORK=off wins: the line says so
        for widget in (self.search_btn, self.query):
            widget.setEnabled(on)
        self._update_download_button()

    def set_network(self, on: bool) -> None:
        """The person's switch of every network feature (the engine keeps it); turned on, the Hub is searched."""
        network.set_network_allowed(on)
        self._update_network()
        if on and self.network_on() and not self.searched and self.isVisible():
            self.search()

    def showEvent(self, event: Any) -> None:
        super().showEvent(event)
        if not self._placed:
            self._placed = True
            fit_to_screen(self, center=True)
        self._update_network()
        if self.network_on() and not self.searched:
            self.search()  # opening the view is asking for the Hub: the most downloaded models first

    def hideEvent(self, event: Any) -> None:
        super().hideEvent(event)
        if self.downloads.busy():
            self.ctx.info("Downloads go on in the background; Library → Get a model… shows them")

    # --- search ---
    def search(self, query: str | None = None) -> bool:
        """Search the Hub in the background with the query and choices shown (or `query`); False when the network is
        off (nothing is sent)."""
        if not self.network_on():
            self._update_network()
            return False
        if query is not None:
            self.query.setText(query)
        self.searched = True
        args = (self.query.text().strip(), self.sort_box.currentData(), self.size_box.currentData(),
                self.format_box.currentData())
        task = self.ctx.runner.start("hub-search", lambda: search_job(*args))
        task.produced.connect(self._show_results)
        task.failed.connect(lambda message, details: self._search_failed(message, details))
        self.results_status.setProperty("role", "muted")
        self.results_status.setText("Searching the Hugging Face Hub…")
        self._repolish(self.results_status)
        return True

    def _search_failed(self, message: str, details: str) -> None:
        self.results_status.setProperty("role", "error")
        self.results_status.setText(message if not details else f"The search failed: {message}")
        self._repolish(self.results_status)
        if details:
            self.ctx.report_error(message, details, title="Search failed")

    def _show_results(self, models: list[HubModel]) -> None:
        self.results = list(models)
        table = self.results_table
        table.blockSignals(True)
        table.setRowCount(len(self.results))
        for row, m in enumerate(self.results):
            tip = m.repo_id + (" · has GGUF files" if m.has_gguf else "")
            values = (_cell(m.repo_id, tip), _cell(parameters_words(m.parameters)),
                      _cell(count_words(m.downloads), f"{m.downloads:,} downloads · {m.likes:,} likes"),
                      _cell(date_words(m.last_modified)),
                      _cell("gated" if m.gated else "", "Accept its licence on the Hub before downloading"
                            if m.gated else ""))
            for column, item in enumerate(values):
                table.setItem(row, column, item)
        table.clearSelection()
        table.blockSignals(False)
        query = self.query.text().strip()
        self.results_status.setText(f"{len(self.results)} model(s)" + (f" for “{query}”" if query else "") +
                                    ": choose one to see its files and what fits this machine" if self.results
                                    else "No text-generation model matches: try other words or filters")

    def result_row(self, repo_id: str) -> int:
        return next((i for i, m in enumerate(self.results) if m.repo_id == repo_id), -1)

    # --- details ---
    def _on_result_chosen(self) -> None:
        rows = self.results_table.selectionModel().selectedRows()
        if rows and 0 <= rows[0].row() < len(self.results):
            self.show_repo(self.results[rows[0].row()].repo_id)

    def show_repo(self, repo_id: str) -> bool:
        """Read `repo_id`'s details and verdicts in the background; False when the network is off."""
        if not self.network_on():
            self._update_network()
            return False
        self.details, self.fits = None, {}
        self._show_details(None, f"Reading {repo_id}…")
        task = self.ctx.runner.start("hub-details", lambda: details_job(repo_id))
        task.produced.connect(self._on_details_item)
        task.failed.connect(lambda message, details: self._details_failed(repo_id, message, details))
        return True

    def _details_failed(self, repo_id: str, message: str, details: str) -> None:
        """The engine's sentence where it belongs: under the details when they came (the verdicts failed), else in
        their place."""
        if self.details is not None and self.details.repo_id == repo_id:
            for mark, reason in self.fit_labels.values():
                if not mark.text():
                    reason.setText(f"could not be worked out: {message}")
        else:
            self._show_details(None, "")
            self.facts.setText(f"<h3>{html.escape(repo_id)}</h3><p style='color:#b91c1c'>{html.escape(message)}</p>")
        if details:
            self.ctx.report_error(message, details, title="Could not read the model's details")

    def _on_details_item(self, item: object) -> None:
        if isinstance(item, RepoDetails):
            self._show_details(item)
        elif isinstance(item, SetFit):
            self.fits[item.label] = item.verdicts
            chosen = self.chosen_set()
            if chosen is not None and chosen.label == item.label:
                self._show_fit(item.verdicts)

    def _show_details(self, details: RepoDetails | None, placeholder: str = "") -> None:
        self.details = details
        hint = placeholder or "Choose a model on the left to see its files, its licence and what fits this machine."
        self.facts.setText(facts_html(details) if details is not None else
                           f"<p style='color:#6b7280'>{html.escape(hint)}</p>")
        table = self.sets_table
        table.blockSignals(True)
        sets = details.file_sets if details is not None else ()
        table.setRowCount(len(sets))
        for row, fs in enumerate(sets):
            tip = "\n".join(fs.files)
            for column, text in enumerate((fs.label, KIND_WORDS.get(fs.kind, fs.kind), size_words(fs.size))):
                table.setItem(row, column, _cell(text, tip))
        table.blockSignals(False)
        self._fit_table_height(table, SET_ROWS)  # always as tall: the details do not jump from one model to the next
        for widget in (self.sets_title, table, self.fit_box, self.download_btn, self.download_note):
            widget.setVisible(details is not None)
        if sets:
            table.selectRow(0)
        else:
            self._show_fit(())
        self._update_download_button()

    @staticmethod
    def _fit_table_height(table: QTableWidget, rows: int) -> None:
        row = table.verticalHeader().defaultSectionSize()
        table.setFixedHeight(table.horizontalHeader().sizeHint().height() + rows * row + 2 * table.frameWidth() + 2)

    def chosen_set(self) -> FileSet | None:
        if self.details is None:
            return None
        rows = self.sets_table.selectionModel().selectedRows()
        index = rows[0].row() if rows else -1
        return self.details.file_sets[index] if 0 <= index < len(self.details.file_sets) else None

    def choose_set(self, label: str) -> bool:
        """Choose the file set called `label` ("Q4_K_M", "Safetensors (full precision)")."""
        for row in range(self.sets_table.rowCount()):
            if self.sets_table.item(row, 0).text() == label:
                self.sets_table.selectRow(row)
                return True
        return False

    def _on_set_chosen(self) -> None:
        chosen = self.chosen_set()
        self._show_fit(self.fits.get(chosen.label, ()) if chosen is not None else ())
        self._update_download_button()

    def _show_fit(self, verdicts: tuple[FitVerdict, ...]) -> None:
        """Every use with its verdict and the engine's reason; a use with no verdict yet says it is being worked out."""
        by_use = {v.use: v for v in verdicts}
        for use, (mark, reason) in self.fit_labels.items():
            verdict = by_use.get(use)
            if verdict is None:
                mark.setText("")
                reason.setText("working out…" if self.details is not None else "")
                continue
            mark.setText("<b style='color:#15803d'>✔ fits</b>" if verdict.fits else
                         "<b style='color:#b91c1c'>✖ no</b>")
            reason.setText(verdict.reason)
        chosen = self.chosen_set()
        self.fit_box.setTitle(f"What fits this machine with {chosen.label}" if chosen is not None else
                              "What fits this machine")

    def fit_rows(self) -> list[tuple[str, str, str]]:
        """(use, mark, reason) as shown, one per use in the engine's order (tests, screenshots)."""
        return [(use, mark.text(), reason.text()) for use, (mark, reason) in self.fit_labels.items()]

    # --- download ---
    def _update_download_button(self) -> None:
        chosen = self.chosen_set()
        on = self.network_on()
        self.download_btn.setEnabled(on and chosen is not None)
        if chosen is None:
            self.download_btn.setText("Download")
            self.download_note.setText("")
            return
        self.download_btn.setText(f"Download {size_words(chosen.size)}")
        row = self.downloads.row_for(self.details.repo_id, chosen.label) if self.details is not None else None
        cached = cached_files(self.details.repo_id, chosen.files) if self.details is not None and row is None \
            else None
        if cached is not None:  # downloaded before (this session or an earlier one): nothing to fetch again
            self.download_btn.setEnabled(False)
            self.download_btn.setText("Downloaded")
            self.download_note.setText(f"{chosen.label}: in the Hugging Face cache (the Library lists it)")
            return
        where = f"{chosen.label}: {STATE_WORDS[row.state]}" if row is not None else \
            f"{chosen.label}, into the Hugging Face cache"
        self.download_note.setText(where if on else "network features are off")

    def download(self) -> DownloadRow | None:
        """Queue the chosen file set of the repository shown; its row shows how it goes."""
        chosen = self.chosen_set()
        if self.details is None or chosen is None or not self.network_on():
            return None
        request = DownloadRequest(self.details.repo_id, chosen.label, tuple(chosen.patterns), chosen.size,
                                  self.details.revision or None)
        return self.downloads.enqueue(request)

    @staticmethod
    def _repolish(label: QLabel) -> None:
        label.style().unpolish(label)
        label.style().polish(label)


def facts_html(d: RepoDetails) -> str:
    """What a person decides by, in a few rows: size, family, licence, gated, chat template, last update."""
    template = {True: "yes", False: "no: it completes text (fine-tune it to chat)",
                None: "unknown until it is downloaded"}[d.has_chat_template]
    family = " · ".join(p for p in (d.architecture, family_words(d.model_type) if d.model_type else "") if p)
    pairs = [(("Parameters", parameters_words(d.parameters)), ("Licence", d.license or "not stated")),
             (("Context", f"{d.context_length:,} tokens" if d.context_length else "unknown"),
              ("Last update", date_words(d.last_modified)))]
    wide = [("Family", family or "unknown"), ("Works here", works_words(d)), ("Chat template", template),
            ("Gated", "yes: accept its licence on the Hub, then log in, before downloading" if d.gated else "no")]
    key = "<td style='color:#6b7280; padding-right:8px'>{}</td>"
    cells = "".join("<tr>" + "".join(key.format(k) + f"<td style='padding-right:14px'>{html.escape(v)}</td>"
                                     for k, v in pair) + "</tr>" for pair in pairs)
    cells += "".join(f"<tr>{key.format(k)}<td colspan='3'>{html.escape(v)}</td></tr>" for k, v in wide)
    page = HUB_PAGE + d.repo_id
    problem = (f"<p style='color:#b91c1c'>This app cannot use it: {html.escape(d.problem)}</p>" if d.problem else "")
    return (f"<h3 style='margin:0'>{html.escape(d.repo_id)}</h3><p style='margin:2px 0'><a href='{html.escape(page)}'>"
            f"its page on the Hub</a> (model card, licence)</p><table cellspacing='1'>{cells}</table>{problem}")


def works_words(d: RepoDetails) -> str:
    """What works here for the repository, in the engine's words: chat, LoRA, QLoRA, GGUF export, or why not (a
    repository of GGUF files only is a GGUF model: llama.cpp runs it already; here it is dequantized to fine-tune)."""
    if d.problem:
        return "nothing (why is below)"
    if not d.model_type:
        return "unknown until its config is read"
    gguf_only = bool(d.file_sets) and all(s.kind == "gguf" for s in d.file_sets)
    return works_here(d.model_type, gguf_file=gguf_only)
