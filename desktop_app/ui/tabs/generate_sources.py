"""What the Generate tab can load: runs (their newest checkpoint), each checkpoint for a side-by-side comparison,
the workspace's models and exports, the Hugging Face cache's models (a model downloaded with "Get a model…") and GGUF
files (the workspace's, Ollama's and LM Studio's)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QListWidget, QListWidgetItem

from desktop_app.engine.run_folder import is_checkpoint_folder, is_run_folder, list_committed
from desktop_app.ui.widgets.gguf_models import add_gguf_choices
from desktop_app.ui.widgets.hub_library import hub_choices, hub_label, hub_model_at


def checkpoint_folders(run_dir: Path) -> list[Path]:
    """Committed checkpoints of a run (manifest.json written last marks them), oldest first."""
    folder = run_dir / "checkpoints"
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_dir() and (p / "manifest.json").exists())


def step_label(path: Path) -> str:
    """A checkpoint folder's step ("step-00000120" -> "120"); its escaped name when it has no step."""
    name = path.name
    digits = name.split("-")[-1]
    return str(int(digits)) if digits.isdigit() else html.escape(name)


def source_name(path: str, label: str = "") -> str:
    """A model's name in the chat: "RUN · step N" for a run (its newest checkpoint) or a checkpoint; "ORG/NAME" for a
    Hugging Face cache model (its folder is named by a commit); for a file (a GGUF) its label in the model list
    (Ollama's blobs have no names of their own); else the folder's name."""
    p = Path(path)
    if p.is_dir() and is_run_folder(p):
        committed = list_committed(p)
        return f"{p.name} · step {step_label(committed[-1])}" if committed else p.name
    if p.is_dir() and is_checkpoint_folder(p):
        return f"{p.parent.parent.name} · step {step_label(p)}"
    hub = hub_model_at(p)
    if hub is not None:
        return hub_label(hub)
    return (label if p.is_file() and label else "") or p.name


def list_sources(source_box: QComboBox, compare_list: QListWidget, workspace: Any) -> list[Path]:
    """Fill the model box and the list of checkpoints to compare (each emptied first) from `workspace`; the runs
    listed (those with a checkpoint), newest first."""
    source_box.clear()
    compare_list.clear()
    runs: list[Path] = []
    for run in workspace.items("runs"):
        ckpts = checkpoint_folders(run)
        if ckpts:
            runs.append(run)
            source_box.addItem(f"run {run.name} (newest checkpoint, step {step_label(ckpts[-1])})", str(run))
            for c in ckpts:
                item = QListWidgetItem(f"{run.name} · step {step_label(c)}")
                item.setData(Qt.ItemDataRole.UserRole, str(c))
                item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
                item.setCheckState(Qt.CheckState.Unchecked)
                compare_list.addItem(item)
    for kind in ("models", "exports"):
        for p in workspace.items(kind):
            if p.is_dir() and (p / "config.json").exists():
                source_box.addItem(f"{kind[:-1]} {p.name}", str(p))
    for label, path in hub_choices():  # the Hugging Face cache: a downloaded model opens in Chat at once
        source_box.addItem(label, path)
        source_box.setItemData(source_box.count() - 1, path, Qt.ItemDataRole.ToolTipRole)
    add_gguf_choices(source_box, workspace)  # the workspace's .gguf files, Ollama's and LM Studio's, "GGUF file…"
    return runs
