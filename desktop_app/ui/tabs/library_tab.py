"""Library tab: a view of the workspace folder (models, datasets, tokenizers, runs, exports).

Runs are listed with their method, how they ended and their last loss; a folder that holds several runs (a
pipeline's stages, the self-play demo's pretraining and self-play runs) lists them under it, and its actions act on
the run inside that fits (the newest one with curves for Show in plots, with a checkpoint for Generate and Export).
"""

from __future__ import annotations

import html
import os
import shutil
import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import QEvent, Qt, QUrl, Signal
from PySide6.QtGui import QDesktopServices, QFont, QFontMetrics
from PySide6.QtWidgets import (
    QAbstractItemView,
    QCheckBox,
    QComboBox,
    QGridLayout,
    QHBoxLayout,
    QHeaderView,
    QInputDialog,
    QLabel,
    QPushButton,
    QTextBrowser,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from desktop_app.engine.events import Controls, Finished, Log, Progress
from desktop_app.engine.export.gguf_quantize import GGUF_TYPES
from desktop_app.engine.methods import METHOD_BY_KEY
from desktop_app.engine.model.hub_cache import model_name
from desktop_app.engine.pipeline_folder import is_pipeline_dir
from desktop_app.engine.run_folder import MetricsSummary, list_committed, tail_records
from desktop_app.engine.runs import is_live, nested_runs, pipeline_resumable
from desktop_app.engine.workspace import slugify
from desktop_app.ui.context import AppContext
from desktop_app.ui.tabs.library_details import (
    fill_sizes,
    folder_details_html,
    folder_size,
    is_adapter_run,
    item_details_html,
    recorded_method,
    resumable,
    run_outcome,
    run_status,
    size_text,
)
from desktop_app.ui.widgets.base_picker import RECENT_KEY
from desktop_app.ui.widgets.compare_view import COMPARE_TIP, open_compare
from desktop_app.ui.widgets.gguf_models import STORE_KIND, add_store_group, store_details_html, workspace_ggufs
from desktop_app.ui.widgets.gguf_type_box import gguf_type_box
from desktop_app.ui.widgets.hub_access import open_get_model_view
from desktop_app.ui.widgets.hub_library import HUB_KIND, add_hub_group, hub_details_html
from desktop_app.ui.widgets.layouts import add_items, button, progress_bar, splitter
from desktop_app.ui.widgets.opened_ggufs import (
    GGUF_KIND,
    OPENED_KEY,
    add_opened_group,
    opened_details_html,
    opened_ggufs,
    window_settings,
)
from desktop_app.ui.widgets.run_view import run_method_key
from desktop_app.ui.widgets.sweep_library import add_sweep_group
from desktop_app.ui.widgets.tree_groups import group_item

KIND_TITLES = {"runs": "Runs", "models": "Models", "datasets": "Datasets", "tokenizers": "Tokenizers",
               "exports": "Exports"}
PATH_ROLE = Qt.ItemDataRole.UserRole
KIND_ROLE = Qt.ItemDataRole.UserRole + 1
COLUMNS = ("Name", "Method", "Status", "Loss", "Modified", "Size")
NAME, METHOD, STATUS, LOSS, MODIFIED, SIZE = range(len(COLUMNS))
# The longest usual text of each column but the name: the name takes the rest of the width, so Size stays in sight.
COLUMN_SAMPLES = {METHOD: "Pretraining", STATUS: "stopped early", LOSS: "0.000", MODIFIED: "2026-12-31 23:59",
                  SIZE: "999.9 MB"}
NAME_MIN_CHARS = 14  # the name keeps this many characters (elided in the middle: the tooltip has the path)
OUTSIDE_KINDS = (STORE_KIND, GGUF_KIND, HUB_KIND)  # models kept outside the workspace: never renamed or deleted here


def _export_job(source: str, fmt: str, out: Path, controls: Controls, **settings: Any):
    from desktop_app.engine.export.hf import export_model  # lazy: start-up

    yield from export_model(source, fmt, out, controls=controls, **settings)


class LibraryTab(QWidget):
    show_run_requested = Signal(str)
    generate_requested = Signal(str)
    dataset_requested = Signal(str)
    resume_requested = Signal(str)  # a run to continue from its newest checkpoint (the main window routes it)
    watch_requested = Signal(str)  # a run another process trains (CLI, torchrun): follow its curves, read-only

    def __init__(self, ctx: AppContext, parent: QWidget | None = None):
        super().__init__(parent)
        self.ctx = ctx
        self.task = None
        self.last_export: str = ""
        self.opened_group: QTreeWidgetItem | None = None  # the GGUF models opened in the window, when any
        self.compare_dialog: Any = None  # the newest Compare window
        split = splitter(Qt.Orientation.Horizontal, [self._build_tree_panel(), self._build_actions_panel()],
                         sizes=(720, 400), collapsible=False)
        QVBoxLayout(self).addWidget(split, 1)
        self._connect_signals()
        self.refresh()

    def _build_tree_panel(self) -> QWidget:
        """The workspace's items by kind, with the buttons that act on the files themselves."""
        self.tree = QTreeWidget()
        self.tree.setObjectName("libraryTree")
        self.tree.setHeaderLabels(list(COLUMNS))
        self.tree.setAlternatingRowColors(True)
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)  # several runs for Compare
        self.tree.setTextElideMode(Qt.TextElideMode.ElideMiddle)  # a run's name and its date suffix both show
        header = self.tree.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(NAME, QHeaderView.ResizeMode.Stretch)
        self._fit_columns()
        self.tree.headerItem().setToolTip(LOSS, "The last training loss the run reported")
        self.refresh_btn = QPushButton("Refresh")
        self.open_btn = QPushButton("Open folder")
        self.rename_btn = QPushButton("Rename…")
        self.delete_btn = QPushButton("Delete…")
        self.get_model_btn = button("Get a model…", "libraryGetModel", "Search the Hugging Face Hub, see what fits "
                                    "this machine and download a model (listed here once it is there)", primary=True)
        files_bar = add_items(QHBoxLayout(), self.get_model_btn, self.refresh_btn, self.open_btn, self.rename_btn,
                              self.delete_btn)
        files_bar.addStretch(1)
        left = QWidget()
        add_items(QVBoxLayout(left), (self.tree, 1), files_bar, margins=0)
        return left

    def _fit_columns(self) -> None:
        """Each column but the name as wide as its usual text (and its bold title); the name takes the rest of the
        width, and keeps a few characters: the list is never so narrow that Size goes out of sight."""
        header = self.tree.header()
        bold = QFont(header.font())
        bold.setBold(True)
        title, text = QFontMetrics(bold), self.tree.fontMetrics()
        pad = 16  # the theme's cell and title padding, and a little air
        total = 0
        for column, sample in COLUMN_SAMPLES.items():
            width = max(title.horizontalAdvance(COLUMNS[column]), text.horizontalAdvance(sample)) + pad
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Interactive)
            self.tree.setColumnWidth(column, width)
            total += width
        name = NAME_MIN_CHARS * text.averageCharWidth() + pad
        self.tree.setMinimumWidth(total + name + self.tree.verticalScrollBar().sizeHint().width()
                                  + 2 * self.tree.frameWidth())

    def changeEvent(self, event: QEvent) -> None:
        super().changeEvent(event)
        if event.type() in (QEvent.Type.FontChange, QEvent.Type.StyleChange):
            self._fit_columns()  # the texts got wider or narrower

    def _build_actions_panel(self) -> QWidget:
        """What to do with the selected item, its details, and the export row with its progress."""
        self.details = QTextBrowser()
        self.details.setObjectName("libraryDetails")
        self.details.setOpenExternalLinks(False)
        self.plots_btn = QPushButton("Show in plots")
        self.resume_btn = button("Resume", "libraryResume",
                                 "Continue the run from its newest good checkpoint (any method), with its curves")
        self.watch_btn = button("Watch live", "libraryWatch", "Follow the run's curves as another process (CLI, "
                                                              "torchrun) trains it; nothing is written to the run")
        self.generate_btn = QPushButton("Generate with it")
        self.use_btn = QPushButton("Train on it")
        # held-out tasks, questions, perplexity (evaluate_view.py)
        self.evaluate_btn = button("Evaluate…", "libraryEvaluate")
        self.compare_btn = button("Compare…", "libraryCompare", COMPARE_TIP, enabled=False)
        actions = QGridLayout()  # two columns: the column stays narrow, the list beside it keeps Size in sight
        for i, b in enumerate((self.plots_btn, self.generate_btn, self.resume_btn, self.evaluate_btn, self.watch_btn,
                               self.use_btn, self.compare_btn)):
            actions.addWidget(b, i // 2, i % 2)
        right = QWidget()
        add_items(QVBoxLayout(right), actions, (self.details, 1), self._build_export_row(), self.merge_check,
                  self.progress, margins=0)
        return right

    def _build_export_row(self) -> QVBoxLayout:
        """Export as (format), and Export and Cancel under it; the merge option and the progress bar go below."""
        self.format_box = QComboBox()
        self.format_box.addItem("Hugging Face folder", "hf")
        self.format_box.addItem("Zip archive", "zip")
        self.format_box.addItem("GGUF (llama.cpp)", "gguf")
        self.gguf_type_box = gguf_type_box(GGUF_TYPES)  # shown for GGUF only
        self.gguf_type_box.setVisible(False)
        self.format_box.currentIndexChanged.connect(lambda _i: self.gguf_type_box.setVisible(self._gguf()))
        self.merge_check = QCheckBox("Merge the adapters into the base")
        self.merge_check.setObjectName("mergeAdapters")
        self.merge_check.setToolTip("A LoRA / QLoRA run holds adapters: merged into (a copy of) its base, the export "
                                    "is a plain model any tool loads; the base on disk is untouched")
        self.merge_check.setChecked(True)
        self.merge_check.setVisible(False)
        self.export_btn = button("Export", primary=True)
        self.cancel_export_btn = button("Cancel", enabled=False)
        self.progress = progress_bar("exports go to the workspace's exports folder")
        # Export and Cancel under the format: side by side they made the column too wide for a 1024-pixel window
        buttons = add_items(QHBoxLayout(), self.export_btn, self.cancel_export_btn)
        buttons.addStretch(1)
        return add_items(QVBoxLayout(), add_items(QHBoxLayout(), QLabel("Export as"), (self.format_box, 1)),
                         self.gguf_type_box, buttons, margins=0)

    def _connect_signals(self) -> None:
        self.refresh_btn.clicked.connect(lambda _=False: self.refresh())
        self.get_model_btn.clicked.connect(lambda _=False: open_get_model_view(self, self.ctx))
        self.open_btn.clicked.connect(lambda _=False: self.open_selected())
        self.rename_btn.clicked.connect(lambda _=False: self._rename_dialog())
        self.delete_btn.clicked.connect(lambda _=False: self.delete_selected())
        self.plots_btn.clicked.connect(lambda _=False: self._emit_run(self.show_run_requested, "metrics"))
        self.resume_btn.clicked.connect(lambda _=False: self._emit_selected(self.resume_requested, "runs"))
        self.watch_btn.clicked.connect(lambda _=False: self._emit_run(self.watch_requested, "metrics"))
        self.generate_btn.clicked.connect(lambda _=False: self._emit_model(self.generate_requested))
        self.use_btn.clicked.connect(lambda _=False: self._emit_selected(self.dataset_requested, "datasets"))
        self.evaluate_btn.clicked.connect(lambda _=False: self.open_evaluate())
        self.compare_btn.clicked.connect(lambda _=False: self.open_compare())
        self.tree.itemSelectionChanged.connect(self._update_buttons)
        self.export_btn.clicked.connect(lambda _=False: self.export_selected())
        self.cancel_export_btn.clicked.connect(lambda _=False: self.cancel_export())
        self.tree.currentItemChanged.connect(lambda cur, _prev: self._show_details(cur))
        self.tree.itemDoubleClicked.connect(lambda item, _c: self._double_clicked(item))

    # --- listing ---
    def refresh(self) -> None:
        selected = self.selected_path()
        self.tree.clear()
        ws = self.ctx.workspace
        for kind, title in KIND_TITLES.items():
            items = ws.items(kind)
            top = group_item(self.tree, title, len(items))
            for p in items:
                child = self._item(p, kind)
                if child is None:
                    continue
                top.addChild(child)
                if kind == "runs":
                    for inner in nested_runs(p):  # a pipeline's stages, the demo's phases
                        sub = self._item(inner, kind)
                        if sub is not None:
                            child.addChild(sub)
                    if child.childCount():
                        self._describe_group(child)
                        child.setExpanded(True)
            top.setExpanded(True)
        add_sweep_group(self.tree, ws.items("sweeps"), self._item, (METHOD, STATUS))  # each with its trials' runs
        fill_sizes(self._all_items(), SIZE, PATH_ROLE)  # the workspace's items (the others' come with them)
        add_store_group(self.tree, PATH_ROLE, KIND_ROLE, STATUS, SIZE)  # Ollama's and LM Studio's models, if any
        add_hub_group(self.tree, (PATH_ROLE, KIND_ROLE), (STATUS, MODIFIED, SIZE))  # the Hugging Face cache's
        self.opened_group = add_opened_group(self.tree, self.opened_models(), (PATH_ROLE, KIND_ROLE),
                                             (STATUS, MODIFIED, SIZE))
        if selected:
            self.select(selected)
        self._update_buttons()

    def opened_models(self) -> list[Path]:
        """GGUF files opened as a chat model or a fine-tuning base that still exist (the workspace's own are listed
        under Models and Exports already)."""
        return opened_ggufs(window_settings(self), (OPENED_KEY, RECENT_KEY), workspace_ggufs(self.ctx.workspace))

    def refresh_opened(self) -> None:
        """List the opened GGUF models again (one was opened in another tab since the last refresh)."""
        selected = self.selected_path()
        group = self.opened_group
        index = self.tree.indexOfTopLevelItem(group) if group is not None else -1
        if index >= 0:
            self.tree.takeTopLevelItem(index)
        self.opened_group = add_opened_group(self.tree, self.opened_models(), (PATH_ROLE, KIND_ROLE),
                                             (STATUS, MODIFIED, SIZE))
        if selected and not self.select(selected):
            self._show_details(self.tree.currentItem())

    def showEvent(self, event) -> None:
        super().showEvent(event)
        self.refresh_opened()

    def _item(self, p: Path, kind: str) -> QTreeWidgetItem | None:
        try:
            mtime = time.strftime("%Y-%m-%d %H:%M", time.localtime(p.stat().st_mtime))
        except OSError:
            return None
        item = QTreeWidgetItem([p.name, "", "", "", mtime, ""])
        item.setData(0, PATH_ROLE, str(p))
        item.setData(0, KIND_ROLE, kind)
        item.setToolTip(0, str(p))
        if kind == "runs" and not nested_runs(p):
            summary = MetricsSummary.of(tail_records(p))
            key = run_method_key(p)
            item.setText(METHOD, METHOD_BY_KEY[key].label.split(" (")[0] if key in METHOD_BY_KEY else "")
            item.setText(STATUS, run_status(p, summary))
            loss = summary.last_step.get("loss")
            if isinstance(loss, (int, float)) and loss == loss:
                item.setText(LOSS, f"{loss:.3f}")
        return item

    def _describe_group(self, item: QTreeWidgetItem) -> None:
        """A folder of runs: its runs' methods in order, and where the last one stands."""
        children = [item.child(i) for i in range(item.childCount())]
        item.setText(METHOD, " → ".join(c.text(METHOD) for c in children if c.text(METHOD)))
        for column in (STATUS, LOSS):
            item.setText(column, children[-1].text(column))
        item.setToolTip(METHOD, item.text(METHOD))

    def _all_items(self) -> list[QTreeWidgetItem]:
        out: list[QTreeWidgetItem] = []
        stack = [self.tree.topLevelItem(i) for i in range(self.tree.topLevelItemCount())]
        while stack:
            item = stack.pop(0)
            if item.data(0, PATH_ROLE):
                out.append(item)
            stack[:0] = [item.child(j) for j in range(item.childCount())]
        return out

    def items(self, kind: str) -> list[str]:
        """Paths of the listed items of one kind (runs inside a folder of runs included)."""
        return [item.data(0, PATH_ROLE) for item in self._all_items() if item.data(0, KIND_ROLE) == kind]

    def select(self, path: str) -> bool:
        for item in self._all_items():
            if item.data(0, PATH_ROLE) == str(path):
                self.tree.setCurrentItem(item)
                return True
        return False

    def selected_path(self) -> str:
        item = self.tree.currentItem()
        return item.data(0, PATH_ROLE) if item is not None and item.data(0, PATH_ROLE) else ""

    def selected_kind(self) -> str:
        item = self.tree.currentItem()
        return item.data(0, KIND_ROLE) if item is not None and item.data(0, KIND_ROLE) else ""

    def run_inside(self, path: str | Path, need: str) -> str:
        """The run an action on `path` acts on: `path` itself, or for a folder of runs the newest run inside that
        has what the action needs ("metrics" to show, "checkpoint" to load); "" when none has."""
        inner = nested_runs(path)
        if not inner:
            return str(path)
        for run in reversed(inner):
            if (need == "checkpoint" and list_committed(run)) or (need == "metrics" and tail_records(run)):
                return str(run)
        return ""

    def _resume_state(self, path: str) -> tuple[bool, str]:
        """(can Resume continue it, why not in words)."""
        p = Path(path)
        if pipeline_resumable(path):
            return True, ""
        if nested_runs(p):
            return False, "a folder of runs: select the run inside to resume it"
        if not resumable(p):
            return False, "no checkpoint to resume from yet"
        if run_outcome(p) == "completed":
            return False, "this run completed: there is nothing left to train (fine-tune it instead)"
        if run_method_key(p) == "selfplay" and recorded_method(p) != "selfplay":
            return False, "this run's run.json does not name its method (an older self-play demo): it cannot resume"
        return True, ""

    def _update_buttons(self) -> None:
        kind, path = self.selected_kind(), self.selected_path()
        has = bool(kind)
        self.open_btn.setEnabled(has)
        self.compare_btn.setEnabled(len(self.selected_runs()) >= 2)
        several = sum(bool(i.data(0, PATH_ROLE)) for i in self.tree.selectedItems()) > 1  # one name, one item
        self.rename_btn.setEnabled(has and kind not in OUTSIDE_KINDS and not several)  # another app's files stay
        self.delete_btn.setEnabled(has and kind not in OUTSIDE_KINDS)
        run = kind == "runs"
        self.plots_btn.setEnabled(run and bool(self.run_inside(path, "metrics")))
        can_resume, why = self._resume_state(path) if run else (False, "")
        self.resume_btn.setEnabled(can_resume)
        self.resume_btn.setToolTip("Continue the run from its newest good checkpoint (any method), with its curves"
                                   if can_resume or not why else f"Cannot resume: {why}")
        self.watch_btn.setEnabled(run and is_live(self.run_inside(path, "metrics") or path))  # training now
        model = self.run_inside(path, "checkpoint") if run else path
        self.generate_btn.setEnabled(kind in ("models", "exports", *OUTSIDE_KINDS) or (run and bool(model)))
        self.use_btn.setEnabled(kind == "datasets")
        self.export_btn.setEnabled(kind in ("models", *OUTSIDE_KINDS) or (run and bool(model)))
        self.merge_check.setVisible(run and bool(model) and is_adapter_run(Path(model)))
        self.evaluate_btn.setEnabled(kind in ("models", "exports", *OUTSIDE_KINDS) or (run and bool(model)))

    def _show_details(self, item: QTreeWidgetItem | None) -> None:
        self._update_buttons()
        if item is None or not item.data(0, PATH_ROLE):
            self.details.setHtml("<p style='color:#6b7280'>Select an item to see its details.</p>")
            return
        path = Path(item.data(0, PATH_ROLE))
        kind = item.data(0, KIND_ROLE)
        if kind in OUTSIDE_KINDS:
            show = {STORE_KIND: store_details_html, HUB_KIND: hub_details_html}.get(kind, opened_details_html)
            text = show(str(path))
            self.details.setHtml(text + (folder_details_html(path) if kind == HUB_KIND and path.is_dir() else ""))
            return
        item.setText(SIZE, size_text(folder_size(path)))
        self.details.setHtml(item_details_html(path, kind))

    def _double_clicked(self, item: QTreeWidgetItem) -> None:
        kind, path = item.data(0, KIND_ROLE), item.data(0, PATH_ROLE)
        if kind == "runs":
            target = self.run_inside(path, "metrics")
            if target:
                self.show_run_requested.emit(target if not pipeline_resumable(path) else path)
        elif kind in ("models", "exports", *OUTSIDE_KINDS):
            self.generate_requested.emit(path)
        elif kind == "datasets":
            self.dataset_requested.emit(path)

    def _emit_selected(self, signal, kind: str | None) -> None:
        path = self.selected_path()
        if path and (kind is None or self.selected_kind() == kind):
            signal.emit(path)

    def _emit_run(self, signal, need: str) -> None:
        """A run's action; a pipeline is shown as a pipeline, another folder of runs by the run inside that fits."""

        path = self.selected_path()
        if not path or self.selected_kind() != "runs":
            return
        target = path if is_pipeline_dir(path) else self.run_inside(path, need)
        if target:
            signal.emit(target)

    def _emit_model(self, signal) -> None:
        path = self.selected_path()
        if not path:
            return
        target = self.run_inside(path, "checkpoint") if self.selected_kind() == "runs" else path
        if target:
            signal.emit(target)

    def selected_runs(self) -> list[str]:
        """The runs selected in the list, for Compare (a folder of runs: its newest run with curves)."""
        runs = [self.run_inside(i.data(0, PATH_ROLE), "metrics") for i in self.tree.selectedItems()
                if i.data(0, KIND_ROLE) == "runs"]
        return list(dict.fromkeys(r for r in runs if r))

    # --- actions ---
    def open_compare(self) -> Any:
        """Compare the selected runs (read in the background; the button waits meanwhile). Returns the task."""
        self.compare_btn.setEnabled(False)
        self.compare_btn.setText("Comparing…")
        task = open_compare(self.ctx, self.selected_runs(), self,
                            lambda dialog: setattr(self, "compare_dialog", dialog))
        task.finished.connect(lambda: (self.compare_btn.setText("Compare…"),
                                       self.compare_btn.setEnabled(len(self.selected_runs()) >= 2)))
        return task

    def open_evaluate(self) -> Any:
        from desktop_app.ui.widgets.evaluate_view import EvaluateDialog  # lazy: start-up

        targets = [self.run_inside(path, "checkpoint") if kind == "runs" else path for path, kind in
                   ((i.data(0, PATH_ROLE), i.data(0, KIND_ROLE)) for i in self.tree.selectedItems()) if path]
        self.evaluate_dialog = EvaluateDialog(self.ctx, [t for t in dict.fromkeys(targets) if t], self)
        self.evaluate_dialog.show()
        return self.evaluate_dialog

    def open_selected(self) -> None:
        path = self.selected_path() or str(self.ctx.workspace.root)
        if self.selected_kind() in OUTSIDE_KINDS and Path(path).is_file():
            path = str(Path(path).parent)  # the folder that holds the model file, not the file itself
        QDesktopServices.openUrl(QUrl.fromLocalFile(path))

    def _busy_with(self, path: str) -> bool:
        """Refuse while any job that may read or write workspace folders runs (training, prepare,
        export, generation): renaming or deleting under it would lose work or crash it."""
        busy = [k for k in self.ctx.runner.running_kinds() if k in ("train", "prepare", "export", "generate")]
        if busy:
            self.ctx.report_error(f"Busy ({', '.join(sorted(busy))}): stop it before renaming or deleting "
                                  "workspace items.", title="Busy")
            return True
        return False

    def _rename_dialog(self) -> None:
        path = self.selected_path()
        if not path:
            return
        name, ok = QInputDialog.getText(self, "Rename", "New name:", text=Path(path).name)
        if ok and name:
            self.rename(path, name)

    def _outside_workspace(self, path: str, action: str) -> bool:
        """Refuse to rename or delete a file outside the workspace (a GGUF model of Ollama's, LM Studio's, or
        one opened from another folder): it belongs to its app or its owner."""
        if Path(os.path.abspath(path)).is_relative_to(os.path.abspath(self.ctx.workspace.root)):  # links stay inside
            return False
        self.ctx.report_error(f"{Path(path).name} is not in the workspace ({path}): it is not {action} here. "
                              "Use its own app or your file manager.", title="Not in the workspace")
        return True

    def rename(self, path: str, new_name: str) -> str | None:
        if self._outside_workspace(path, "renamed") or self._busy_with(path):
            return None
        src = Path(path)
        clean = slugify(new_name)
        dst = src.with_name(clean)
        if dst.exists():
            self.ctx.report_error(f"There is already an item called {clean!r} here.", title="Rename")
            return None
        try:
            src.rename(dst)
        except OSError as exc:
            self.ctx.report_error(f"Could not rename {src.name}: {exc.strerror or exc}", title="Rename")
            return None
        self.ctx.workspace_items_changed.emit()
        self.select(str(dst))
        return str(dst)

    def delete_selected(self) -> bool:
        path = self.selected_path()
        if not path or self._outside_workspace(path, "deleted") or self._busy_with(path):
            return False
        p = Path(path)
        if not self.ctx.confirm("Delete", f"Delete {p.name} ({size_text(folder_size(p))}) for good?\n{p}", self):
            return False
        try:
            shutil.rmtree(p) if p.is_dir() else p.unlink()
        except OSError as exc:
            self.ctx.report_error(f"Could not delete {p.name}: {exc.strerror or exc}", title="Delete")
            return False
        self.ctx.workspace_items_changed.emit()
        return True

    def _progress_text(self, text: str) -> None:
        """A file name or path on the export bar: shortened in the middle to fit, whole in the tooltip."""
        self.progress.setToolTip(text)
        width = max(40, self.progress.width() - 16)
        elided = self.progress.fontMetrics().elidedText(text, Qt.TextElideMode.ElideMiddle, width)
        self.progress.setFormat(elided.replace("%", "%%"))  # a % is the bar's own placeholder

    def export_selected(self, fmt: str | None = None) -> bool:
        kind = self.selected_kind()
        source = self.selected_path()
        if kind == "runs":
            source = self.run_inside(source, "checkpoint")
        if not source or kind not in ("runs", "models", *OUTSIDE_KINDS):
            self.ctx.report_error("Select a run (with a checkpoint) or a model to export.", title="Export")
            return False
        fmt = fmt or self.format_box.currentData()
        merge = kind == "runs" and is_adapter_run(Path(source)) and self.merge_check.isChecked()
        kind_words = self.gguf_type_box.currentData() if fmt == "gguf" else fmt
        name = f"{model_name(source)}-{'merged-' if merge else ''}{kind_words}"
        out = self.ctx.workspace.new_path("exports", name + (".zip" if fmt == "zip" else ".gguf" if fmt == "gguf"
                                                             else ""))
        controls = Controls()
        extra = {**({"merge": True} if merge else {}), **({"gguf_type": kind_words} if fmt == "gguf" else {})}
        self.task = self.ctx.runner.start("export", lambda: _export_job(source, fmt, out, controls, **extra), controls)
        self.task.produced.connect(self._on_export_item)
        self.task.failed.connect(lambda m, d: self.ctx.report_error(m, d, title="Export failed"))
        self.task.finished.connect(self._on_export_finished)
        self.progress.setValue(0)
        self._progress_text(f"exporting to {out.name}…")
        self.export_btn.setEnabled(False)
        self.cancel_export_btn.setEnabled(True)
        return True

    def _gguf(self) -> bool:
        return self.format_box.currentData() == "gguf"

    def exporting(self) -> bool:
        return self.task is not None and self.ctx.runner.is_running("export")

    def cancel_export(self) -> None:
        """Ask the export to stop: the engine removes its partial output (nothing half-written stays)."""
        if self.exporting():
            self.task.stop()

    def _on_export_item(self, item: object) -> None:
        if isinstance(item, Progress) and item.total:
            self.progress.setValue(int(1000 * item.done / item.total))
            self.progress.setFormat(f"{item.stage}: {item.done / item.total:.0%}")
        elif isinstance(item, Log):
            self.ctx.info(item.message)
        elif isinstance(item, Finished):
            if item.reason == "completed":
                self.last_export = str(item.result.get("path", ""))
                self.progress.setValue(1000)
                self._progress_text(f"exported: {self.last_export}")
            else:
                self.progress.setFormat(item.reason)
                if item.reason == "failed":
                    self.ctx.report_error(item.message or "Export failed.", title="Export failed")

    def _on_export_finished(self) -> None:
        self.cancel_export_btn.setEnabled(False)
        self._update_buttons()
        self.ctx.workspace_items_changed.emit()

    def stop_timers(self) -> None:
        pass


def _esc(text: str) -> str:
    return html.escape(text)
