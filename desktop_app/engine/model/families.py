"""The model families the app knows by name: one table, read by loading, LoRA, the memory estimate, GGUF export,
the Get-a-model view and the Library. No front end knows families; they ask this table.

A family is a transformers `model_type`. For each: how it loads (the attention implementation it supports: Gemma 2
soft-caps its attention scores, which only the eager implementation does), which linear layers LoRA targets by
default, whether QLoRA (bitsandbytes 4-bit) applies, what llama.cpp calls it (its GGUF architecture) and how the
weights change on the way there (llama.cpp's LLAMA-style RoPE rotates adjacent pairs, so Q/K rows are permuted;
Gemma's RMSNorm multiplies by 1 + w, llama.cpp by w), and the tokenizer its published checkpoints ship (the kind
and llama.cpp's pre-tokenizer name), as llama.cpp's own converter (convert_hf_to_gguf.py) has them.

An unknown family (any other causal LM transformers loads) still loads, chats, trains with LoRA (its linear layers
are found by looking at the model) and exports to Hugging Face folders; only GGUF export says why not, in one line.
Stdlib only: importable without torch.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from desktop_app.engine.model.gguf_file import ARCHITECTURES as GGUF_ARCHITECTURES

ATTENTION_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj")
GATED_MLP = ("gate_proj", "up_proj", "down_proj")
SWIGLU_TARGETS = (*ATTENTION_PROJECTIONS, *GATED_MLP)


@dataclass(frozen=True)
class ModelFamily:
    """What the app knows of one model family (a transformers model_type)."""

    model_type: str
    label: str  # the names people know it by
    attention: str = "sdpa"  # the attn_implementation it loads with (training and chat)
    lora_targets: tuple[str, ...] = SWIGLU_TARGETS
    qlora: bool = True  # bitsandbytes 4-bit loading of its linear layers
    gguf_arch: str | None = None  # llama.cpp's general.architecture; None: no GGUF export
    rope_permute: bool = False  # Q/K rows reordered for llama.cpp's adjacent-pair (LLAMA) RoPE
    norm_shift: float = 0.0  # added to every RMSNorm weight on the way to GGUF (Gemma's 1 + w)
    tokenizer: str = "byte-level BPE"  # what its published checkpoints ship
    # llama.cpp's pre-tokenizer name of its published tokenizer, where one is known ("" otherwise); an export finds
    # the name from what the model's own tokenizer does (export/gguf_tokenizer.py), whatever this says
    llama_pre: str = ""
    chat: str = "its own template"  # how its chat template is handled
    system_role: bool = True  # its chat template takes a system message

    @property
    def gguf(self) -> bool:
        return self.gguf_arch is not None

    def works(self) -> dict[str, bool]:
        """What the app does with it: chat, LoRA, QLoRA, GGUF out (for the Get-a-model view and the Library)."""
        return {"chat": True, "lora": True, "qlora": self.qlora, "gguf": self.gguf}


FAMILIES: dict[str, ModelFamily] = {f.model_type: f for f in (
    ModelFamily("llama", "Llama 2, Llama 3.x, SmolLM2, TinyLlama", gguf_arch="llama", rope_permute=True,
                tokenizer="byte-level BPE (Llama 3, SmolLM2) or SentencePiece (Llama 2)",
                llama_pre="llama-bpe (Llama 3), smollm (SmolLM2)"),
    ModelFamily("mistral", "Mistral 7B, Ministral", gguf_arch="llama", rope_permute=True,
                tokenizer="SentencePiece (BPE with byte fallback)"),
    ModelFamily("qwen2", "Qwen2, Qwen2.5", gguf_arch="qwen2", llama_pre="qwen2", chat="its own template (ChatML)"),
    ModelFamily("qwen3", "Qwen3", gguf_arch="qwen3", llama_pre="qwen2", chat="its own template (ChatML, thinking)"),
    ModelFamily("gemma", "Gemma", gguf_arch="gemma", norm_shift=1.0, tokenizer="SentencePiece (BPE with byte fallback)",
                system_role=False, chat="its own template (no system role: the system text opens the first user turn)"),
    ModelFamily("gemma2", "Gemma 2", attention="eager", gguf_arch="gemma2", norm_shift=1.0,
                tokenizer="SentencePiece (BPE with byte fallback)", system_role=False,
                chat="its own template (no system role: the system text opens the first user turn)"),
    ModelFamily("gemma3_text", "Gemma 3 (text)", gguf_arch="gemma3", norm_shift=1.0,
                tokenizer="SentencePiece (BPE with byte fallback)",
                chat="its own template (a system message opens the first user turn)"),
    ModelFamily("phi3", "Phi-3, Phi-3.5, Phi-4-mini", lora_targets=("qkv_proj", "o_proj", "gate_up_proj", "down_proj"),
                gguf_arch="phi3", tokenizer="SentencePiece (Phi-3) or byte-level BPE (Phi-4)"),
    ModelFamily("olmo2", "OLMo 2", gguf_arch="olmo2"),
    ModelFamily("granite", "Granite 3.x", gguf_arch="granite", rope_permute=True),
    ModelFamily("smollm3", "SmolLM3", gguf_arch="smollm3", rope_permute=True, llama_pre="llama-bpe"),
    ModelFamily("gpt2", "GPT-2", lora_targets=("c_attn", "c_proj", "c_fc"), gguf_arch="gpt2", llama_pre="gpt-2"),
)}


def family_of(model_type: str | None) -> ModelFamily | None:
    """The family of a config.json's model_type (or of a GGUF file's llama.cpp architecture, e.g. "gemma3"); None
    for a family the table does not know."""
    name = str(model_type or "")
    return FAMILIES.get(name) or next((f for f in FAMILIES.values() if f.gguf_arch == name and name != "llama"),
                                      None)


def attention_of(model_type: str | None) -> str:
    """The attention implementation a model of this type loads with: the family's, else SDPA (the fused kernel)."""
    family = family_of(model_type)
    return family.attention if family is not None else "sdpa"


def gguf_families() -> list[str]:
    """The model types GGUF export writes, in table order."""
    return [name for name, family in FAMILIES.items() if family.gguf]


def no_gguf_reason(model_type: str | None) -> str:
    """One line saying why a model of this type cannot become GGUF (the families that can, and what to do)."""
    names = ", ".join(gguf_families())
    return (f"GGUF export supports {names} models; {not_in_converter(model_type)}: export it as a Hugging Face "
            "folder (--format hf) or zip instead")


def not_in_converter(model_type: str | None) -> str:
    """Why a model of a family without a GGUF architecture in the table cannot become GGUF, in words."""
    if not model_type:
        return "its config names no model type, which llama.cpp's converter needs"
    return f"this is a {model_type!r} model, which llama.cpp's converter does not know here"


def folder_attention(folder: str | Path) -> str:
    """The attention implementation for the model folder's config.json (SDPA when it cannot be read: transformers
    then says what is wrong with the folder)."""
    try:
        config = json.loads((Path(folder) / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "sdpa"
    return attention_of(config.get("model_type") if isinstance(config, dict) else None)


def family_words(model_type: str | None) -> str:
    """The family as a person knows it, e.g. "Qwen2, Qwen2.5 (qwen2)"; the model type itself for one the table does
    not know; "unknown" without one."""
    if not model_type:
        return "unknown"
    family = family_of(model_type)
    return f"{family.label} ({model_type})" if family is not None else str(model_type)


def works_here(model_type: str | None, gguf_file: bool = False) -> str:
    """What the app does with a model of this family, in one line (the Get-a-model view and the Library show it as
    is): chat, LoRA, QLoRA, GGUF export for llama.cpp and Ollama; for what it does not, why. `gguf_file`: the model is
    a GGUF file (its model_type may be llama.cpp's architecture name): llama.cpp and Ollama run it already; here it
    is dequantized to fine-tune, and GGUF export is of the model fine-tuned from it."""
    if gguf_file and not gguf_loadable(model_type):
        return (f"nothing: this app reads GGUF files of {', '.join(GGUF_ARCHITECTURES)} models, not {model_type!r} "
                "ones (llama.cpp and Ollama run it as it is)")
    family = family_of(model_type)
    qlora = family is None or family.qlora
    line = "chat, LoRA" + (", QLoRA" if qlora else "")
    line += " (dequantized to fine-tune)" if gguf_file else ""
    gguf = "GGUF export of the fine-tuned model" if gguf_file else "GGUF export"
    if family is not None and family.gguf:
        line += f", {gguf}" + ("" if gguf_file else " for llama.cpp and Ollama")
    else:
        line += f"; {gguf}: not for this family ({not_in_converter(model_type)}: export it as a Hugging Face folder " \
                "or zip instead)"
    return line + ("" if qlora else "; QLoRA: not for this family")


def gguf_loadable(model_type: str | None) -> bool:
    """Whether this app reads a GGUF file of this architecture (llama.cpp's name, or the model_type of a family
    whose GGUF architecture it reads)."""
    family = family_of(model_type)
    return str(model_type or "") in GGUF_ARCHITECTURES or (family is not None
                                                          and family.gguf_arch in GGUF_ARCHITECTURES)
