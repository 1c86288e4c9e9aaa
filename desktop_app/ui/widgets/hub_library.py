"""Models in the Hugging Face cache (engine.model.hub_cache.cached_models: what the Get-a-model view downloaded, and
what other tools put there), offered where a model is chosen (Generate tab, base picker) and listed in the Library. The
cache is shared with other tools: it is listed, never renamed or deleted here. Nothing here touches the network."""

from __future__ import annotations

import html
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtWidgets import QTreeWidget, QTreeWidgetItem

from desktop_app.engine.model.hub_cache import cached_models
from desktop_app.ui.widgets.hub_words import size_words
from desktop_app.ui.widgets.tree_groups import group_item

if TYPE_CHECKING:
    from desktop_app.engine.model.hub_cache import CachedModel

log = logging.getLogger(__name__)

HUB_KIND = "hub"  # the Library's kind of a model in the Hugging Face cache
GROUP_TITLE = "Hugging Face cache"


def hub_models() -> list[CachedModel]:
    """The cache's usable models, newest first ([] when the cache cannot be read: listing must never fail)."""

    try:
        return list(cached_models())
    except OSError as exc:
        log.warning("could not read the Hugging Face cache: %s", exc)
        return []


def hub_label(model: CachedModel) -> str:
    """ "ORG/NAME", or "ORG/NAME · FILE.gguf" for one GGUF file of a repository."""
    return model.repo_id + (f" · {Path(model.path).name}" if model.kind == "gguf" else "")


def hub_model_at(path: str | Path) -> CachedModel | None:
    """The cached Hub model at `path` (a snapshot folder or a .gguf file in one), None for any other path."""
    return next((m for m in hub_models() if str(m.path) == str(path)), None)


def hub_choices(prefix: str = "Hugging Face ") -> list[tuple[str, str]]:
    """(label, path) of each cached model, for a model combo (each label after `prefix`)."""
    return [(prefix + hub_label(m), str(m.path)) for m in hub_models()]


def add_hub_group(tree: QTreeWidget, roles: tuple[int, int], columns: Sequence[int]) -> QTreeWidgetItem | None:
    """The Library's group of cached Hub models (none when the cache holds none): each with its name, where it comes
    from, its date and size in `columns` (source, modified, size), its path and kind in the item's data `roles`."""
    models = hub_models()
    if not models:
        return None
    path_role, kind_role = roles
    source_column, modified_column, size_column = columns
    top = group_item(tree, GROUP_TITLE, len(models))
    for m in models:
        child = QTreeWidgetItem([hub_label(m)])
        child.setText(source_column, "Hugging Face")
        child.setText(size_column, size_words(m.size))
        try:
            mtime = Path(m.path).stat().st_mtime
            child.setText(modified_column, time.strftime("%Y-%m-%d %H:%M", time.localtime(mtime)))
        except OSError:
            pass
        child.setData(0, path_role, str(m.path))
        child.setData(0, kind_role, HUB_KIND)
        child.setToolTip(0, f"{m.repo_id} in the Hugging Face cache\n{m.path}")
        top.addChild(child)
    top.setExpanded(True)
    return top


def hub_details_html(path: str | Path) -> str:
    """The Library's details of a cached Hub model: where it comes from, its revision, size and files."""
    m = hub_model_at(path)
    if m is None:
        return f"<p>{html.escape(str(path))}</p>"
    rows = [("from", f"the Hugging Face Hub ({m.repo_id}), kept in its cache, shared with other tools"),
            ("weights", "GGUF file" if m.kind == "gguf" else "Hugging Face folder (safetensors)"),
            ("revision", m.revision[:12] or "unknown"), ("size", size_words(m.size)), ("where", str(m.path))]
    body = "".join(f"<tr><td><b>{html.escape(k)}</b></td><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return (f"<h3>{html.escape(hub_label(m))}</h3><table>{body}</table><p>Generate with it, fine-tune it or export "
            "it; it opens without the network.</p>")
