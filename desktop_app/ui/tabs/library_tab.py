"""Library tab: a view of the workspace folder (models, datasets, tokenizers, runs, exports)."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, QUrl, Signal
from PySide6.QtGui import QDesktopServices
from PySide6.QtWidgets import (
    QComboBox,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QProgressBar,
    QPushButton,
    QSplitter,
    QTextBrowser,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from desktop_app.engine.events import Controls, Finished, Log, Progress
from desktop_app.engine.run_folder import RUN_FILE, MetricsSummary, list_committed, tail_records
from desktop_app.engine.runs import is_live, pipeline_resumable
from desktop_app.engine.workspace import slugify
from desktop_app.ui.context import AppContext

KIND_TITLES = {"runs": "Runs", "models": "Models", "datasets": "Datasets", "tokenizers": "Tokenizers",
               "exports": "Exports"}
PATH_ROLE = Qt.ItemDataRole.UserRole
KIND_ROLE = Qt.ItemDataRole.UserRole + 1


def folder_size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    total = 0
    for p in path.rglob("*"):
        try:
            if p.is_file():
                total += p.stat().st_size
        except OSError:
            pass
    return total


def _human(n: float) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"


def _export_job(source: str, fmt: str, out: Path, controls: Controls):
    from desktop_app.engine.export.hf import export_model

    yield from export_model(source, fmt, out, controls=controls)


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
        self.tree = QTreeWidget()
        self.tree.setObjectName("libraryTree")
        self.tree.setHeaderLabels(["Name", "Modified", "Size"])
        self.tree.setColumnWidth(0, 300)
        self.tree.setColumnWidth(1, 140)
        self.tree.setAlternatingRowColors(True)
        self.details = QTextBrowser()
        self.details.setObjectName("libraryDetails")
        self.refresh_btn = QPushButton("Refresh")
        self.open_btn = QPushButton("Open folder")
        self.rename_btn = QPushButton("Rename…")
        self.delete_btn = QPushButton("Delete…")
        self.plots_btn = QPushButton("Show in plots")
        self.resume_btn = QPushButton("Resume")
        self.resume_btn.setObjectName("libraryResume")
        self.resume_btn.setToolTip("Continue the run from its newest good checkpoint (any method), with its curves")
        self.watch_btn = QPushButton("Watch live")
        self.watch_btn.setObjectName("libraryWatch")
        self.watch_btn.setToolTip("Follow the run's curves as another process (CLI, torchrun) trains it; nothing is "
                                  "written to the run")
        self.generate_btn = QPushButton("Generate with it")
        self.use_btn = QPushButton("Train on it")
        self.evaluate_btn = QPushButton("Evaluate…")  # held-out tasks, questions, perplexity (evaluate_view.py)
        self.evaluate_btn.setObjectName("libraryEvaluate")
        self.format_box = QComboBox()
        self.format_box.addItem("Hugging Face folder", "hf")
        self.format_box.addItem("Zip archive", "zip")
        self.format_box.addItem("GGUF (llama.cpp)", "gguf")
        self.export_btn = QPushButton("Export")
        self.export_btn.setProperty("primary", True)
        self.cancel_export_btn = QPushButton("Cancel")
        self.cancel_export_btn.setEnabled(False)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1000)
        self.progress.setFormat("exports go to the workspace's exports folder")
        self.progress.setValue(0)
        bar = QHBoxLayout()
        for b in (self.refresh_btn, self.open_btn, self.rename_btn, self.delete_btn):
            bar.addWidget(b)
        bar.addStretch(1)
        for b in (self.plots_btn, self.resume_btn, self.watch_btn, self.generate_btn, self.evaluate_btn, self.use_btn):
            bar.addWidget(b)
        exp = QHBoxLayout()
        exp.addWidget(QLabel("Export as"))
        exp.addWidget(self.format_box)
        exp.addWidget(self.export_btn)
        exp.addWidget(self.cancel_export_btn)
        exp.addWidget(self.progress, 1)
        right = QWidget()
        rl = QVBoxLayout(right)
        rl.setContentsMargins(0, 0, 0, 0)
        rl.addWidget(self.details, 1)
        rl.addLayout(exp)
        split = QSplitter(Qt.Orientation.Horizontal)
        split.addWidget(self.tree)
        split.addWidget(right)
        split.setSizes([560, 640])
        root = QVBoxLayout(self)
        root.addLayout(bar)
        root.addWidget(split, 1)

        self.refresh_btn.clicked.connect(lambda _=False: self.refresh())
        self.open_btn.clicked.connect(lambda _=False: self.open_selected())
        self.rename_btn.clicked.connect(lambda _=False: self._rename_dialog())
        self.delete_btn.clicked.connect(lambda _=False: self.delete_selected())
        self.plots_btn.clicked.connect(lambda _=False: self._emit_selected(self.show_run_requested, "runs"))
        self.resume_btn.clicked.connect(lambda _=False: self._emit_selected(self.resume_requested, "runs"))
        self.watch_btn.clicked.connect(lambda _=False: self._emit_selected(self.watch_requested, "runs"))
        self.generate_btn.clicked.connect(lambda _=False: self._emit_selected(self.generate_requested, None))
        self.use_btn.clicked.connect(lambda _=False: self._emit_selected(self.dataset_requested, "datasets"))
        self.evaluate_btn.clicked.connect(lambda _=False: self.open_evaluate())
        self.export_btn.clicked.connect(lambda _=False: self.export_selected())
        self.cancel_export_btn.clicked.connect(lambda _=False: self.cancel_export())
        self.tree.currentItemChanged.connect(lambda cur, _prev: self._show_details(cur))
        self.tree.itemDoubleClicked.connect(lambda item, _c: self._double_clicked(item))
        self.refresh()

    # --- listing ---
    def refresh(self) -> None:
        selected = self.selected_path()
        self.tree.clear()
        ws = self.ctx.workspace
        for kind, title in KIND_TITLES.items():
            items = ws.items(kind)
            top = QTreeWidgetItem([f"{title} ({len(items)})", "", ""])
            top.setFirstColumnSpanned(False)
            font = top.font(0)
            font.setBold(True)
            top.setFont(0, font)
            self.tree.addTopLevelItem(top)
            for p in items:
                try:
                    mtime = time.strftime("%Y-%m-%d %H:%M", time.localtime(p.stat().st_mtime))
                except OSError:
                    continue
                child = QTreeWidgetItem([p.name, mtime, ""])
                child.setData(0, PATH_ROLE, str(p))
                child.setData(0, KIND_ROLE, kind)
                child.setToolTip(0, str(p))
                top.addChild(child)
                if str(p) == selected:
                    self.tree.setCurrentItem(child)
            top.setExpanded(True)
        self._update_buttons()

    def items(self, kind: str) -> list[str]:
        out = []
        for i in range(self.tree.topLevelItemCount()):
            top = self.tree.topLevelItem(i)
            for j in range(top.childCount()):
                if top.child(j).data(0, KIND_ROLE) == kind:
                    out.append(top.child(j).data(0, PATH_ROLE))
        return out

    def select(self, path: str) -> bool:
        for i in range(self.tree.topLevelItemCount()):
            top = self.tree.topLevelItem(i)
            for j in range(top.childCount()):
                if top.child(j).data(0, PATH_ROLE) == str(path):
                    self.tree.setCurrentItem(top.child(j))
                    return True
        return False

    def selected_path(self) -> str:
        item = self.tree.currentItem()
        return item.data(0, PATH_ROLE) if item is not None and item.data(0, PATH_ROLE) else ""

    def selected_kind(self) -> str:
        item = self.tree.currentItem()
        return item.data(0, KIND_ROLE) if item is not None and item.data(0, KIND_ROLE) else ""

    def _update_buttons(self) -> None:
        kind = self.selected_kind()
        has = bool(kind)
        for b in (self.open_btn, self.rename_btn, self.delete_btn):
            b.setEnabled(has)
        self.plots_btn.setEnabled(kind == "runs")
        self.resume_btn.setEnabled(kind == "runs" and (resumable(Path(self.selected_path()))
                                                       or pipeline_resumable(self.selected_path())))
        self.watch_btn.setEnabled(kind == "runs")
        self.generate_btn.setEnabled(kind in ("runs", "models", "exports"))
        self.use_btn.setEnabled(kind == "datasets")
        self.evaluate_btn.setEnabled(kind in ("runs", "models", "exports"))
        self.export_btn.setEnabled(kind in ("runs", "models"))

    def _show_details(self, item: QTreeWidgetItem | None) -> None:
        self._update_buttons()
        if item is None or not item.data(0, PATH_ROLE):
            self.details.setHtml("<p style='color:#6b7280'>Select an item to see its details.</p>")
            return
        path = Path(item.data(0, PATH_ROLE))
        kind = item.data(0, KIND_ROLE)
        item.setText(2, _human(folder_size(path)))
        parts = [f"<h3>{_esc(path.name)}</h3><p style='color:#6b7280'>{_esc(str(path))}</p>"]
        for name in ("run.json", "manifest.json", "model_spec.json", "config.json"):
            f = path / name
            if f.is_file() and f.stat().st_size < 200_000:
                try:
                    data = json.loads(f.read_text(encoding="utf-8"))
                    parts.append(f"<b>{name}</b><pre>{_esc(json.dumps(data, indent=2)[:4000])}</pre>")
                except (OSError, ValueError):
                    parts.append(f"<b>{name}</b>: unreadable")
                break
        if kind == "runs":
            if is_live(path):
                parts.insert(1, "<p><b>● live</b>: training now, in a process of its own (Watch live follows it)</p>")
            parts.insert(1, _run_summary(path))
            ckpts = sorted((path / "checkpoints").glob("step-*")) if (path / "checkpoints").is_dir() else []
            parts.insert(1, f"<p>{len(ckpts)} checkpoint(s)"
                            + (f"; newest: {_esc(ckpts[-1].name)}" if ckpts else "") + "</p>")
        self.details.setHtml("".join(parts))

    def _double_clicked(self, item: QTreeWidgetItem) -> None:
        kind = item.data(0, KIND_ROLE)
        if kind == "runs":
            self.show_run_requested.emit(item.data(0, PATH_ROLE))
        elif kind in ("models", "exports"):
            self.generate_requested.emit(item.data(0, PATH_ROLE))
        elif kind == "datasets":
            self.dataset_requested.emit(item.data(0, PATH_ROLE))

    def _emit_selected(self, signal, kind: str | None) -> None:
        path = self.selected_path()
        if path and (kind is None or self.selected_kind() == kind):
            signal.emit(path)

    # --- actions ---
    def open_evaluate(self) -> Any:
        from desktop_app.ui.widgets.evaluate_view import EvaluateDialog

        self.evaluate_dialog = EvaluateDialog(self.ctx, [self.selected_path()] if self.selected_path() else [], self)
        self.evaluate_dialog.show()
        return self.evaluate_dialog

    def open_selected(self) -> None:
        path = self.selected_path() or str(self.ctx.workspace.root)
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

    def rename(self, path: str, new_name: str) -> str | None:
        if self._busy_with(path):
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
        if not path or self._busy_with(path):
            return False
        p = Path(path)
        if not self.ctx.confirm("Delete", f"Delete {p.name} ({_human(folder_size(p))}) for good?\n{p}", self):
            return False
        try:
            shutil.rmtree(p) if p.is_dir() else p.unlink()
        except OSError as exc:
            self.ctx.report_error(f"Could not delete {p.name}: {exc.strerror or exc}", title="Delete")
            return False
        self.ctx.workspace_items_changed.emit()
        return True

    def export_selected(self, fmt: str | None = None) -> bool:
        source = self.selected_path()
        if not source or self.selected_kind() not in ("runs", "models"):
            self.ctx.report_error("Select a run or a model to export.", title="Export")
            return False
        fmt = fmt or self.format_box.currentData()
        name = f"{Path(source).name}-{fmt}"
        out = self.ctx.workspace.new_path("exports", name + (".zip" if fmt == "zip" else ".gguf" if fmt == "gguf"
                                                             else ""))
        controls = Controls()
        self.task = self.ctx.runner.start("export", lambda: _export_job(source, fmt, out, controls), controls)
        self.task.produced.connect(self._on_export_item)
        self.task.failed.connect(lambda m, d: self.ctx.report_error(m, d, title="Export failed"))
        self.task.finished.connect(self._on_export_finished)
        self.progress.setValue(0)
        self.progress.setFormat(f"exporting to {out.name}…")
        self.export_btn.setEnabled(False)
        self.cancel_export_btn.setEnabled(True)
        return True

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
                self.progress.setFormat(f"exported: {self.last_export}")
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
    import html

    return html.escape(text)


def run_outcome(run: Path) -> str | None:
    """How the run's last session ended (completed, stopped, failed, ...), or None when it never ended (a crash)
    or has no metrics. Read from its metrics.jsonl, without loading the engine."""
    finished = MetricsSummary.of(tail_records(run)).finished
    return str(finished.get("reason", "")) if finished is not None else None


def resumable(run: Path) -> bool:
    """A run that Resume can continue: its run.json and at least one committed checkpoint are there."""
    return (run / RUN_FILE).is_file() and bool(list_committed(run))


def _run_summary(run: Path) -> str:
    """Last training loss and best validation loss, read from the tail of metrics.jsonl."""
    summary = MetricsSummary.of(tail_records(run))
    last_step, best_val, finished = summary.last_step, summary.best_val_loss, summary.finished
    bits = []
    if last_step:
        bits.append(f"step {last_step.get('step', 0):,} of {last_step.get('total_steps', 0):,}")
        if isinstance(last_step.get("loss"), (int, float)):
            bits.append(f"training loss {last_step['loss']:.3f}")
    if best_val is not None:
        bits.append(f"best validation loss {best_val:.3f}")
    if finished:
        bits.append(f"ended: {_esc(str(finished.get('reason', '')))}")
    return f"<p><b>{' · '.join(bits)}</b></p>" if bits else ""

