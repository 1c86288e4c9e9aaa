"""One Hub repository as a person decides by: its parameters, what it can be downloaded as (file sets with their
sizes), licence, gating, chat template, last update, and why this app cannot use it, if so (shown, not hidden).

A file set is what one download fetches: the safetensors weights with the configs and tokenizer files that go with
them, or one GGUF quantization (one file, or the parts of a split one). Its `patterns` are exact file names, so a
pull fetches exactly the set whose size was shown.
"""

from __future__ import annotations

import glob
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from desktop_app.engine.errors import UserError
from desktop_app.engine.hub.errors import hub_error
from desktop_app.engine.hub.network import hub_api, hub_endpoint, online
from desktop_app.engine.model.folders import check_causal_lm, looks_like_hub_id
from desktop_app.engine.model.hub_cache import hub_cache_dir
from desktop_app.engine.model.sizing import count_parameters, spec_for_estimate

SAFETENSORS_LABEL = "Safetensors (full precision)"
# What a causal LM needs beside its weights: configs, tokenizer files, chat template (never pickles)
SUPPORT_SUFFIXES = (".json", ".txt", ".jinja", ".tiktoken", ".model")
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".ckpt")
# llama.cpp's quantization names, as GGUF repositories spell them in file names
_QUANT = re.compile(r"(?<![A-Za-z0-9])(I?Q\d(?:_[A-Z0-9]+)*|TQ\d_\d|MXFP4|BF16|F16|F32|FP16|FP32)(?![A-Za-z0-9])",
                    re.IGNORECASE)
_SPLIT = re.compile(r"-\d{5}-of-\d{5}$")


@dataclass(frozen=True)
class FileSet:
    label: str  # "Safetensors (full precision)" or the GGUF quantization, e.g. "Q4_K_M"
    kind: str  # "safetensors" | "gguf"
    files: tuple[str, ...]
    size: int  # bytes: every file of the set, configs and tokenizer included
    patterns: tuple[str, ...]  # allow_patterns that pull exactly this set


@dataclass(frozen=True)
class RepoDetails:
    repo_id: str
    revision: str  # the commit the sizes are of
    parameters: int  # 0: unknown
    file_sets: tuple[FileSet, ...]
    license: str
    gated: bool
    has_chat_template: bool | None  # None: cannot tell without downloading
    last_modified: str  # ISO date, or ""
    model_type: str
    architecture: str
    context_length: int  # 0: unknown
    problem: str | None  # why this app cannot use it (remote code, not a causal LM, no usable weights)


def fetch_info(repo_id: str, revision: str | None = None) -> Any:
    """The Hub's model_info of one repository, with file sizes and hashes. RepoMissing, RepoGated, NetworkOff or
    ConnectionLost otherwise."""
    check_repo_id(repo_id)
    try:
        with online():
            return hub_api().model_info(repo_id, revision=revision, files_metadata=True)
    except Exception as exc:
        raise hub_error(exc, repo_id) from None


def repo_details(repo_id: str, revision: str | None = None) -> RepoDetails:
    """Ask the Hub about one repository: what a person decides by (file sets, licence, gating, size)."""
    info = fetch_info(repo_id, revision)
    names = {s.rfilename for s in info.siblings or []}
    full = fetch_config(repo_id, info.sha) if "config.json" in names else None
    return details_from_info(info, full)


def check_repo_id(repo_id: str) -> None:
    """UserError (before any request) for what cannot be a repository id."""

    if not looks_like_hub_id(repo_id):
        raise UserError(f"{repo_id!r} is not a Hugging Face Hub model id: write it as organisation/name, e.g. "
                        "HuggingFaceTB/SmolLM2-135M-Instruct")


def fetch_config(repo_id: str, revision: str | None) -> dict[str, Any] | None:
    """The repository's config.json (a few KB, kept in the Hugging Face cache): the shapes the memory estimates
    need, which the Hub's summary leaves out. None where it cannot be had (gated, offline, damaged)."""
    import json

    from huggingface_hub import hf_hub_download, try_to_load_from_cache


    try:
        path = try_to_load_from_cache(repo_id, "config.json", cache_dir=hub_cache_dir(), revision=revision)
        if not isinstance(path, str):  # not cached yet: fetched (the network setting permitting)
            with online():
                path = hf_hub_download(repo_id, "config.json", revision=revision, cache_dir=hub_cache_dir(),
                                       endpoint=hub_endpoint())
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except Exception:  # the summary's config still says enough to show the repository
        return None
    return data if isinstance(data, dict) else None


def details_from_info(info: Any, full_config: dict[str, Any] | None = None) -> RepoDetails:
    """RepoDetails of a huggingface_hub ModelInfo fetched with files_metadata=True (and its config.json, if had)."""
    config = {**(info.config or {}), **(full_config or {})}
    gguf = info.gguf or {}
    sizes = {s.rfilename: int(s.size or 0) for s in info.siblings or []}
    sets = file_sets(sizes)
    parameters = int((info.safetensors.total if info.safetensors else 0) or gguf.get("total") or 0) \
        or config_parameters(config)
    architectures = config.get("architectures") or []
    return RepoDetails(
        repo_id=info.id, revision=info.sha or "", parameters=parameters, file_sets=sets,
        license=license_of(info), gated=bool(info.gated), has_chat_template=chat_template_known(config, gguf, sizes),
        last_modified=iso_date(info.last_modified), model_type=str(config.get("model_type") or gguf.get(
            "architecture") or ""), architecture=str(architectures[0] if architectures else ""),
        context_length=int(config.get("max_position_embeddings") or config.get("n_positions")
                           or gguf.get("context_length") or 0), problem=problem_of(info.id, config, sets, sizes))


def config_parameters(config: dict[str, Any]) -> int:
    """The parameter count a config.json's shapes give (0 when it has none): for a repository whose listing does
    not say (no safetensors metadata), so Get a model shows "135M" rather than "unknown"."""
    spec = spec_for_estimate(config) if config else None
    return count_parameters(spec) if spec is not None else 0


def file_sets(sizes: dict[str, int]) -> tuple[FileSet, ...]:
    """The safetensors set (top-level weights + configs + tokenizer) and one set per GGUF quantization, smallest
    GGUF first."""
    top = [n for n in sizes if "/" not in n]
    out = []
    weights = [n for n in top if n.endswith(".safetensors")]
    if weights:
        files = sorted(weights + [n for n in top if n.endswith(SUPPORT_SUFFIXES)])
        out.append(_set(SAFETENSORS_LABEL, "safetensors", files, sizes))
    groups: dict[str, list[str]] = {}
    for name in sizes:
        if name.lower().endswith(".gguf") and not Path(name).name.lower().startswith("mmproj"):
            groups.setdefault(quantization(name), []).append(name)
    ggufs = [_set(label, "gguf", sorted(names), sizes) for label, names in groups.items()]
    return tuple(out + sorted(ggufs, key=lambda s: s.size))


def _set(label: str, kind: str, files: list[str], sizes: dict[str, int]) -> FileSet:
    return FileSet(label, kind, tuple(files), sum(sizes[f] for f in files), tuple(glob.escape(f) for f in files))


def quantization(filename: str) -> str:
    """'Llama-3.2-1B-Instruct-Q4_K_M.gguf' -> 'Q4_K_M' (the file's stem when no quantization name is in it)."""
    stem = _SPLIT.sub("", Path(filename).name[: -len(".gguf")])
    found = _QUANT.findall(stem)
    return found[-1].upper() if found else stem


def license_of(info: Any) -> str:
    card = info.card_data
    value = card.get("license") if card is not None else None
    if isinstance(value, list):
        value = ", ".join(map(str, value))
    if not value:
        value = next((t.split(":", 1)[1] for t in info.tags or [] if t.startswith("license:")), "")
    return str(value or "")


def chat_template_known(config: dict[str, Any], gguf: dict[str, Any], sizes: dict[str, int]) -> bool | None:
    """Whether the model ships a chat template: from the Hub's summary of its tokenizer config or GGUF header, or
    a chat_template.jinja file; None when nothing says (no tokenizer config to look at)."""
    tokenizer_config = config.get("tokenizer_config")
    if (tokenizer_config or {}).get("chat_template") or gguf.get("chat_template") or "chat_template.jinja" in sizes:
        return True
    return False if tokenizer_config is not None or "tokenizer_config.json" in sizes else None


def iso_date(value: Any) -> str:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value or "")


def problem_of(repo_id: str, config: dict[str, Any], sets: tuple[FileSet, ...], sizes: dict[str, int]) -> str | None:
    """Why the app cannot use this repository: the same rules as for a local folder (model/folders.py)."""

    if config.get("model_type") and any(s.kind == "safetensors" for s in sets):
        try:
            check_causal_lm(Path(repo_id), config)
        except UserError as exc:
            return str(exc)
    if not sets:
        if any(n.endswith(PICKLE_SUFFIXES) for n in sizes):
            return (f"{repo_id} has its weights only in pickle files (.bin/.pt), which this app never opens for "
                    "safety: look for a safetensors or GGUF version of it")
        return f"{repo_id} has no safetensors or GGUF weights: this app can use neither"
    return None
