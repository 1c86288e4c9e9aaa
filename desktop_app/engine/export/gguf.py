"""Write a model as GGUF (llama.cpp, LM Studio, Ollama) with the `gguf` package: f32, f16, bf16 and q8_0 here;
the smaller k-quants (Q4_K_M, Q5_K_M, Q6_K) by llama.cpp's own quantizer from our f32/f16 file (gguf_quantize.py).

What llama.cpp expects per family (names, shapes, the RoPE permutation) is in gguf_families.py. The tokenizer:
- a model whose weights came from a GGUF file (directly or as the base of a fine-tune) keeps that file's tokenizer
  metadata as it was (tokens, types, merges, pre-tokenizer name, special ids), so llama.cpp tokenizes exactly as
  it did for the original;
- otherwise a byte-level BPE tokenizer.json is stored as tokenizer.ggml.model "gpt2" with the GPT-2 pre-tokenizer,
  its tokens in id order (padded with unused tokens up to the model's vocab size), token types and merges, plus
  the bos/eos/pad/unk ids.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Event, Progress
from desktop_app.engine.export.gguf_families import Family, family_of

GGUF_TYPES = ("f32", "f16", "bf16", "q8_0")  # written here
Q8_BLOCK = 32  # q8_0 quantizes rows in blocks of 32 values
_COPIED_TOKENIZER_KEYS = ("tokenizer.ggml.", )


def tokenizer_metadata(tokenizer_json: dict[str, Any], vocab_size: int, special_ids: dict[str, int | None]
                       ) -> dict[str, Any]:
    """tokens, token types, merges and pre-tokenizer of a byte-level BPE tokenizer.json (as a dict).

    Raises UserError for tokenizers llama.cpp's "gpt2" vocabulary cannot represent.
    """
    import gguf

    model = tokenizer_json.get("model") or {}
    pre = tokenizer_json.get("pre_tokenizer") or {}
    if model.get("type") != "BPE" or pre.get("type") != "ByteLevel" or not pre.get("use_regex", True):
        kind = f"{model.get('type', '?')} with pre-tokenizer {pre.get('type', 'none')}"
        raise UserError("GGUF export supports byte-level BPE tokenizers (the default 'byte-bpe'); this model's "
                        f"tokenizer is {kind}: export it as a Hugging Face folder instead")
    by_id: dict[int, str] = {int(i): t for t, i in model.get("vocab", {}).items()}
    added = {int(a["id"]): a for a in tokenizer_json.get("added_tokens", [])}
    for i, a in added.items():
        by_id[i] = a["content"]
    if by_id and max(by_id) >= vocab_size:
        raise UserError(f"the tokenizer has ids up to {max(by_id)} but the model only has {vocab_size} "
                        "embedding rows: they do not belong together")
    tokens: list[str] = []
    types: list[int] = []
    for i in range(vocab_size):
        if i in added:
            tokens.append(added[i]["content"])
            types.append(int(gguf.TokenType.CONTROL if added[i].get("special", True) else gguf.TokenType.USER_DEFINED))
        elif i in by_id:
            tokens.append(by_id[i])
            types.append(int(gguf.TokenType.NORMAL))
        else:  # embedding rows no token uses (model vocab rounded up): llama.cpp needs one entry per row
            tokens.append(f"[PAD{i}]")
            types.append(int(gguf.TokenType.UNUSED))
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    return {"tokens": tokens, "types": types, "merges": merges, "pre": "gpt-2", "special_ids": special_ids}


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


def copy_tokenizer_metadata(source: Path, writer: Any, vocab_size: int) -> bool:
    """Copy the tokenizer.ggml.* metadata of a (checked) GGUF file into `writer`, when its vocabulary fits a
    model of `vocab_size` rows. False (nothing written) when it does not fit."""
    import gguf

    from desktop_app.engine.model.gguf_file import ArrayValue, read_header

    header = read_header(source)  # refuses a damaged file before gguf's reader maps it
    tokens = header.metadata.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, ArrayValue) or tokens.count != vocab_size:
        return False
    reader = gguf.GGUFReader(source)
    for key, entry in reader.fields.items():
        if not key.startswith(_COPIED_TOKENIZER_KEYS) or not entry.types:
            continue
        vtype = entry.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(key, entry.contents(), vtype, sub_type=entry.types[-1])
        else:
            writer.add_key_value(key, entry.contents(), vtype)
    return True


@dataclass(frozen=True)
class GGUFTokenizer:
    """Where a GGUF's tokenizer metadata comes from: the GGUF file `source` (copied when its vocabulary fits the
    model), else `json` (a tokenizer.json as a dict) with the bos/eos/pad/unk `special_ids`; and the chat template."""

    json: dict[str, Any] | None = None
    special_ids: dict[str, int | None] = field(default_factory=dict)
    chat_template: str | None = None
    source: Path | None = None


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
        _add_metadata(writer, family, gguf_type, name)
        _add_tokenizer(writer, tokenizer, vocab_size)
        for done, (hf_name, gguf_name) in enumerate(mapped.items()):
            if should_stop():
                return
            array = family.transform(hf_name, np.asarray(state[hf_name], dtype=np.float32))
            data, raw_dtype = _convert(array, gguf_type)
            if raw_dtype is None:
                writer.add_tensor(gguf_name, data)
            else:
                writer.add_tensor(gguf_name, data, raw_dtype=raw_dtype)
            yield Progress("convert", done + 1, len(mapped), "tensors", gguf_name)
        if should_stop():
            return
        yield Progress("write", 0, 1, "files", f"{name}.gguf")
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file(progress=False)
        yield Progress("write", 1, 1, "files", f"{name}.gguf")
    finally:
        writer.close()


def _gguf_names(state: dict[str, np.ndarray], family: Family) -> dict[str, str]:
    """HF name -> GGUF name of every tensor written (a tied lm_head and causal-mask buffers are not); UserError
    for a tensor the family does not know."""
    names = [n for n in state if not (n == "lm_head.weight" and family.tied)]
    mapped = {n: family.rename(n) for n in names}
    unknown = [n for n, m in mapped.items() if m is None and not n.endswith(("rotary_emb.inv_freq", ".attn.bias",
                                                                               ".attn.masked_bias"))]
    if unknown:
        raise UserError(f"GGUF export does not know the tensors {', '.join(unknown[:5])}")
    return {n: m for n, m in mapped.items() if m is not None}


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


def _add_tokenizer(writer: Any, tokenizer: GGUFTokenizer, vocab_size: int) -> None:
    """The tokenizer metadata (copied from a GGUF source when its vocabulary fits) and the chat template."""
    if tokenizer.source is None or not copy_tokenizer_metadata(tokenizer.source, writer, vocab_size):
        if tokenizer.json is None:
            raise UserError("GGUF export needs the model's tokenizer.json")
        special_ids = tokenizer.special_ids
        meta = tokenizer_metadata(tokenizer.json, vocab_size, special_ids)
        writer.add_tokenizer_model("gpt2")
        writer.add_tokenizer_pre(meta["pre"])
        writer.add_token_list(meta["tokens"])
        writer.add_token_types(meta["types"])
        writer.add_token_merges(meta["merges"])
        for role, add in (("bos", writer.add_bos_token_id), ("eos", writer.add_eos_token_id),
                          ("pad", writer.add_pad_token_id), ("unk", writer.add_unk_token_id)):
            if special_ids.get(role) is not None:
                add(int(special_ids[role]))
        # Our tokenizers add no BOS/EOS when encoding; llama.cpp must tokenize prompts the same way.
        writer.add_add_bos_token(False)
        writer.add_add_eos_token(False)
    if tokenizer.chat_template:
        writer.add_chat_template(tokenizer.chat_template)


def read_tokenizer_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{path} is not a readable tokenizer.json: {exc}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path} is not a tokenizer.json (not a JSON object)")
    return data
