"""Base models for fine-tuning: find them, fingerprint them, load them (full precision or 4-bit).

A base is anything `model/loading.py` opens: a run of ours (its newest checkpoint that verifies), a checkpoint,
an export or a local Hugging Face causal-LM folder of a family transformers knows (llama, mistral, qwen2,
gpt2, phi3, gemma, ...). It may also be a LoRA/QLoRA run or adapter folder: then its own base is loaded
and the adapter merged in memory, so pipelines can chain LoRA stages. Rules:

- Never modified: weights are read into memory and every write goes to the new run folder.
- Never remote code: a config that needs `trust_remote_code` is refused with a message, as is a model
  that is not a causal language model.
- Fingerprinted: `weights_sha256` hashes the weight files (and tokenizer.json) so a run records which
  base it started from and refuses to resume on a different one. A checkpoint's files were just verified
  against its manifest when it was resolved, so its recorded checksums are used instead of hashing again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from desktop_app.engine.errors import UserError

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
# Encoder families that transformers can also load with a causal head (only when built as decoders).
_ENCODERS = ("bert", "roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "electra", "ernie", "data2vec-text",
             "bert-generation", "roc_bert", "rembert", "megatron-bert", "xmod")


@dataclass
class BaseModelInfo:
    """Where a base model's weights are, what it is, and (for an adapter) the model it sits on."""

    given: str  # what the user named
    folder: Path  # the folder holding the weights (a run resolves to its checkpoint)
    kind: str  # run | checkpoint | export | hf (model/loading.py kinds)
    name: str
    model_type: str
    adapter_base: BaseModelInfo | None = None  # set when `folder` holds a PEFT adapter, not full weights

    @property
    def is_adapter(self) -> bool:
        return self.adapter_base is not None


@dataclass
class LoadedBase:
    model: Any  # transformers PreTrainedModel (fp32, or 4-bit quantized linears for QLoRA)
    tokenizer: Any  # transformers fast tokenizer
    notes: list[str] = field(default_factory=list)
    quantized: bool = False


def is_adapter_folder(folder: Path) -> bool:
    return (folder / ADAPTER_CONFIG).is_file() and not (folder / "config.json").is_file()


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def adapter_base_path(folder: Path) -> str:
    """The base an adapter folder was trained on: its run.json's base_model, else PEFT's base_model_name_or_path."""
    run = _read_json(folder / "run.json")
    if isinstance(run, dict) and isinstance(run.get("base_model"), str) and run["base_model"]:
        return run["base_model"]
    config = _read_json(folder / ADAPTER_CONFIG)
    base = config.get("base_model_name_or_path") if isinstance(config, dict) else None
    if not isinstance(base, str) or not base:
        raise UserError(f"{folder} holds an adapter but does not say which base model it belongs to "
                        f"(no base_model in run.json, no base_model_name_or_path in {ADAPTER_CONFIG})")
    return base


def check_causal_lm(folder: Path, config: dict[str, Any]) -> str:
    """The model_type of a config that transformers' AutoModelForCausalLM loads without remote code."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    from desktop_app.engine.model.loading import _check_no_remote_code

    _check_no_remote_code(folder, config)  # refuses auto_map / unknown model types with a message
    model_type = str(config.get("model_type"))
    architectures = [a for a in config.get("architectures") or [] if isinstance(a, str)]
    lm_heads = ("ForCausalLM", "LMHeadModel", "ForConditionalGeneration")
    encoder = architectures and not any(a.endswith(lm_heads) for a in architectures)
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES or encoder or (
            model_type in _ENCODERS and not config.get("is_decoder")):
        raise UserError(f"{folder} is a {model_type!r} model, which is not a causal language model (a model that "
                        "continues text): choose a llama, mistral, qwen2, gpt2, phi3, gemma or similar model")
    return model_type


def resolve_base(path: str | Path, *, _depth: int = 0) -> BaseModelInfo:
    """What `path` names as a base model (reads configs only, no weights). UserError when it cannot be one."""
    from desktop_app.engine.model.loading import _read_config, resolve_model_folder

    if not str(path).strip():
        raise UserError("no base model given")
    if looks_like_hub_id(path) and not Path(path).expanduser().exists():
        raise UserError(f"{path} is not a folder here; it looks like a Hugging Face Hub id. Nothing is downloaded "
                        "unless you say so: add --allow-download (when online) to fetch it once into the Hugging "
                        "Face cache, or give the local folder of the model")
    if _depth > 8:
        raise UserError(f"{path}: adapters nest more than 8 levels deep (an adapter whose base is itself?)")
    folder, kind, name = resolve_model_folder(path)
    folder = folder.resolve()
    if is_adapter_folder(folder):
        base_path = adapter_base_path(folder)
        if not Path(base_path).expanduser().exists():
            raise UserError(f"{folder} is an adapter of the base model {base_path}, which no longer exists: restore "
                            "that folder, or export this run with --merge and use the export")
        inner = resolve_base(base_path, _depth=_depth + 1)
        return BaseModelInfo(str(path), folder, kind, name, inner.model_type, adapter_base=inner)
    config = _read_config(folder)
    model_type = check_causal_lm(folder, config)
    return BaseModelInfo(str(path), folder, kind, name, model_type)


_HUB_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}/[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
# What a causal LM needs from a Hub repository: configs, safetensors weights, tokenizer files (never pickles).
_HUB_FILES = ["*.json", "*.safetensors", "tokenizer.model", "*.tiktoken", "*.txt", "*.jinja"]


def looks_like_hub_id(path: str | Path) -> bool:
    """'org/name' (a Hugging Face Hub repository id) rather than a path."""
    return bool(_HUB_ID.match(str(path))) and not str(path).startswith((".", "/", "~"))


def download_base(repo_id: str, revision: str | None = None) -> Path:
    """Fetch a Hub model's configs, safetensors weights and tokenizer into the Hugging Face cache (the user asked
    for it: --allow-download) and return the local folder, which the run then records, so it resumes offline.
    Models that need remote code are refused by resolve_base afterwards, as any local folder is."""
    if not looks_like_hub_id(repo_id):
        raise UserError(f"{repo_id!r} is not a Hugging Face Hub id (expected organisation/name)")
    try:
        from huggingface_hub import snapshot_download
    except ImportError as exc:  # pragma: no cover - transformers depends on huggingface_hub
        raise UserError(f"cannot download: huggingface_hub is not available ({exc})") from None
    try:
        folder = snapshot_download(repo_id, revision=revision, allow_patterns=_HUB_FILES)
    except Exception as exc:
        raise UserError(f"could not download {repo_id} from the Hugging Face Hub ({type(exc).__name__}: {exc}); "
                        "check the name and the connection, or give a local folder") from None
    return Path(folder)


def _file_sha(path: Path, manifest: dict[str, Any] | None) -> str:
    recorded = manifest.get("files", {}).get(path.name, {}) if manifest else {}
    if isinstance(recorded, dict) and isinstance(recorded.get("sha256"), str) \
            and recorded.get("bytes") == path.stat().st_size:
        return recorded["sha256"]
    from desktop_app.engine.run_folder import sha256_file

    return sha256_file(path)


def weights_sha256(info: BaseModelInfo) -> str:
    """sha256 over the weight files (and tokenizer.json) of a base; for an adapter, over the adapter's files
    and its base's checksum. Changes whenever a weight or the tokenizer changes."""
    from desktop_app.engine.model.loading import _weight_files

    folder = info.folder
    manifest = _read_json(folder / "manifest.json")
    manifest = manifest if isinstance(manifest, dict) else None
    h = hashlib.sha256()
    if info.adapter_base is not None:
        files = [folder / ADAPTER_WEIGHTS] if (folder / ADAPTER_WEIGHTS).is_file() else \
            sorted(folder.glob("adapter_model.*"))
        h.update(b"adapter-of:" + weights_sha256(info.adapter_base).encode())
    else:
        safetensors, pickles = _weight_files(folder)
        files = safetensors or pickles
    if not files:
        raise UserError(f"{folder} has no weights (model.safetensors)")
    if (folder / "tokenizer.json").is_file():
        files = [*files, folder / "tokenizer.json"]
    for f in files:
        h.update(f.name.encode() + b"\0" + _file_sha(f, manifest).encode() + b"\n")
    return h.hexdigest()


def quantization_config(adapter: Any, device: Any) -> Any:
    """bitsandbytes 4-bit config of a QLoRA base (NF4 + double quantization by default). UserError where the
    platform cannot run it."""
    import torch

    if device.type == "mps":
        raise UserError("QLoRA needs bitsandbytes' 4-bit layers, which do not run on Apple GPUs (MPS): use LoRA, "
                        "or train on the CPU (device cpu)")
    try:
        import bitsandbytes  # noqa: F401
        from transformers import BitsAndBytesConfig
    except ImportError as exc:
        raise UserError(f"QLoRA needs bitsandbytes, which cannot be loaded here ({exc}): install it "
                        "(pip install bitsandbytes) or use LoRA") from None
    if device.type == "cuda":
        compute = torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    else:
        compute = torch.float32  # CPU: bitsandbytes dequantizes to the compute dtype; fp32 is exact and fast here
    return BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type=adapter.quant_type,
                              bnb_4bit_use_double_quant=bool(adapter.double_quant), bnb_4bit_compute_dtype=compute,
                              bnb_4bit_quant_storage=torch.uint8)


@contextlib.contextmanager
def _quiet() -> Any:
    from desktop_app.engine.model.loading import _quiet_transformers

    with _quiet_transformers():
        yield


def _load_full(info: BaseModelInfo) -> tuple[Any, Any, list[str]]:
    """fp32 model (adapters merged) and tokenizer of a base, on the CPU."""
    import torch

    from desktop_app.engine.model.loading import _load_tokenizer, _load_weights, _weight_files, nonfinite_tensors

    notes: list[str] = []
    if info.adapter_base is not None:
        from peft import PeftModel

        model, _, inner_notes = _load_full(info.adapter_base)
        notes += inner_notes
        tokenizer = _load_tokenizer(info.folder)
        rows = int(model.get_input_embeddings().weight.shape[0])
        if len(tokenizer) > rows:  # the adapter's run added chat tokens; its saved embeddings fill the rows
            model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
        with _quiet(), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # peft asks a deprecated transformers property
            model = PeftModel.from_pretrained(model, str(info.folder), is_trainable=False)
        model = model.merge_and_unload()
        notes.append(f"base {info.name}: the adapter was merged into its base {info.adapter_base.name} in memory")
        return model, tokenizer, notes
    tokenizer = _load_tokenizer(info.folder)
    safetensors, pickles = _weight_files(info.folder)
    with _quiet():
        model = _load_weights(info.folder, safetensors, pickles, torch.float32)
    bad = nonfinite_tensors(model)
    if bad:
        raise UserError(f"base model {info.folder} has NaN or infinite weights in {len(bad)} tensor(s) "
                        f"({', '.join(bad[:3])}): it cannot be fine-tuned; choose an earlier checkpoint")
    return model, tokenizer, notes


def load_base(info: BaseModelInfo, device: Any, *, quantize: Any = None) -> LoadedBase:
    """Load a base for training: fp32 weights on `device`, or with `quantize` (an AdapterSpec of kind qlora)
    its linear layers as bitsandbytes 4-bit (NF4) weights. The base folder is only read."""
    import torch
    from transformers import AutoModelForCausalLM

    from desktop_app.engine.model.loading import _load_tokenizer, _weight_files

    if quantize is None:
        model, tokenizer, notes = _load_full(info)
        model.to(device)
        return LoadedBase(model, tokenizer, notes)
    qconfig = quantization_config(quantize, device)
    device_map = {"": device.index if device.type == "cuda" and device.index is not None else device.type}
    notes: list[str] = []
    safetensors, _ = _weight_files(info.folder) if info.adapter_base is None else ([], [])
    with contextlib.ExitStack() as stack:
        folder = info.folder
        tokenizer = _load_tokenizer(info.folder)
        if not safetensors:
            # An adapter (merged first) or pickle-only weights: write the fp32 model once as safetensors to a
            # temporary folder, which transformers then loads quantized.
            model, tokenizer, notes = _load_full(info)
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="azr-qlora-base-")))
            with _quiet():
                model.save_pretrained(tmp, safe_serialization=True)
            del model
            folder = tmp
        try:
            with _quiet():
                model = AutoModelForCausalLM.from_pretrained(
                    str(folder), quantization_config=qconfig, device_map=device_map, dtype=torch.float32,
                    trust_remote_code=False, local_files_only=True, attn_implementation="sdpa")
        except (OSError, ValueError, RuntimeError, ImportError) as exc:
            text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
            raise UserError(f"the base {info.folder} cannot be loaded in 4 bits for QLoRA ({text})") from None
    notes.append(f"base loaded with its linear layers in 4 bits ({quantize.quant_type}"
                 f"{', double quantization' if quantize.double_quant else ''}) for QLoRA")
    return LoadedBase(model, tokenizer, notes, quantized=True)


def load_merged(path: str | Path) -> tuple[Any, Any, BaseModelInfo, list[str]]:
    """An adapter run/checkpoint/folder for inference or export: (its base with the adapter merged, in fp32 on
    the CPU; the adapter's tokenizer; what it is; notes). Refused when the base changed since training."""
    info = resolve_base(path)
    if info.adapter_base is None:
        raise UserError(f"{path} holds no adapter")
    recorded = _read_json(info.folder / "run.json")
    sha = recorded.get("base_model_sha256") if isinstance(recorded, dict) else None
    if isinstance(sha, str) and sha and sha != weights_sha256(info.adapter_base):
        raise UserError(f"the base model {info.adapter_base.folder} of the adapter {info.folder} has changed since "
                        "the adapter was trained (its weights' checksum differs); the adapter only fits the base it "
                        "was trained on: restore that base model")
    model, tokenizer, notes = _load_full(info)
    return model, tokenizer, info, notes


def model_footprint_bytes(model: Any) -> int:
    """Bytes held by a model's parameters and buffers (4-bit weights count as their packed bytes)."""
    seen: set[int] = set()
    total = 0
    for t in [*model.parameters(), *model.buffers()]:
        ptr = t.data_ptr()
        if ptr in seen:
            continue
        seen.add(ptr)
        total += t.numel() * t.element_size()
    for module in model.modules():  # bitsandbytes keeps 4-bit quantization constants beside the weights
        state = getattr(getattr(module, "weight", None), "quant_state", None)
        if state is not None:
            for name in ("absmax", "code"):
                t = getattr(state, name, None)
                if t is not None:
                    total += t.numel() * t.element_size()
            inner = getattr(state, "state2", None)
            if inner is not None and getattr(inner, "absmax", None) is not None:
                total += inner.absmax.numel() * inner.absmax.element_size()
    return total
