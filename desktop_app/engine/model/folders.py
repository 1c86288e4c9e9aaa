"""What a model folder is, without reading any weights: the one place that opens a path a user names as a model.

Kinds (KINDS), tried in this order by `resolve_model_folder`:

    run         a training run: its newest committed checkpoint that verifies
    checkpoint  one checkpoint folder (verified against its manifest)
    gguf        one GGUF file (llama.cpp, Ollama's blobs, LM Studio): its header checked (model/gguf_file.py);
                read through transformers' GGUF loader, dequantized
    export      our Hugging Face export (it holds model_spec.json)
    hf          any other local Hugging Face causal-LM folder

Any of them may hold a LoRA/QLoRA adapter (PEFT files, no config.json) instead of full weights: `resolve_base`
follows such an adapter to the base it sits on, down a chain of adapters. A new kind is one more recogniser
in `_RECOGNISERS` (and its name in KINDS).

Safety: `check_no_remote_code` refuses configs that need `trust_remote_code`; `check_causal_lm` refuses models
that are not causal language models. Reading weights and tokenizers is model/loading.py's job.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from desktop_app.engine import run_folder
from desktop_app.engine.errors import UserError
from desktop_app.engine.model import gguf_file
from desktop_app.engine.model.gguf_file import is_gguf_file, read_header
from desktop_app.engine.model.hub_cache import NotCached, cache_repo_of, hub_reference, resolve_model_reference
from desktop_app.engine.run_folder import (
    ADAPTER_WEIGHTS,
    is_run_folder,
    list_committed,
    read_json,
    recorded_checksum,
    sha256_file,
)

KINDS = ("run", "checkpoint", "gguf", "export", "hf")
ADAPTER_CONFIG = "adapter_config.json"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth")
SHARD_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")  # what transformers writes
# Encoder families that transformers can also load with a causal head (only when built as decoders).
_ENCODERS = ("bert", "roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "electra", "ernie", "data2vec-text",
             "bert-generation", "roc_bert", "rembert", "megatron-bert", "xmod")
_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")


# --- which folder, which kind -------------------------------------------------------------------------------

def _run(p: Path) -> tuple[Path, str, str] | None:
    if not (p.is_dir() and run_folder.is_run_folder(p)):
        return None
    committed = run_folder.list_committed(p)
    found, problems = run_folder.find_resumable(p)
    if found is None:
        if committed:
            raise UserError(f"run {p} has no usable checkpoint: " + "; ".join(problems))
        raise UserError(f"run {p} has no committed checkpoint yet: train it until the first checkpoint "
                        "is saved, then load it")
    return found, "run", f"{p.name} (step {run_folder.step_of(found)})"


def _checkpoint(p: Path) -> tuple[Path, str, str] | None:
    if not (p.is_dir() and run_folder.is_checkpoint_folder(p)):
        return None
    run_folder.verify_checkpoint(p)  # raises a UserError naming the damaged file
    parent = p.parent.parent.name if p.parent.name == "checkpoints" else ""
    return p, "checkpoint", f"{parent} {p.name}".strip()


def _gguf(p: Path) -> tuple[Path, str, str] | None:
    if not (p.is_file() and (p.suffix.lower() == ".gguf" or gguf_file.is_gguf_file(p))):
        return None
    gguf_file.check_loadable(gguf_file.read_header(p))  # refuses damaged, hostile or unsupported files
    return p, "gguf", p.name


def _export_or_hf(p: Path) -> tuple[Path, str, str] | None:
    if not p.is_dir():
        return None
    return p, "export" if (p / "model_spec.json").is_file() else "hf", cache_repo_of(p) or p.name  # not a commit hash


# First match wins; the last accepts any folder (a missing config.json is reported when it is read).
_RECOGNISERS: tuple[Callable[[Path], tuple[Path, str, str] | None], ...] = (_run, _checkpoint, _gguf,
                                                                             _export_or_hf)


def resolve_model_folder(path: str | Path) -> tuple[Path, str, str]:
    """(folder holding config + weights, kind, display name) for a user-given path; UserError if unusable."""
    p = resolve_model_reference(str(path))  # an existing path as it is; a Hub id pulled earlier: its cached copy
    if not p.exists():
        raise UserError(f"{p} does not exist")
    for recognise in _RECOGNISERS:
        found = recognise(p)
        if found is not None:
            return found
    raise UserError(f"{p} is a file; give the model folder (the one holding config.json) or a .gguf file")


def is_adapter_folder(folder: Path) -> bool:
    return (folder / ADAPTER_CONFIG).is_file() and not (folder / "config.json").is_file()


def adapter_base_path(folder: Path) -> str:
    """The base an adapter folder was trained on: its run.json's base_model, else PEFT's base_model_name_or_path."""
    run = read_json(folder / "run.json")
    if isinstance(run, dict) and isinstance(run.get("base_model"), str) and run["base_model"]:
        return run["base_model"]
    config = read_json(folder / ADAPTER_CONFIG)
    base = config.get("base_model_name_or_path") if isinstance(config, dict) else None
    if not isinstance(base, str) or not base:
        raise UserError(f"{folder} holds an adapter but does not say which base model it belongs to "
                        f"(no base_model in run.json, no base_model_name_or_path in {ADAPTER_CONFIG})")
    return base


# --- what the folder holds ----------------------------------------------------------------------------------

def read_config(folder: Path) -> dict[str, Any]:
    """config.json of a model folder; UserError when it is missing or not a JSON object."""
    file = folder / "config.json"
    if not file.is_file():
        raise UserError(f"{folder} has no config.json: not a model folder (expected a run, checkpoint, export "
                        "or Hugging Face model folder)")
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise UserError(f"{file} is not readable JSON: {exc}") from None
    if not isinstance(data, dict):
        raise UserError(f"{file} must hold a JSON object")
    return data


def check_no_remote_code(folder: Path, config: dict[str, Any]) -> None:
    """UserError unless the installed transformers knows the config's model type (never trust_remote_code)."""
    from transformers import CONFIG_MAPPING

    model_type = config.get("model_type")
    if model_type in CONFIG_MAPPING:
        return
    if config.get("auto_map"):
        raise UserError(f"{folder} needs custom Python code shipped with the model (trust_remote_code), which "
                        "this app never runs for safety; use a model of an architecture transformers knows")
    raise UserError(f"{folder}: model type {model_type!r} is not known to the installed transformers")


def check_causal_lm(folder: Path, config: dict[str, Any]) -> str:
    """The model_type of a config that transformers' AutoModelForCausalLM loads without remote code."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    check_no_remote_code(folder, config)  # refuses auto_map / unknown model types with a message
    model_type = str(config.get("model_type"))
    architectures = [a for a in config.get("architectures") or [] if isinstance(a, str)]
    lm_heads = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")
    encoder = architectures and not any(a.endswith(lm_heads) for a in architectures)
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES or encoder or (
            model_type in _ENCODERS and not config.get("is_decoder")):
        raise UserError(f"{folder} is a {model_type!r} model, which is not a causal language model (a model that "
                        "continues text): choose a Llama, Qwen, Gemma, Phi, Mistral, OLMo, Granite, SmolLM or similar "
                        "model")
    return model_type


def missing_shards(folder: Path) -> tuple[str, list[str]]:
    """(index file, the shards it names that the folder lacks) of a sharded model folder; ("", []) when whole."""
    for index in SHARD_INDEXES:
        data = read_json(folder / index)
        weight_map = data.get("weight_map") if isinstance(data, dict) else None
        if isinstance(weight_map, dict):
            names = sorted({str(v) for v in weight_map.values()})
            return index, [n for n in names if not (folder / n).is_file()]
    return "", []


def check_shards(folder: Path) -> None:
    """UserError naming the first weight shard the folder's index names but the folder lacks (a download that did
    not finish, a file deleted or moved), before anything is loaded."""
    index, missing = missing_shards(folder)
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise UserError(f"the model folder {folder} lacks the weight shard {missing[0]}{more} that its {index} names: "
                        "copy the shard back or download the model again")


def weight_files(folder: Path) -> tuple[list[Path], list[Path]]:
    """(safetensors files, pickle weight files) of a model folder; training-state pickles are not weights. A folder
    missing a shard its index names is refused (check_shards)."""
    check_shards(folder)
    safetensors = sorted(folder.glob("*.safetensors"))
    pickles = sorted(p for p in folder.iterdir() if p.suffix in PICKLE_SUFFIXES and p.is_file()
                     and not p.name.startswith(("optimizer", "training_args", "scheduler", "rng")))
    return safetensors, pickles


# --- base models (fine-tuning, adapter merging) -------------------------------------------------------------

@dataclass
class BaseModelInfo:
    """Where a base model's weights are, what it is, and (for an adapter) the model it sits on."""

    given: str  # what the user named
    folder: Path  # the folder holding the weights (a run resolves to its checkpoint; a GGUF: the file itself)
    kind: str  # run | checkpoint | gguf | export | hf (KINDS)
    name: str
    model_type: str
    adapter_base: BaseModelInfo | None = None  # set when `folder` holds a PEFT adapter, not full weights

    @property
    def is_adapter(self) -> bool:
        return self.adapter_base is not None


def looks_like_hub_id(path: str | Path) -> bool:
    """'org/name' (a Hugging Face Hub repository id) rather than a path."""
    return bool(_HUB_ID.match(str(path))) and not str(path).startswith((".", "/", "~"))


def resolve_base(path: str | Path, *, _depth: int = 0) -> BaseModelInfo:
    """What `path` names as a base model (reads configs only, no weights). UserError when it cannot be one."""
    if not str(path).strip():
        raise UserError("no base model given")
    given = str(path)
    if hub_reference(str(path)) is not None and not Path(path).expanduser().exists():
        try:
            path = resolve_model_reference(str(path))  # pulled earlier: the cached copy, offline
        except NotCached as exc:
            raise NotCached(f"{exc}; or add --allow-download (when online) to fetch it once, or give the local "
                            "folder of the model") from None
    if _depth > 8:
        raise UserError(f"{path}: adapters nest more than 8 levels deep (an adapter whose base is itself?)")
    folder, kind, name = resolve_model_folder(path)
    # A GGUF file keeps its name (a file of a Hub snapshot is a link to a blob named by its hash): run.json then says
    # which repository, revision and quantization the run started from.
    folder = Path(os.path.abspath(folder)) if kind == "gguf" else folder.resolve()
    if kind == "gguf":
        return BaseModelInfo(given, folder, kind, name, gguf_file.check_loadable(gguf_file.read_header(folder)))
    if is_adapter_folder(folder):
        base_path = adapter_base_path(folder)
        if not Path(base_path).expanduser().exists():
            raise UserError(f"{folder} is an adapter of the base model {base_path}, which no longer exists: restore "
                            "that folder, or export this run with --merge and use the export")
        inner = resolve_base(base_path, _depth=_depth + 1)
        return BaseModelInfo(given, folder, kind, name, inner.model_type, adapter_base=inner)
    config = read_config(folder)
    model_type = check_causal_lm(folder, config)
    check_shards(folder)  # refused before a fine-tune starts, naming the shard
    return BaseModelInfo(given, folder, kind, name, model_type)


def weights_sha256(info: BaseModelInfo) -> str:
    """sha256 over the weight files (and tokenizer.json) of a base; for an adapter, over the adapter's files
    and its base's checksum; for a GGUF, the file's own sha256 (what `sha256sum` and Ollama's blob name say).
    Changes whenever a weight or the tokenizer changes.

    A checkpoint's files were just verified against its manifest when it was resolved, so the checksums its
    manifest records are used instead of hashing again."""
    folder = info.folder
    if info.kind == "gguf":
        return sha256_file(folder)
    manifest = read_json(folder / run_folder.MANIFEST)
    manifest = manifest if isinstance(manifest, dict) else None
    h = hashlib.sha256()
    if info.adapter_base is not None:
        files = [folder / ADAPTER_WEIGHTS] if (folder / ADAPTER_WEIGHTS).is_file() else \
            sorted(folder.glob("adapter_model.*"))
        h.update(b"adapter-of:" + weights_sha256(info.adapter_base).encode())
    else:
        safetensors, pickles = weight_files(folder)
        files = safetensors or pickles
    if not files:
        raise UserError(f"{folder} has no weights (model.safetensors)")
    if (folder / "tokenizer.json").is_file():
        files = [*files, folder / "tokenizer.json"]
    for f in files:
        h.update(f.name.encode() + b"\0" + (recorded_checksum(manifest, f) or sha256_file(f)).encode() + b"\n")
    return h.hexdigest()


# --- chat templates in model files --------------------------------------------------------------------------

def gguf_chat_template(path: str | Path) -> str:
    """The chat template in a GGUF file's metadata (tokenizer.chat_template); "" when it has none or the file
    cannot be read as GGUF."""

    try:
        return (read_header(path).chat_template or "").strip()
    except (OSError, UserError):
        return ""


def folder_chat_template(path: str | Path) -> str:
    """The chat template the model at `path` (a run: its newest committed checkpoint; a checkpoint, export or Hugging
    Face folder) ships in its tokenizer files, read without loading the tokenizer; a GGUF file's from its metadata;
    "" when it has none, or `path` is no model (another file, or not a valid path at all)."""
    import json


    folder = Path(path).expanduser()
    try:
        if not folder.is_dir():  # a file is no folder of tokenizer files (and a NUL in a name is no path at all)
            return gguf_chat_template(folder) if is_gguf_file(folder) else ""
    except (OSError, ValueError):
        return ""
    if is_run_folder(folder):
        committed = list_committed(folder)
        if not committed:
            return ""
        folder = committed[-1]
    try:
        return (folder / "chat_template.jinja").read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        pass
    try:
        config = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    template = config.get("chat_template") if isinstance(config, dict) else None
    if isinstance(template, list):  # several named templates: the default one, else the first
        named = {str(t.get("name")): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default", next(iter(named.values()), None))
    return template.strip() if isinstance(template, str) else ""
