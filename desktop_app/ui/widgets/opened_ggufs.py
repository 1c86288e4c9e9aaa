"""GGUF models opened in the window, listed again in the Library: a file chosen as a chat model (Generate tab) or as
the base of a fine-tuning (the base picker's recent choices) is remembered in the settings, and the Library's
"GGUF models you opened" group lists those that still exist, with where each lives: the file, or the Ollama /
LM Studio model it came from. Nothing here loads weights: a model's header is read only when it is selected."""

from __future__ import annotations

import contextlib
import html
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QTreeWidget, QTreeWidgetItem, QWidget

from desktop_app.engine.errors import UserError
from desktop_app.engine.model.families import family_words, works_here
from desktop_app.engine.model.gguf_file import check_loadable, read_header
from desktop_app.engine.model.model_stores import StoreModel, lmstudio_root, ollama_root
from desktop_app.engine.workspace import remembered_gguf_files
from desktop_app.ui.widgets.gguf_models import store_models
from desktop_app.ui.widgets.tree_groups import group_item

OPENED_KEY = "library/opened_gguf_models"  # settings key: GGUF files opened as a chat model or a base, newest first
MAX_OPENED = 50
GGUF_KIND = "gguf"  # the Library's kind of a GGUF model opened from outside the workspace
GROUP_TITLE = "GGUF models you opened"


def window_settings(widget: QWidget) -> QSettings:
    """The main window's settings (`window().settings`, tests give their own), else the app's."""
    settings = getattr(widget.window(), "settings", None)
    return settings if isinstance(settings, QSettings) else QSettings("AZR", "AZR Model Trainer")


def settings_paths(settings: QSettings, key: str) -> list[str]:
    """The list of paths kept under `key` (one path comes back from QSettings as a plain string)."""
    value = settings.value(key, [])
    if isinstance(value, str):
        value = [value]
    return [str(v) for v in value if v] if isinstance(value, (list, tuple)) else []


def remember_gguf_model(settings: QSettings, path: str | Path) -> bool:
    """Remember that the GGUF file `path` was opened (newest first); anything else (a folder, a run) is ignored.
    True when it was remembered."""
    if not path or not remembered_gguf_files([path]):
        return False
    items = [str(path)] + [p for p in settings_paths(settings, OPENED_KEY) if p != str(path)]
    settings.setValue(OPENED_KEY, items[:MAX_OPENED])
    return True


def opened_ggufs(settings: QSettings, keys: Sequence[str], exclude: Iterable[str | Path] = ()) -> list[Path]:
    """The GGUF files remembered under the settings `keys` that still exist, less the `exclude`d ones."""
    return remembered_gguf_files([p for key in keys for p in settings_paths(settings, key)], exclude)


def _in_store(path: Path) -> bool:
    roots = [r for r in (ollama_root(), lmstudio_root()) if r is not None]
    return any(path.resolve().is_relative_to(r.resolve()) for r in roots)


def store_origins(paths: Iterable[Path]) -> dict[str, StoreModel]:
    """The Ollama / LM Studio model of each path that lives in one of their stores (the stores are read only when
    a path is under one)."""
    inside = {str(p) for p in paths if _in_store(p)}
    return {str(m.path): m for m in store_models() if str(m.path) in inside} if inside else {}


def source_words(origin: StoreModel | None) -> str:
    """Where a GGUF model comes from in a word or two: Ollama, LM Studio, or a plain GGUF file."""
    if origin is None:
        return "GGUF file"
    return "Ollama" if origin.source == "ollama" else "LM Studio"


def where_it_lives(path: Path, origin: StoreModel | None) -> str:
    """Where to find it again: the store's model name, or the folder of the file."""
    return f"{source_words(origin)} model {origin.name}" if origin is not None else f"a file in {path.parent}"


def add_opened_group(tree: QTreeWidget, paths: Sequence[Path], roles: tuple[int, int],
                     columns: tuple[int, int, int]) -> QTreeWidgetItem | None:
    """The Library's group of opened GGUF models (none when `paths` is empty): each with its name, where it lives
    (`columns`: source, modified and size columns), and its path and kind in the item's data `roles`."""
    if not paths:
        return None
    path_role, kind_role = roles
    source_column, modified_column, size_column = columns
    origins = store_origins(paths)
    top = group_item(tree, GROUP_TITLE, len(paths))
    for path in paths:
        origin = origins.get(str(path))
        child = QTreeWidgetItem([origin.name if origin is not None else path.name])
        child.setText(source_column, source_words(origin))
        with contextlib.suppress(OSError):
            stat = path.stat()
            child.setText(modified_column, time.strftime("%Y-%m-%d %H:%M", time.localtime(stat.st_mtime)))
            child.setText(size_column, _size(stat.st_size))
        child.setData(0, path_role, str(path))
        child.setData(0, kind_role, GGUF_KIND)
        child.setToolTip(0, f"{where_it_lives(path, origin)}\n{path}")
        top.addChild(child)
    top.setExpanded(True)
    return top


def opened_details_html(path: str | Path) -> str:
    """The Library's details of an opened GGUF model: where it lives, its file, and what its header says."""

    p = Path(path)
    origin = store_origins([p]).get(str(p))
    rows = [("where", where_it_lives(p, origin)), ("file", str(p))]
    problem = ""
    try:
        header = read_header(p)
        rows += [("family", family_words(header.architecture)), ("weights", header.quantization),
                 ("parameters", f"{header.parameters / 1e6:,.1f} M"), ("size", _size(header.file_size))]
        check_loadable(header)
        rows.insert(3, ("works here", works_here(header.architecture, gguf_file=True)))
    except UserError as exc:
        problem = str(exc)
    body = "".join(f"<tr><td><b>{html.escape(k)}</b></td><td>{html.escape(v)}</td></tr>" for k, v in rows)
    note = (f"<p style='color:#b45309'>Cannot be used here: {html.escape(problem)}</p>" if problem else
            "<p>You opened this model in the window. Generate with it, fine-tune it (it is dequantized; the file is "
            "never changed) or export it.</p>")
    name = origin.name if origin is not None else p.name
    return f"<h3>{html.escape(name)}</h3><table>{body}</table>{note}"


def _size(n: float) -> str:
    """A size as the Library's Size column writes it (one decimal, decimal units)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} B"
