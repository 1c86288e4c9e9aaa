"""What fits this machine: chat, LoRA, QLoRA and full fine-tuning of one file set of a Hub repository, each a
verdict with the figures and a sentence ("fits: ..." / "too big: ...", or why it cannot run here at all: QLoRA
follows the engine's own rule, finetune/base_model.quantization_config, so it is said to fit on a CPU where
bitsandbytes loads, as a QLoRA run there does).

The figures are the app's own estimates (model/sizing.py, the same preflight uses before a run starts), from the
model's shape: its config.json (a few KB, fetched into the Hugging Face cache), or, where there is none (a GGUF
repository) or it cannot be read, a Llama-shaped model of the same parameter count. The app chats and trains in
full precision (a GGUF is dequantized when loaded), so a GGUF file set needs what the full model needs.
A run is said to fit when its estimate takes at most memory_plan.FITS_SHARE of the free memory. A fine-tuning
verdict is the estimate of the very run "Fine-tune it" opens on the Train tab (memory_plan.opening_plan, fitted:
the same micro-batch and precision), so the two figures agree.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from desktop_app.engine.errors import UserError
from desktop_app.engine.finetune.base_model import quantization_config
from desktop_app.engine.hub.details import FileSet, RepoDetails, fetch_config
from desktop_app.engine.hub.errors import size_text
from desktop_app.engine.model.families import attention_of
from desktop_app.engine.model.sizing import estimate_memory, spec_for_estimate
from desktop_app.engine.specs import AdapterSpec, ModelSpec
from desktop_app.engine.train.memory_plan import FITS_SHARE, Machine, MemoryPlan, fit_plan, opening_plan, this_machine

USES = ("chat", "lora", "qlora", "full")
CHAT_TOKENS = 2048  # a conversation's length for the chat estimate (its KV cache), or the context if shorter
_ADAPTER = {"lora": "lora", "qlora": "qlora", "full": "none"}


@dataclass(frozen=True)
class FitVerdict:
    use: str  # one of USES
    fits: bool
    needed: int  # bytes, estimated
    available: int  # bytes free where it would run
    memory: str  # "RAM" | "GPU memory"
    reason: str  # one sentence with the figures


def fit_verdicts(details: RepoDetails, file_set: FileSet, machine: Machine | None = None) -> list[FitVerdict]:
    """One verdict per USES entry, in that order, for `file_set` of `details` on `machine` (this one when None)."""
    machine = machine or this_machine(probe_gpu=True)
    spec, guessed = model_shape(details)
    if spec is None:
        return [FitVerdict(use, False, 0, 0, "RAM", f"the size of {details.repo_id} is not known (no config.json "
                           "and no parameter count), so nothing can be said about memory") for use in USES]
    gguf = file_set.kind == "gguf"
    out = [verdict("chat", chat_memory(spec, gguf, file_set.size), machine)]
    note = "GGUF files are for chat; fine-tuning one loads it as full-precision weights: " if gguf else ""
    for use in USES[1:]:
        plan = training_plan(spec, use, machine, attention_of(details.model_type))
        needed = plan.total()
        refused = qlora_refusal(machine) if use == "qlora" else None
        if refused:
            out.append(FitVerdict(use, False, needed, 0, "GPU memory" if machine.gpu_total else "RAM", refused))
            continue
        found = verdict(use, needed, machine, note)
        if found.fits:  # how the run Fine-tune it opens trains: the Train tab shows the same estimate
            found = dataclasses.replace(found, reason=f"{found.reason} ({plan_words(plan)})")
        if use == "qlora" and not machine.gpu_total:
            found = dataclasses.replace(found, reason=found.reason + "; slower than LoRA on a CPU")
        out.append(found)
    if guessed:
        out = [dataclasses.replace(v, reason=v.reason + " (estimated from the parameter count)") for v in out]
    return out


def qlora_refusal(machine: Machine) -> str | None:
    """Why QLoRA cannot run here, by the engine's own rule (finetune/base_model.quantization_config: bitsandbytes
    must load; never on Apple GPUs); None where it can: on a CUDA GPU, or on the CPU (4-bit base, fp32 compute)."""
    import torch


    # A CUDA machine is checked as the CPU is (its branch only picks the compute dtype, which needs the GPU itself)
    mps = not machine.gpu_total and torch.backends.mps.is_available()
    try:
        quantization_config(AdapterSpec(kind="qlora"), torch.device("mps" if mps else "cpu"))
    except UserError as exc:
        return str(exc)
    return None


def verdict(use: str, needed: int, machine: Machine, note: str = "") -> FitVerdict:
    """The estimate against the memory it would use: the GPU where there is one (the app's "auto" device), else
    RAM."""
    on_gpu = bool(machine.gpu_total)
    memory = "GPU memory" if on_gpu else "RAM"
    free = machine.gpu_free if on_gpu else machine.ram_free
    total = (machine.gpu_total if on_gpu else machine.ram_total) or free
    fits = needed <= free * FITS_SHARE
    if fits:
        reason = f"fits: needs about {size_text(needed)} of the {size_text(free)} of {memory} free"
    elif needed <= total * FITS_SHARE:
        reason = (f"too big for now: needs about {size_text(needed)}, only {size_text(free)} of {memory} is "
                  "free; close other programs to make room")
    else:
        reason = f"too big: needs about {size_text(needed)}, this machine has {size_text(total)} of {memory}"
    if note:
        reason = note + reason[0].lower() + reason[1:]
    return FitVerdict(use, fits, needed, free, memory, reason)


def chat_memory(spec: ModelSpec, gguf: bool, file_size: int) -> int:
    """Chat in full precision (fp32, as the app loads models) with the KV cache of one conversation; a GGUF is
    read (its file's bytes) while it is dequantized."""
    tokens = min(spec.context_length, CHAT_TOKENS)
    need = estimate_memory(spec, batch_size=1, seq_len=tokens, precision="fp32", training=False)["total"]
    return need + (file_size if gguf else 0)


def training_plan(spec: ModelSpec, use: str, machine: Machine, attention: str = "sdpa") -> MemoryPlan:
    """The run "Fine-tune it" opens for `use` on `machine`: memory_plan.opening_plan fitted to the free memory
    (the largest micro-batch that fits, then gradient checkpointing), the same the Train tab opens with (with the
    family's attention: eager keeps its scores)."""
    on_gpu = bool(machine.gpu_total)
    plan = opening_plan(spec, _ADAPTER[use], on_gpu, attention)
    return fit_plan(plan, machine.gpu_free if on_gpu else machine.ram_free)


def plan_words(plan: MemoryPlan) -> str:
    """How the estimated run trains, in words: its micro-batch, checkpointing, example length and precision."""
    shape = plan.shape
    batch = (f"batch of {plan.batch_size} at once" if plan.micro_batch >= plan.batch_size else
             f"micro-batch {plan.micro_batch} of {plan.batch_size}")
    ckpt = ", checkpointing" if shape.gradient_checkpointing else ""
    return f"{batch}{ckpt}, {shape.seq_len:,} tokens an example until data is chosen, {shape.precision}"


def model_shape(details: RepoDetails) -> tuple[ModelSpec | None, bool]:
    """(the model's shape, whether it is a guess from the parameter count)."""
    config = fetch_config(details.repo_id, details.revision or None)
    spec = spec_from_config(config) if config else None
    if spec is not None:
        return spec, False
    if details.parameters:
        return spec_of_size(details.parameters, details.context_length or 4096), True
    return None, False


def spec_from_config(config: dict[str, Any]) -> ModelSpec | None:
    """The ModelSpec of a config.json: exact for llama and gpt2, the same shapes for the many families that name
    them as Llama does (qwen2, mistral, gemma, phi3, ...), None when the shapes are not there."""

    return spec_for_estimate(config)


def spec_of_size(parameters: int, context: int) -> ModelSpec:
    """A Llama of about `parameters` parameters (12·L·d² in the blocks, d = 64·L as in common models of that size),
    for the estimates when only the parameter count is known."""
    layers = max(2, round((parameters / 49152) ** (1 / 3)))
    width = max(64, 64 * math.ceil(math.sqrt(parameters / (12 * layers)) / 64))
    return ModelSpec("llama", 32000, width, layers, max(1, width // 64), max(1, width // 64), 4 * width,
                     int(context))
