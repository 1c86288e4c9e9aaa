"""GGUF models in the window: the workspace's .gguf files and the models Ollama and LM Studio keep on this computer
(engine/model/model_stores.py), offered where a model is chosen (Generate tab, base picker) and listed in the
Library; a "GGUF file…" choice opens any .gguf file. The tabs call these few functions; nothing here loads weights
(store listings read headers only, cached by file size and time)."""

from __future__ import annotations

import contextlib
import html
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QFileDialog, QTreeWidget, QTreeWidgetItem, QWidget

from desktop_app.engine.model.families import family_words, works_here
from desktop_app.engine.model.model_stores import StoreModel, find_store_models
from desktop_app.ui.widgets.tree_groups import group_item

CHOOSE_GGUF = "\x00choose-gguf"  # combo data of "GGUF file…"
STORE_KIND = "store"  # the Library's kind of an Ollama / LM Studio model
GGUF_FILTER = "GGUF models (*.gguf);;All files (*)"
_cache: dict[tuple[str, int, int], StoreModel] = {}
_last: list[StoreModel] = []


def store_models() -> list[StoreModel]:
    """Ollama's and LM Studio's models (cached per file: a header is read once per size and time)."""
    global _last
    try:
        found = find_store_models()
    except OSError:
        return []
    out = []
    for m in found:
        with contextlib.suppress(OSError):
            stat = m.path.stat()
            out.append(_cache.setdefault((str(m.path), stat.st_size, int(stat.st_mtime)), m))
    _last = out
    return out


def workspace_ggufs(workspace: Any) -> list[Path]:
    """The .gguf files of the workspace's models/ and exports/ folders."""
    out: list[Path] = []
    for kind in ("models", "exports"):
        with contextlib.suppress(OSError):
            out += [p for p in workspace.items(kind) if p.is_file() and p.suffix.lower() == ".gguf"]
    return out


def gguf_choices(workspace: Any) -> list[tuple[str, str]]:
    """(label, path) of every usable GGUF model: the workspace's, then Ollama's and LM Studio's."""
    out = [(f"GGUF {p.name}", str(p)) for p in workspace_ggufs(workspace)]
    out += [(f"{m.source} {m.name} ({m.quantization})", str(m.path)) for m in store_models() if m.usable]
    return out


def choose_gguf_file(parent: QWidget, start: str) -> str:
    path, _ = QFileDialog.getOpenFileName(parent, "Choose a GGUF model file", start, GGUF_FILTER)
    return path


def add_gguf_choices(box: QComboBox, workspace: Any, *, workspace_files: bool = True) -> None:
    """Append the GGUF models and a "GGUF file…" entry to a model combo (see attach_gguf_chooser). An empty combo
    first gets a "Choose a model…" entry, so that "GGUF file…" is never the current choice by default."""
    if box.count() == 0:
        box.addItem("Choose a model…", "")
    for label, path in gguf_choices(workspace):
        if box.findData(path) >= 0 or (not workspace_files and label.startswith("GGUF ")):
            continue
        box.addItem(label, path)
        box.setItemData(box.count() - 1, path, Qt.ItemDataRole.ToolTipRole)
    box.addItem("GGUF file…", CHOOSE_GGUF)


def attach_gguf_chooser(box: QComboBox, start: Callable[[], str], chosen: Callable[[str], None] | None = None,
                        cancelled: Callable[[], None] | None = None) -> None:
    """When "GGUF file…" is picked: ask for the file, then select it (added when new), or go back to the previous
    choice when the dialog is cancelled. `chosen` / `cancelled` replace those steps (the base picker's own)."""
    previous = {"index": box.currentIndex()}

    def on_activated(index: int) -> None:
        if box.itemData(index) != CHOOSE_GGUF:
            previous["index"] = index
            return
        path = choose_gguf_file(box, start())
        if not path:
            if cancelled is not None:
                cancelled()
            else:
                box.setCurrentIndex(previous["index"] if 0 <= previous["index"] < box.count() else 0)
            return
        if chosen is not None:
            chosen(path)
            return
        i = box.findData(path)
        if i < 0:
            box.insertItem(max(0, box.count() - 1), Path(path).name, path)
            box.setItemData(box.findData(path), path, Qt.ItemDataRole.ToolTipRole)
            i = box.findData(path)
        box.setCurrentIndex(i)
        previous["index"] = i

    box.activated.connect(on_activated)


def add_store_group(tree: QTreeWidget, path_role: int, kind_role: int, source_column: int = 1,
                    size_column: int = 2) -> None:
    """The Library's group of Ollama's and LM Studio's models (only when either store exists), their source and
    size in the tree's columns of those numbers."""
    models = store_models()
    if not models:
        return
    top = group_item(tree, "Ollama and LM Studio", len(models))
    for m in models:
        size = f"{m.size / 1e9:.2f} GB" if m.size >= 1e9 else f"{m.size / 1e6:.0f} MB"
        child = QTreeWidgetItem([f"{m.name} · {m.architecture or '?'} {m.quantization}"])
        child.setText(source_column, "Ollama" if m.source == "ollama" else "LM Studio")
        child.setText(size_column, size)
        child.setData(0, path_role, str(m.path))
        child.setData(0, kind_role, STORE_KIND)
        child.setToolTip(0, m.problem or str(m.path))
        if not m.usable:
            child.setForeground(0, Qt.GlobalColor.gray)
        top.addChild(child)
    top.setExpanded(True)


def store_details_html(path: str) -> str:
    """The Library's details of a store model: source, name, architecture, weight type, size, file."""
    m = next((m for m in _last if str(m.path) == str(path)), None)
    if m is None:
        return f"<p>{html.escape(path)}</p>"
    rows = [("from", "Ollama" if m.source == "ollama" else "LM Studio"), ("family", family_words(m.architecture)),
            ("weights", m.quantization), ("parameters", f"{m.parameters / 1e6:,.1f} M"),
            ("size", f"{m.size / 1e6:,.0f} MB"), ("file", str(m.path))]
    if m.usable:
        rows.insert(2, ("works here", works_here(m.architecture, gguf_file=True)))
    if m.template is not None:
        rows.append(("Ollama template", str(m.template)))
    body = "".join(f"<tr><td><b>{html.escape(k)}</b></td><td>{html.escape(v)}</td></tr>" for k, v in rows)
    note = (f"<p style='color:#b45309'>Cannot be used here: {html.escape(m.problem)}</p>" if m.problem else
            "<p>Generate with it, fine-tune it (it is dequantized; the file is never changed) or export it.</p>")
    return f"<h3>{html.escape(m.name)}</h3><table>{body}</table>{note}"
