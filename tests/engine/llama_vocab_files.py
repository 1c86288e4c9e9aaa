"""llama.cpp's own vocabulary files (models/ggml-vocab-*.gguf, with the .inp texts and the .out ids its tokenizer
tests expect) for the llama.cpp lane. They are not in this repository: scripts/llama_vocabs.sh copies them from the
source archive of llama-cpp-python on PyPI into $AZR_LLAMA_VOCABS or ~/.cache/azr-model-trainer/llama-vocabs."""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

from desktop_app.engine.export.gguf_pretokenizers import LLAMA_PRE_TOKENIZERS, split_then_bytes

FETCH = "bash scripts/llama_vocabs.sh (or set AZR_LLAMA_VOCABS to a folder that has them)"
# the file's own tokenizer.ggml.pre -> the name of ours that splits and merges the same way
SAME_AS = {"starcoder": "smollm", "refact": "smollm", "command-r": "smollm", "mpt": "gpt-2"}


def vocab_folder() -> Path | None:
    folder = Path(os.environ.get("AZR_LLAMA_VOCABS", Path.home() / ".cache" / "azr-model-trainer" / "llama-vocabs"))
    return folder if (folder / "ggml-vocab-qwen2.gguf").is_file() else None


def cases(folder: Path, name: str) -> list[tuple[str, list[int]]]:
    """(text, the ids llama.cpp's tests expect) for ggml-vocab-`name`.gguf; the .inp file ends with a separator."""
    texts = (folder / f"ggml-vocab-{name}.gguf.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")[:-1]
    lines = (folder / f"ggml-vocab-{name}.gguf.out").read_text(encoding="utf-8").split("\n")[: len(texts)]
    return [(text, [int(i) for i in line.split()]) for text, line in zip(texts, lines, strict=True)]


_SCALARS = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def metadata(path: Path) -> dict[str, Any]:
    """The metadata of a GGUF file (strings, numbers, lists), read straight from its header: gguf's GGUFReader maps
    every array element to an object, which takes seconds for a 150k-token vocabulary."""
    data = path.read_bytes()
    at = 24  # magic, version, tensor count, key count
    (count,) = struct.unpack_from("<Q", data, 16)
    out: dict[str, Any] = {}
    for _ in range(count):
        key, at = _string(data, at)
        (vtype,), at = struct.unpack_from("<I", data, at), at + 4
        out[key], at = _value(data, at, vtype)
    return out


def _string(data: bytes, at: int) -> tuple[str, int]:
    (n,) = struct.unpack_from("<Q", data, at)
    return data[at + 8: at + 8 + n].decode("utf-8"), at + 8 + n


def _value(data: bytes, at: int, vtype: int) -> tuple[Any, int]:
    if vtype == 8:
        return _string(data, at)
    if vtype == 9:
        (item, n), at = struct.unpack_from("<IQ", data, at), at + 12
        if item in _SCALARS:
            size = struct.calcsize(_SCALARS[item])
            return list(struct.unpack_from(f"<{n}{_SCALARS[item][1]}", data, at)), at + n * size
        items = []
        for _ in range(n):
            value, at = _value(data, at, item)
            items.append(value)
        return items, at
    return struct.unpack_from(_SCALARS[vtype], data, at)[0], at + struct.calcsize(_SCALARS[vtype])


def byte_level_json(path: Path) -> dict[str, Any]:
    """The tokenizer.json of a byte-level BPE vocabulary file (its tokens, merges, control and user-defined tokens),
    split as llama.cpp splits for the file's own pre-tokenizer name: what a model folder of it would ship."""
    meta = metadata(path)
    pre = LLAMA_PRE_TOKENIZERS[SAME_AS.get(meta["tokenizer.ggml.pre"], meta["tokenizer.ggml.pre"])]
    tokens, types = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"]
    added = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
              "special": k == 3} for i, (t, k) in enumerate(zip(tokens, types, strict=True)) if k in (3, 4)]
    vocab: dict[str, int] = {}
    for i, token in enumerate(tokens):
        vocab.setdefault(token, i)
    model = {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
             "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False,
             "ignore_merges": pre.ignore_merges, "vocab": vocab, "merges": list(meta["tokenizer.ggml.merges"])}
    return {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
            "pre_tokenizer": split_then_bytes(pre.regexes), "post_processor": None,
            "decoder": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False},
            "model": model}


def special_ids(path: Path) -> dict[str, int | None]:
    meta = metadata(path)
    keys = {"bos": "bos_token_id", "eos": "eos_token_id", "pad": "padding_token_id", "unk": "unknown_token_id"}
    return {role: meta.get(f"tokenizer.ggml.{key}") for role, key in keys.items()}
