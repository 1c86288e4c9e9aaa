"""The models already in the Hugging Face cache (shared with other tools), listed offline: what a pull left there
and what other programs downloaded, as far as the app can open it; and a model named by its Hub id (ORG/NAME, or
ORG/NAME:QUANT for one GGUF file of a repository) found there, so every command takes the name people use.

Listed: snapshot folders with a config.json of a causal LM that needs no remote code, safetensors weights (every
shard of an index) and a tokenizer; and GGUF files. Half-downloaded files (.incomplete blobs) never appear in a
snapshot, so they are not listed. Cheap: configs and GGUF magic bytes are read, no weights; no network.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from desktop_app.engine.errors import UserError
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


# --- a model named by its Hub id ----------------------------------------------------------------------------------

_TAG = re.compile(r"^(?:hf\.co/|huggingface\.co/)?([A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95})"
                  r"(?::([A-Za-z0-9._-]{1,64}))?$")


def hub_reference(text: str) -> tuple[str, str] | None:
    """(repo id, quantization tag or "") of `ORG/NAME`, `ORG/NAME:Q4_K_M` or Ollama's `hf.co/ORG/NAME:Q4_K_M`; None for
    anything else (a path)."""
    match = _TAG.match(str(text).strip())
    if match is None or str(text).startswith((".", "/", "~")):
        return None
    return match.group(1), match.group(2) or ""


def cached_model_path(text: str, cache_dir: Path | None = None) -> Path:
    """The local path of a model named by its Hub id, from the Hugging Face cache, offline: its newest snapshot
    folder (safetensors), or with a tag (`ORG/NAME:Q4_K_M`) the GGUF file whose name holds it; a GGUF-only repository
    with one file: that file. UserError in one line when it is not in the cache (with the pull command) or the tag
    is missing or ambiguous (naming the files)."""
    reference = hub_reference(text)
    if reference is None:
        raise UserError(f"{text} is not a Hugging Face Hub id (ORG/NAME, or ORG/NAME:QUANT for a GGUF file)")
    repo_id, tag = reference
    found = [m for m in cached_models(cache_dir) if m.repo_id.lower() == repo_id.lower()]
    if not found:
        pull = f"python -m desktop_app models pull {repo_id}" + (f" --file '*{tag}*.gguf'" if tag else "")
        raise UserError(f"there is no folder {text} here, and {repo_id} is not in the Hugging Face cache "
                        f"({cache_dir or hub_cache_dir()}): get it once with `{pull}` (nothing is downloaded unless "
                        "you ask)")
    ggufs = [m for m in found if m.kind == "gguf"]
    if tag:
        chosen = [m for m in ggufs if tag.lower() in m.path.name.lower()]
        if len(chosen) == 1:
            return chosen[0].path
        names = ", ".join(m.path.name for m in ggufs) or "none"
        raise UserError(f"{repo_id}:{tag} names {'several' if chosen else 'no'} GGUF file(s) of the cached "
                        f"{repo_id} ({names}): give a tag that names one")
    folders = [m for m in found if m.kind == "hf"]
    if folders:
        return folders[0].path  # the newest snapshot
    if len(ggufs) == 1:
        return ggufs[0].path
    tags = ", ".join(m.path.name for m in ggufs)
    raise UserError(f"{repo_id} holds several GGUF files in the cache ({tags}): name one as {repo_id}:QUANT, e.g. "
                    f"{repo_id}:Q4_K_M")
