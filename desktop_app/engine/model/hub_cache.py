"""The models already in the Hugging Face cache (shared with other tools), listed offline: what a pull left there
and what other programs downloaded, as far as the app can open it; and a model named by its Hub id (ORG/NAME, or
ORG/NAME:QUANT for one GGUF file of a repository) found there, so every command takes the name people use.

Listed: snapshot folders with a config.json of a causal LM that needs no remote code, safetensors weights (every
shard of an index) and a tokenizer; and GGUF files. Half-downloaded files (.incomplete blobs) never appear in a
snapshot, so they are not listed. Cheap: configs and GGUF magic bytes are read, no weights; no network.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from desktop_app.engine.errors import UserError
from desktop_app.engine.model.gguf_file import is_gguf_file
from desktop_app.engine.paths import cli_exe

TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")
_LM_HEADS = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")


class NotCached(UserError):
    """A Hub id whose repository (or the GGUF file its tag or pattern names) is not in the Hugging Face cache; the
    sentence gives the pull command."""


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


def resolve_model_reference(text: str, file: str = "") -> Path:
    """A model the user names, as a local path, offline: an existing path stays itself (a local folder that happens
    to look like ORG/NAME wins); a Hub id pulled earlier (ORG/NAME, ORG/NAME:QUANT) is its copy in the Hugging Face
    cache (cached_model_path), `file` a pattern that picks one GGUF file of it; anything else comes back as given,
    for the caller's own "does not exist". Never the network."""
    path = Path(text).expanduser()
    if file and (path.exists() or hub_reference(text) is None):
        raise UserError(f"a file pattern ({file}) picks a GGUF file of a Hub model pulled earlier (ORG/NAME), but "
                        f"{text} is {'a local path' if path.exists() else 'not a Hub id'}: name the .gguf file "
                        "itself, or give ORG/NAME with the pattern")
    if path.exists() or hub_reference(text) is None:
        return path
    return cached_model_path(text, file=file)


def cached_files(repo_id: str, files: Sequence[str], cache_dir: Path | None = None) -> Path | None:
    """The cached model (a snapshot folder, or its GGUF file) whose snapshot holds every one of `files` (a file set
    Get a model offers), newest first; None when the cache lacks any of them. Offline: a download of an earlier
    session is found as one of this session's."""
    for model in cached_models(cache_dir):
        folder = model.path if model.kind == "hf" else model.path.parent
        if model.repo_id.lower() == repo_id.lower() and files and all((folder / f).is_file() for f in files):
            ggufs = [f for f in files if f.lower().endswith(".gguf")]
            return folder / ggufs[0] if ggufs else model.path
    return None


def cached_model_path(text: str, cache_dir: Path | None = None, file: str = "") -> Path:
    """The local path of a model named by its Hub id, from the Hugging Face cache, offline: its newest snapshot
    folder (safetensors), or with a tag (`ORG/NAME:Q4_K_M`) the GGUF file whose name holds it, or with `file` the GGUF
    file that shell-style pattern matches (`*Q4_K_M.gguf`, any case); a GGUF-only repository with one file: that file.
    UserError in one line when it is not in the cache (with the pull command) or the tag or pattern names no file or
    several (naming the cached files)."""
    reference = hub_reference(text)
    if reference is None:
        raise UserError(f"{text} is not a Hugging Face Hub id (ORG/NAME, or ORG/NAME:QUANT for a GGUF file)")
    repo_id, tag = reference
    if tag and file:
        raise UserError(f"{text} names its GGUF file by the tag {tag} already: drop the file pattern ({file}), or "
                        f"give {repo_id} with the pattern")
    found = [m for m in cached_models(cache_dir) if m.repo_id.lower() == repo_id.lower()]
    if not found:
        raise NotCached(f"there is no folder {text} here, and {repo_id} is not in the Hugging Face cache "
                        f"({cache_dir or hub_cache_dir()}): get it once with `{pull_command(repo_id, tag, file)}` "
                        "(nothing is downloaded unless you ask)")
    ggufs = newest_per_file([m for m in found if m.kind == "gguf"])
    if tag or file:
        chosen = matching_tag(ggufs, tag) if tag else [m for m in ggufs if matches_pattern(m, file)]
        return one_gguf(repo_id, ggufs, chosen, (tag, file))
    folders = [m for m in found if m.kind == "hf"]
    if folders:
        return folders[0].path  # the newest snapshot
    if len(ggufs) == 1:
        return ggufs[0].path
    names = ", ".join(m.path.name for m in ggufs)
    example = quant_tag(ggufs[0].path.name) or "Q4_K_M"
    raise UserError(f"{repo_id} holds several GGUF files in the cache ({names}): name one as {repo_id}:QUANT, e.g. "
                    f"{repo_id}:{example}, or pick it with a file pattern (--file '*{example}.gguf')")


def pull_command(repo_id: str, tag: str = "", file: str = "") -> str:
    """The command that puts `repo_id` (or its GGUF file of that tag or pattern) into the Hugging Face cache."""
    pattern = file or (f"*{tag}*.gguf" if tag else "")
    return f"{cli_exe()} models pull {repo_id}" + (f" --file {shlex.quote(pattern)}" if pattern else "")


def newest_per_file(ggufs: list[CachedModel]) -> list[CachedModel]:
    """One entry per GGUF file name: the newest revision's (cached_models lists newest first)."""
    seen: dict[str, CachedModel] = {}
    for model in ggufs:
        seen.setdefault(repo_file(model).lower(), model)
    return list(seen.values())


def repo_file(model: CachedModel) -> str:
    """The file's path inside its repository (`sub/x-Q4_K_M.gguf`), from its place in the snapshot folder."""
    parts = model.path.parts
    for i in range(len(parts) - 2, 0, -1):
        if parts[i] == model.revision and parts[i - 1] == "snapshots":
            return "/".join(parts[i + 1:])
    return model.path.name


def matching_tag(ggufs: list[CachedModel], tag: str) -> list[CachedModel]:
    """The files whose name holds `tag` as a whole quantization name (Q4_K names Q4_K but not Q4_K_M), any case; when
    none does, those whose name holds it anywhere."""
    whole = re.compile(rf"(?<![A-Za-z0-9_]){re.escape(tag)}(?![A-Za-z0-9_])", re.IGNORECASE)
    return [m for m in ggufs if whole.search(m.path.name)] or \
        [m for m in ggufs if tag.lower() in m.path.name.lower()]


def matches_pattern(model: CachedModel, pattern: str) -> bool:
    """A shell-style pattern, as `models pull --file` takes it, over the file's path in the repository, any case."""
    return any(fnmatch.fnmatchcase(name.lower(), pattern.lower()) for name in (repo_file(model), model.path.name))


def one_gguf(repo_id: str, ggufs: list[CachedModel], chosen: list[CachedModel], asked: tuple[str, str]) -> Path:
    """The one GGUF file a tag or pattern (`asked`: (tag, pattern)) chose; UserError naming the files otherwise."""
    if len(chosen) == 1:
        return chosen[0].path
    tag, file = asked
    what = f"{repo_id}:{tag}" if tag else f"the file pattern {file} of {repo_id}"
    if chosen:
        names = ", ".join(m.path.name for m in chosen)
        raise UserError(f"{what} names several GGUF files of the cached {repo_id} ({names}): name just one, e.g. "
                        f"{repo_id}:{quant_tag(chosen[0].path.name) or tag or 'Q4_K_M'}")
    names = ", ".join(m.path.name for m in ggufs) or "none"
    raise NotCached(f"{what} names no GGUF file of the cached {repo_id} (cached GGUF files: {names}): name one of "
                    f"those, or get it once with `{pull_command(repo_id, tag, file)}`")


_QUANT = re.compile(r"(?<![A-Za-z0-9])((?:I?Q\d(?:_[A-Z0-9]+)*)|BF16|F16|F32)(?![A-Za-z0-9])", re.IGNORECASE)


def quant_tag(file_name: str) -> str:
    """The quantization a GGUF file's name says (`x-Q4_K_M.gguf` -> Q4_K_M), as people write it after a colon; ""
    when the name says none."""
    found = _QUANT.findall(file_name)
    return found[-1].upper() if found else ""


def model_name(path: str | Path) -> str:
    """A model's name for people (a new run's folder name): NAME of a Hub snapshot (never its 40-character commit
    hash), a GGUF file's stem, a checkpoint's run and step, else the folder's name."""
    path = Path(path)
    repo = cache_repo_of(path)
    if repo:
        name = repo.split("/")[-1]
        return f"{name}-{path.stem}" if path.suffix.lower() == ".gguf" and path.stem != name else name
    if path.suffix.lower() == ".gguf":
        return path.stem
    if path.parent.name == "checkpoints":
        return f"{path.parent.parent.name}-{path.name}"
    return path.name


def cache_repo_of(path: str | Path) -> str:
    """ORG/NAME of a path inside a Hugging Face cache (`models--ORG--NAME/snapshots/...`); "" for any other path."""
    parts = Path(path).parts
    for i, part in enumerate(parts[:-1]):
        if part.startswith("models--") and parts[i + 1] in ("snapshots", "blobs") and "--" in part[8:]:
            return part[len("models--"):].replace("--", "/")
    return ""
