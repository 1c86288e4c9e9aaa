"""Base models for fine-tuning: load them (full precision or 4-bit), fetch them from the Hub when asked.

A base is anything model/folders.py resolves (`resolve_base`): a run of ours (its newest checkpoint that
verifies), a checkpoint, a GGUF file (dequantized), an export or a local Hugging Face causal-LM folder of a family
transformers knows
(llama, mistral, qwen2, gpt2, phi3, gemma, ...), or a LoRA/QLoRA run or adapter folder, whose own base is
loaded with the adapter merged in memory (model/loading.py `load_full`), so pipelines can chain LoRA stages.
Rules:

- Never modified: weights are read into memory and every write goes to the new run folder.
- Never remote code, never a model that is not a causal language model (model/folders.py refuses both).
- Fingerprinted: a run records `weights_sha256` of its base and refuses to resume on a different one.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Event
from desktop_app.engine.hub.download import DownloadFinished, pull
from desktop_app.engine.model.families import folder_attention
from desktop_app.engine.model.folders import BaseModelInfo, looks_like_hub_id, weight_files
from desktop_app.engine.model.loading import load_full, load_tokenizer, quiet_transformers


@dataclass
class LoadedBase:
    """A base loaded for training, and notes on how (adapters merged, 4-bit linears)."""

    model: Any  # transformers PreTrainedModel (fp32, or 4-bit quantized linears for QLoRA)
    tokenizer: Any  # transformers fast tokenizer
    notes: list[str] = field(default_factory=list)
    quantized: bool = False


def download_base(repo_id: str, revision: str | None = None,
                  on_event: Callable[[Event], None] | None = None) -> Path:
    """Fetch a Hub model's safetensors set (configs, safetensors weights, tokenizer; never pickles) into the Hugging
    Face cache (the user asked for it: --allow-download) and return its snapshot folder, which the run then records,
    so it resumes offline. Goes through engine.hub.download.pull: the network setting, resume of an interrupted
    download, the Hub's hashes and its sentences for every failure (gated, missing, lost connection, full disk).
    `on_event` sees each event (progress) as it comes. Models that need remote code are refused by resolve_base
    afterwards, as any local folder is."""

    if not looks_like_hub_id(repo_id):
        raise UserError(f"{repo_id!r} is not a Hugging Face Hub id (expected organisation/name)")
    folder: Path | None = None
    for event in pull(repo_id, None, revision=revision):
        if on_event is not None:
            on_event(event)
        if isinstance(event, DownloadFinished):
            folder = Path(event.folder)
    if folder is None:  # pull ends with DownloadFinished unless cancelled, and nothing cancels it here
        raise UserError(f"the download of {repo_id} did not finish: run the command again to resume it")
    return folder


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


def load_base(info: BaseModelInfo, device: Any, *, quantize: Any = None) -> LoadedBase:
    """Load a base for training: fp32 weights on `device`, or with `quantize` (an AdapterSpec of kind qlora)
    its linear layers as bitsandbytes 4-bit (NF4) weights. The base folder is only read."""
    import torch
    from transformers import AutoModelForCausalLM

    if quantize is None:
        model, tokenizer, notes = load_full(info)
        model.to(device)
        return LoadedBase(model, tokenizer, notes)
    qconfig = quantization_config(quantize, device)
    device_map = {"": device.index if device.type == "cuda" and device.index is not None else device.type}
    notes: list[str] = []
    safetensors, _ = weight_files(info.folder) if info.adapter_base is None and info.kind != "gguf" else ([], [])
    with contextlib.ExitStack() as stack:
        folder = info.folder
        tokenizer = load_tokenizer(info.folder)
        if not safetensors:
            # An adapter (merged first), a GGUF (dequantized) or pickle-only weights: write the fp32 model once
            # as safetensors to a temporary folder, which transformers then loads quantized.
            model, tokenizer, notes = load_full(info)
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="azr-qlora-base-")))
            with quiet_transformers():
                model.save_pretrained(tmp, safe_serialization=True)
            del model
            folder = tmp
        try:
            with quiet_transformers():
                model = AutoModelForCausalLM.from_pretrained(
                    str(folder), quantization_config=qconfig, device_map=device_map, dtype=torch.float32,
                    trust_remote_code=False, local_files_only=True,
                    attn_implementation=folder_attention(folder))
        except (OSError, ValueError, RuntimeError, ImportError) as exc:
            text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else type(exc).__name__
            raise UserError(f"the base {info.folder} cannot be loaded in 4 bits for QLoRA ({text})") from None
    notes.append(f"base loaded with its linear layers in 4 bits ({quantize.quant_type}"
                 f"{', double quantization' if quantize.double_quant else ''}) for QLoRA")
    return LoadedBase(model, tokenizer, notes, quantized=True)


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
