"""The models already in the Hugging Face cache (shared with other tools), listed offline: what a pull left there
and what other programs downloaded, as far as the app can open it.

Listed: snapshot folders with a config.json of a causal LM that needs no remote code, safetensors weights (every
shard of an index) and a tokenizer; and GGUF files. Half-downloaded files (.incomplete blobs) never appear in a
snapshot, so they are not listed. Cheap: configs and GGUF magic bytes are read, no weights; no network.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from desktop_app.engine.model.gguf_file import is_gguf_file

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
_LM_HEADS = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")


@dataclass(frozen=True)
class CachedModel:
    repo_id: str
    path: Path  # a snapshot folder (config.json + safetensors) or a .gguf file in one
    kind: str  # "hf" | "gguf"
    size: int  # bytes on disk
    revision: str  # the commit


def hub_cache_dir() -> Path:
    """The Hugging Face cache of now: HF_HUB_CACHE, else HF_HOME/hub, else huggingface_hub's default (read at call
    time, unlike huggingface_hub's constants, so a changed environment is seen)."""
    from huggingface_hub import constants

    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    return Path(constants.HF_HUB_CACHE).expanduser()


def cached_models(cache_dir: Path | None = None) -> list[CachedModel]:
    """Every usable model of the cache, newest first (huggingface_hub.scan_cache_dir; never the network)."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound

    folder = Path(cache_dir) if cache_dir is not None else hub_cache_dir()
    try:
        info = scan_cache_dir(folder)
    except (CacheNotFound, OSError, ValueError):
        return []
    found: list[tuple[float, CachedModel]] = []
    for repo in info.repos:
        if repo.repo_type != "model":
            continue
        for rev in repo.revisions:
            files = {f.file_path.relative_to(rev.snapshot_path).as_posix(): f for f in rev.files}
            found += [(rev.last_modified, m) for m in models_of(repo.repo_id, rev, files)]
    return [m for _, m in sorted(found, key=lambda item: item[0], reverse=True)]


def models_of(repo_id: str, rev: Any, files: dict[str, Any]) -> list[CachedModel]:
    """The usable models of one snapshot: itself as an HF folder, and each GGUF file in it."""
    out = []
    weights = [name for name in files if "/" not in name and name.endswith(".safetensors")]
    if weights and usable_folder(Path(rev.snapshot_path), weights):
        size = sum(f.size_on_disk for name, f in files.items() if "/" not in name and not name.endswith(".gguf"))
        out.append(CachedModel(repo_id, Path(rev.snapshot_path), "hf", size, rev.commit_hash))
    for name, f in sorted(files.items()):
        if name.lower().endswith(".gguf") and is_gguf_file(f.file_path):
            out.append(CachedModel(repo_id, Path(f.file_path), "gguf", f.size_on_disk, rev.commit_hash))
    return out


def usable_folder(folder: Path, weights: list[str]) -> bool:
    """A causal LM config without remote code, a tokenizer, and every shard its index names."""
    config = read_json(folder / "config.json")
    if not config or config.get("auto_map") or not config.get("model_type"):
        return False
    architectures = config.get("architectures") or []
    if architectures and not any(str(a).endswith(_LM_HEADS) for a in architectures):
        return False
    if not any((folder / name).is_file() for name in TOKENIZER_FILES):
        return False
    index = read_json(folder / "model.safetensors.index.json")
    shards = set((index or {}).get("weight_map", {}).values())
    return all((folder / shard).is_file() for shard in shards)


def read_json(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None
