"""What the Generate tab can load: runs (their newest checkpoint), each checkpoint for a side-by-side comparison,
the workspace's models and exports, and GGUF files (the workspace's, Ollama's and LM Studio's)."""

from __future__ import annotations

import html
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QComboBox, QListWidget, QListWidgetItem

from desktop_app.ui.widgets.gguf_models import add_gguf_choices


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


def list_sources(source_box: QComboBox, compare_list: QListWidget, workspace: Any) -> None:
    """Fill the model box and the list of checkpoints to compare (each emptied first) from `workspace`."""
    source_box.clear()
    compare_list.clear()
    for run in workspace.items("runs"):
        ckpts = checkpoint_folders(run)
        if ckpts:
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
    add_gguf_choices(source_box, workspace)  # the workspace's .gguf files, Ollama's and LM Studio's, "GGUF file…"
