"""Write a model as GGUF (llama.cpp, LM Studio, Ollama) with the `gguf` package: f32, f16, bf16 and q8_0 here;
the smaller k-quants (Q4_K_M, Q5_K_M, Q6_K) by llama.cpp's own quantizer from our f32/f16 file (gguf_quantize.py).

What llama.cpp expects per family (names, shapes, the RoPE permutation) is in gguf_families.py; the tokenizer's
metadata in gguf_tokenizer.py.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Event, Progress
from desktop_app.engine.export.gguf_families import Family, family_of, is_skipped
from desktop_app.engine.export.gguf_quantize import WRITTEN_TYPES
from desktop_app.engine.export.gguf_tokenizer import GGUFTokenizer, add_tokenizer

GGUF_TYPES = WRITTEN_TYPES  # written here
Q8_BLOCK = 32  # q8_0 quantizes rows in blocks of 32 values


def _convert(array: np.ndarray, gguf_type: str) -> tuple[np.ndarray, Any]:
    """(data, raw_dtype) for one tensor; 1-D stays f32; q8_0 rows not divisible by 32 fall back to f16."""
    import gguf

    if array.ndim == 1 or gguf_type == "f32":
        return array.astype(np.float32), None
    if gguf_type == "bf16":
        qtype = gguf.GGMLQuantizationType.BF16
        return gguf.quants.quantize(array.astype(np.float32), qtype), qtype
    if gguf_type == "q8_0" and array.shape[-1] % Q8_BLOCK == 0:
        qtype = gguf.GGMLQuantizationType.Q8_0
        return gguf.quants.quantize(array.astype(np.float32), qtype), qtype
    return array.astype(np.float16), None


@dataclass(frozen=True)
class GGUFFile:
    """The file write_gguf makes: its path (a temporary one: the caller renames it), tensor type and general.name."""

    path: Path
    gguf_type: str = "f16"
    name: str = "model"


def write_gguf(state: dict[str, np.ndarray], config: dict[str, Any], tokenizer: GGUFTokenizer, target: GGUFFile, *,
               should_stop: Callable[[], bool] = lambda: False) -> Iterator[Event]:
    """Write `target` from a state dict (HF names, fp32 numpy), its config.json dict and `tokenizer`.

    Yields Progress per tensor; returns early (writing nothing complete) when should_stop() turns true. The caller
    writes to a temporary path and renames.
    """
    import gguf

    gguf_type, name = target.gguf_type, target.name
    if gguf_type not in GGUF_TYPES:
        raise UserError(f"GGUF type must be one of {', '.join(GGUF_TYPES)}, got {gguf_type!r}")
    family = family_of(config)  # refuses families and variants llama.cpp would not read the same way
    vocab_size = int(config["vocab_size"])
    mapped = _gguf_names(state, family)
    writer = gguf.GGUFWriter(str(target.path), family.arch)
    try:
        _add_metadata(writer, family, gguf_type, safe_general_name(name, tokenizer))
        add_tokenizer(writer, tokenizer, vocab_size)
        total = len(mapped) + len(family.extra)
        for done, (hf_name, gguf_name) in enumerate(mapped.items()):
            if should_stop():
                return
            _add_tensor(writer, gguf_name, family.transform(hf_name, np.asarray(state[hf_name], dtype=np.float32)),
                        gguf_type)
            yield Progress("convert", done + 1, total, "tensors", gguf_name)
        for done, (gguf_name, array) in enumerate(family.extra.items(), start=len(mapped)):
            _add_tensor(writer, gguf_name, array, gguf_type)
            yield Progress("convert", done + 1, total, "tensors", gguf_name)
        if should_stop():
            return
        yield Progress("write", 0, 1, "files", f"{name}.gguf")
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file(progress=False)
        yield Progress("write", 1, 1, "files", f"{name}.gguf")
    finally:
        writer.close()


def _add_tensor(writer: Any, name: str, array: np.ndarray, gguf_type: str) -> None:
    data, raw_dtype = _convert(array, gguf_type)
    if raw_dtype is None:
        writer.add_tensor(name, data)
    else:
        writer.add_tensor(name, data, raw_dtype=raw_dtype)


def _gguf_names(state: dict[str, np.ndarray], family: Family) -> dict[str, str]:
    """HF name -> GGUF name of every tensor written (a tied lm_head and causal-mask buffers are not); UserError
    for a tensor the family does not know."""
    names = [n for n in state if not (n == "lm_head.weight" and family.tied)]
    mapped = {n: family.rename(n) for n in names}
    unknown = [n for n, m in mapped.items() if m is None and not is_skipped(n)]
    if unknown:
        raise UserError(f"GGUF export does not know the tensors {', '.join(unknown[:5])} (llama.cpp's "
                        f"{family.arch} reads no such tensor)")
    return {n: m for n, m in mapped.items() if m is not None}


_PHI3_NAMES = ("phi-3", "phi3")
_PHI3_TOKENS = ("</s>", "<unk>", "<s>", "<|endoftext|>")


def safe_general_name(name: str, tokenizer: GGUFTokenizer) -> str:
    """general.name as written: llama.cpp looks Phi-3's special tokens up by text in any model whose name contains
    "phi3" or "phi-3" and aborts loading when one is missing, so such a name on a vocabulary without them is
    written as "phi_3"."""
    if not any(n in name.lower() for n in _PHI3_NAMES) or tokenizer.json is None:
        return name
    vocab = set((tokenizer.json.get("model") or {}).get("vocab") or {})
    vocab |= {a.get("content") for a in tokenizer.json.get("added_tokens") or []}
    if all(t in vocab for t in _PHI3_TOKENS):
        return name
    for spelling in ("phi-3", "phi3", "Phi-3", "Phi3", "PHI-3", "PHI3"):
        name = name.replace(spelling, "phi_3")
    return name


def _add_metadata(writer: Any, family: Family, gguf_type: str, name: str) -> None:
    import gguf

    file_type = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
                 "bf16": gguf.LlamaFileType.MOSTLY_BF16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[gguf_type]
    writer.add_name(name)
    for method, value in family.hparams:
        getattr(writer, method)(value)
    writer.add_file_type(int(file_type))
    if gguf_type in ("q8_0", "bf16"):
        writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
