"""A model's tokenizer as GGUF metadata (tokenizer.ggml.*), as llama.cpp reads it.

- a model whose weights came from a GGUF file (directly or as the base of a fine-tune) keeps that file's tokenizer
  metadata as it was (tokens, types, merges, pre-tokenizer name, special ids), so llama.cpp tokenizes exactly as
  it did for the original;
- otherwise a byte-level BPE tokenizer.json is stored as tokenizer.ggml.model "gpt2" with the GPT-2 pre-tokenizer,
  its tokens in id order (padded with unused tokens up to the model's vocab size), token types and merges, plus
  the bos/eos/pad/unk ids.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from desktop_app.engine.errors import UserError

_COPIED_TOKENIZER_KEYS = ("tokenizer.ggml.", )


@dataclass(frozen=True)
class GGUFTokenizer:
    """Where a GGUF's tokenizer metadata comes from: the GGUF file `source` (copied when its vocabulary fits the
    model), else `json` (a tokenizer.json as a dict) with the bos/eos/pad/unk `special_ids`; and the chat template."""

    json: dict[str, Any] | None = None
    special_ids: dict[str, int | None] = field(default_factory=dict)
    chat_template: str | None = None
    source: Path | None = None


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


def add_tokenizer(writer: Any, tokenizer: GGUFTokenizer, vocab_size: int) -> None:
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
