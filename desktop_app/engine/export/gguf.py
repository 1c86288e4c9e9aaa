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
from pathlib import Path
from typing import Any

import numpy as np

from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Event, Progress
from desktop_app.engine.export.gguf_families import family_of

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
    for key, field in reader.fields.items():
        if not key.startswith(_COPIED_TOKENIZER_KEYS) or not field.types:
            continue
        vtype = field.types[0]
        if vtype == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(key, field.contents(), vtype, sub_type=field.types[-1])
        else:
            writer.add_key_value(key, field.contents(), vtype)
    return True


def write_gguf(
    state: dict[str, np.ndarray],
    config: dict[str, Any],
    tokenizer_json: dict[str, Any] | None,
    out: Path,
    gguf_type: str = "f16",
    *,
    name: str = "model",
    special_ids: dict[str, int | None] | None = None,
    chat_template: str | None = None,
    tokenizer_source: Path | None = None,
    should_stop: Callable[[], bool] = lambda: False,
) -> Iterator[Event]:
    """Write `out` (a .gguf file) from a state dict (HF names, fp32 numpy) and its config.json dict.

    The tokenizer comes from `tokenizer_source` (a GGUF whose tokenizer metadata is copied) when given and its
    vocabulary fits, else from `tokenizer_json`. Yields Progress per tensor; returns early (writing nothing
    complete) when should_stop() turns true. The caller writes to a temporary path and renames.
    """
    import gguf

    if gguf_type not in GGUF_TYPES:
        raise UserError(f"GGUF type must be one of {', '.join(GGUF_TYPES)}, got {gguf_type!r}")
    family = family_of(config)  # refuses families and variants llama.cpp would not read the same way
    vocab_size = int(config["vocab_size"])
    special_ids = special_ids or {}
    names = [n for n in state if not (n == "lm_head.weight" and family.tied)]
    mapped = {n: family.rename(n) for n in names}
    unknown = [n for n, m in mapped.items() if m is None and not n.endswith(("rotary_emb.inv_freq", ".attn.bias",
                                                                               ".attn.masked_bias"))]
    if unknown:
        raise UserError(f"GGUF export does not know the tensors {', '.join(unknown[:5])}")
    names = [n for n in names if mapped[n] is not None]

    file_type = {"f32": gguf.LlamaFileType.ALL_F32, "f16": gguf.LlamaFileType.MOSTLY_F16,
                 "bf16": gguf.LlamaFileType.MOSTLY_BF16, "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}[gguf_type]
    writer = gguf.GGUFWriter(str(out), family.arch)
    try:
        writer.add_name(name)
        for method, value in family.hparams:
            getattr(writer, method)(value)
        writer.add_file_type(int(file_type))
        if gguf_type in ("q8_0", "bf16"):
            writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
        if tokenizer_source is None or not copy_tokenizer_metadata(tokenizer_source, writer, vocab_size):
            if tokenizer_json is None:
                raise UserError("GGUF export needs the model's tokenizer.json")
            meta = tokenizer_metadata(tokenizer_json, vocab_size, special_ids)
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
        if chat_template:
            writer.add_chat_template(chat_template)
        for done, hf_name in enumerate(names):
            if should_stop():
                return
            gguf_name = mapped[hf_name]
            assert gguf_name is not None
            array = family.transform(hf_name, np.asarray(state[hf_name], dtype=np.float32))
            data, raw_dtype = _convert(array, gguf_type)
            if raw_dtype is None:
                writer.add_tensor(gguf_name, data)
            else:
                writer.add_tensor(gguf_name, data, raw_dtype=raw_dtype)
            yield Progress("convert", done + 1, len(names), "tensors", gguf_name)
        if should_stop():
            return
        yield Progress("write", 0, 1, "files", f"{name}.gguf")
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file(progress=False)
        yield Progress("write", 1, 1, "files", f"{name}.gguf")
    finally:
        writer.close()


def read_tokenizer_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{path} is not a readable tokenizer.json: {exc}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path} is not a tokenizer.json (not a JSON object)")
    return data
