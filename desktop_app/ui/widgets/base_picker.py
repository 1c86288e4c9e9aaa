"""The base model of a fine-tuning method: the Library's runs (with a checkpoint), models and exports (GGUF files
too), the Hugging Face cache's models, Ollama's and LM Studio's models, the recent choices, "Choose folder…" (any run,
checkpoint, export or Hugging Face model folder) and "GGUF file…", in one combo; and "Get a model…", which opens the
window's Get-a-model view (search the Hub, download; the model is listed here once it is there)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import QSettings, Qt, Signal
from PySide6.QtWidgets import QFileDialog, QHBoxLayout, QLabel, QVBoxLayout, QWidget

from desktop_app.engine.run_folder import list_committed
from desktop_app.engine.spec_base import help_text
from desktop_app.engine.specs import RunConfig
from desktop_app.ui.widgets.gguf_models import CHOOSE_GGUF, add_gguf_choices, attach_gguf_chooser, gguf_choices
from desktop_app.ui.widgets.hub_access import open_get_model_view
from desktop_app.ui.widgets.hub_library import hub_choices
from desktop_app.ui.widgets.layouts import add_items, button, path_combo
from desktop_app.ui.widgets.opened_ggufs import OPENED_KEY, opened_ggufs, remember_gguf_model

RECENT_KEY = "train/recent_base_models"
MAX_RECENT = 8
CHOOSE = "\x00choose"  # combo data of "Choose folder…"


def library_bases(workspace: Any) -> list[tuple[str, str]]:
    """(label, path) of the workspace's runs with a checkpoint, models and exports (newest first)."""
    out: list[tuple[str, str]] = []
    for run in workspace.items("runs"):
        if run.is_dir() and list_committed(run):
            out.append((f"run {run.name}", str(run)))
    for kind in ("models", "exports"):
        for p in workspace.items(kind):
            if (p.is_dir() and ((p / "config.json").exists() or (p / "model_spec.json").exists())) or \
                    (p.is_file() and p.suffix.lower() == ".gguf"):
                out.append((f"{kind[:-1]} {p.name}", str(p)))
    return out


def every_model(workspace: Any, settings: QSettings) -> list[tuple[str, str]]:
    """(label, path) of every model the Library shows: its runs, models and exports, the Hugging Face cache's models,
    the GGUF files opened before, Ollama's and LM Studio's models (each path once)."""
    found: list[tuple[str, str]] = []
    with contextlib.suppress(OSError):
        found = library_bases(workspace)
    found += hub_choices()
    found += [(f"GGUF {p.name}", str(p)) for p in opened_ggufs(settings, (OPENED_KEY, RECENT_KEY))]
    with contextlib.suppress(OSError):
        found += gguf_choices(workspace)
    return list({path: (label, path) for label, path in reversed(found)}.values())[::-1]


class BasePicker(QWidget):
    """Library runs/models/exports, recent choices and "Choose folder…" in one combo."""

    changed = Signal(str)

    def __init__(self, workspace_getter: Callable[[], Any], settings: QSettings | None = None,
                 parent: QWidget | None = None):
        super().__init__(parent)
        self._workspace = workspace_getter
        self._settings = settings
        self.box = path_combo("baseModelBox", 200, 18)
        self.box.setToolTip(help_text(RunConfig, "base_model"))
        self.path_label = QLabel("")
        self.path_label.setProperty("role", "muted")
        self.path_label.setWordWrap(True)
        self.get_model_btn = button("Get a model…", "baseGetModel", "Search the Hugging Face Hub and download a "
                                    "model to fine-tune; it is listed here once it is there")
        self.get_model_btn.clicked.connect(lambda _=False: open_get_model_view(self))
        get_row = add_items(QHBoxLayout(), self.get_model_btn, margins=0)
        get_row.addStretch(1)
        add_items(QVBoxLayout(self), self.box, self.path_label, get_row, margins=0)
        self._path = ""
        self.refresh()
        self.box.activated.connect(self._on_activated)
        attach_gguf_chooser(self.box, lambda: self._path or str(self._workspace().root), self._gguf_chosen,
                            lambda: self.set_path(self._path))

    def path(self) -> str:
        return self._path

    @property
    def settings(self) -> QSettings:
        """The settings given, else the main window's (`window().settings`), else the app's own."""
        if self._settings is not None:
            return self._settings
        window = self.window()
        window_settings = getattr(window, "settings", None) if window is not self else None
        return window_settings if isinstance(window_settings, QSettings) else QSettings("AZR", "AZR Model Trainer")

    def recent(self) -> list[str]:
        value = self.settings.value(RECENT_KEY, [])
        if isinstance(value, str):
            value = [value]
        return [str(v) for v in (value or []) if v]

    def remember(self, path: str) -> None:
        if not path:
            return
        items = [path] + [p for p in self.recent() if p != path]
        self.settings.setValue(RECENT_KEY, items[:MAX_RECENT])

    def refresh(self) -> None:
        box = self.box
        box.blockSignals(True)
        box.clear()
        box.addItem("Choose a base model…", "")
        library: list[tuple[str, str]] = []
        with contextlib.suppress(OSError):
            library = library_bases(self._workspace())
        paths = {p for _, p in library}
        if library:
            self._header("Library")
            for label, path in library:
                box.addItem(label, path)
                box.setItemData(box.count() - 1, path, Qt.ItemDataRole.ToolTipRole)
        hub = [(label, path) for label, path in hub_choices(prefix="") if path not in paths]
        if hub:
            self._header("Hugging Face cache")
            for label, path in hub:
                box.addItem(label, path)
                box.setItemData(box.count() - 1, path, Qt.ItemDataRole.ToolTipRole)
        paths |= {p for _, p in hub}
        recent = [p for p in self.recent() if p not in paths]
        if recent:
            self._header("Recent")
            for path in recent:
                box.addItem(Path(path).name or path, path)
                box.setItemData(box.count() - 1, path, Qt.ItemDataRole.ToolTipRole)
        box.insertSeparator(box.count())
        box.addItem("Choose folder…", CHOOSE)
        with contextlib.suppress(OSError):
            add_gguf_choices(box, self._workspace(), workspace_files=False)  # Ollama, LM Studio, "GGUF file…"
        self._select(self._path)
        box.blockSignals(False)

    def _header(self, text: str) -> None:
        self.box.addItem(f"— {text} —", None)
        item = self.box.model().item(self.box.count() - 1)
        item.setEnabled(False)

    def _select(self, path: str) -> None:
        i = self.box.findData(path) if path else 0
        if i < 0:
            self.box.insertItem(1, Path(path).name or path, path)
            self.box.setItemData(1, path, Qt.ItemDataRole.ToolTipRole)
            i = 1
        self.box.setCurrentIndex(i)
        self.path_label.setText(path)
        self.path_label.setVisible(bool(path))

    def set_path(self, path: str) -> None:
        path = str(path or "")
        changed = path != self._path
        self._path = path
        self.box.blockSignals(True)
        self._select(path)
        self.box.blockSignals(False)
        if changed:
            self.changed.emit(path)

    def _gguf_chosen(self, path: str) -> None:
        self.remember(path)
        remember_gguf_model(self.settings, path)  # listed in the Library, past the recent list's last 8
        self.refresh()
        self.set_path(path)

    def _on_activated(self, index: int) -> None:
        data = self.box.itemData(index)
        if data == CHOOSE_GGUF:
            return  # attach_gguf_chooser asks for the file
        if data == CHOOSE:
            start = self._path or str(self._workspace().root)
            folder = QFileDialog.getExistingDirectory(self, "Choose a base model folder (a run, checkpoint, "
                                                      "export or Hugging Face model)", start)
            if folder:
                self.remember(folder)
                self.refresh()
                self.set_path(folder)
            else:
                self.set_path(self._path)  # back to what was chosen
            return
        self.set_path(data or "")

