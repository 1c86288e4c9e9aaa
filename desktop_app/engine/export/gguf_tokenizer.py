"""A model's tokenizer as GGUF metadata (tokenizer.ggml.*), as llama.cpp reads it.

- A model whose weights came from a GGUF file (directly or as the base of a fine-tune) keeps that file's tokenizer
  metadata as it was (tokens, types, merges, pre-tokenizer name, special ids), so llama.cpp tokenizes exactly as
  it did for the original.
- A byte-level BPE tokenizer.json (GPT-2, Llama 3, Qwen2/2.5/3, SmolLM, OLMo, ours) becomes tokenizer.ggml.model
  "gpt2" with its tokens in id order (padded with unused tokens up to the model's vocab size), types and merges.
  Its `tokenizer.ggml.pre` is found the way llama.cpp's converter finds it, by what the tokenizer does to a check
  text, here by the split itself rather than a hash of a published vocabulary's ids (which no model trained here
  has): the tokenizer's own pre-tokenizer splits llama.cpp's check text, and the first of llama.cpp's
  pre-tokenizers (its regexes, src/llama-vocab.cpp) that splits it identically names it. None that does: refused
  in one line, as a normalizer llama.cpp does not apply (anything but NFC) is.
- A SentencePiece-style tokenizer.json (BPE with byte fallback: Llama 2, Mistral, Gemma, Phi-3) becomes
  tokenizer.ggml.model "llama": tokens with scores that rank them as the merges do (llama.cpp's SPM tokenizer joins
  the pair whose token scores highest), BYTE types for <0xXX>, and add_space_prefix from its normalizer or
  Metaspace pre-tokenizer.
- Special ids (bos, eos, pad, unk) as given, and add_bos / add_eos as the tokenizer's post-processor does, so
  llama.cpp adds to a prompt exactly what transformers adds.
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


# llama.cpp's check text (convert_hf_to_gguf.py: chktxt) and a few more kinds of text, split by each candidate.
CHECK_TEXTS = (
    "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ "
    "🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ "
    "------======= нещо на Български ```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE you "
    "sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL",
    "Hello world, café naïve 東京 🙂 12345 67.89\nA new line  with  double spaces\r\n\ttab I'M HERE",
)
_GPT2_RE = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_LLAMA3_RE = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?"
              r"[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_RE = (r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?"
             r"[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
# llama.cpp pre-tokenizer name -> the regexes it splits with, in turn (src/llama-vocab.cpp), most common first
LLAMA_PRE_TOKENIZERS: dict[str, tuple[str, ...]] = {
    "gpt-2": (_GPT2_RE,),
    "llama-bpe": (_LLAMA3_RE,),
    "qwen2": (_QWEN2_RE,),
    "smollm": (r"\p{N}", _GPT2_RE),
}
_SPM_SPACE = "\u2581"  # SentencePiece's word-start mark
# A tokenizer.json with nothing but a word-level model, to run a pre-tokenizer on its own.
_BARE = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
         "post_processor": None, "decoder": None, "model": {"type": "WordLevel", "vocab": {"x": 0}, "unk_token": "x"}}


def tokenizer_kind(tokenizer_json: dict[str, Any]) -> tuple[str, str]:
    """(tokenizer.ggml.model, tokenizer.ggml.pre) for a tokenizer.json: ("gpt2", name) for byte-level BPE, ("llama",
    "default") for SentencePiece-style BPE; UserError (one line) for what llama.cpp would not tokenize the same."""
    model = tokenizer_json.get("model") or {}
    if model.get("type") != "BPE":
        raise UserError(f"GGUF export writes BPE tokenizers; this model's is {model.get('type', 'unknown')}: export it "
                        "as a Hugging Face folder instead")
    if model.get("byte_fallback"):
        return "llama", "default"
    if not _has_byte_level(tokenizer_json.get("pre_tokenizer")):
        raise UserError("GGUF export writes byte-level BPE and SentencePiece-style tokenizers; this model's BPE has "
                        "neither a ByteLevel pre-tokenizer nor byte fallback: export it as a Hugging Face folder "
                        "instead")
    _check_normalizer(tokenizer_json.get("normalizer"))
    return "gpt2", llama_pre_name(tokenizer_json)


def llama_pre_name(tokenizer_json: dict[str, Any]) -> str:
    """The llama.cpp pre-tokenizer that splits the check texts exactly as this tokenizer.json's pre-tokenizer does."""
    from tokenizers import Tokenizer

    ours = Tokenizer.from_str(json.dumps({**_BARE, "pre_tokenizer": tokenizer_json["pre_tokenizer"]}))
    wanted = [_pieces(ours, text) for text in CHECK_TEXTS]
    for name, regexes in LLAMA_PRE_TOKENIZERS.items():
        candidate = Tokenizer.from_str(json.dumps({**_BARE, "pre_tokenizer": _split_then_bytes(regexes)}))
        if [_pieces(candidate, text) for text in CHECK_TEXTS] == wanted:
            return name
    kind = (tokenizer_json.get("pre_tokenizer") or {}).get("type", "none")
    raise UserError(f"this model's tokenizer splits text ({kind} pre-tokenizer) in a way none of llama.cpp's "
                    f"pre-tokenizers ({', '.join(LLAMA_PRE_TOKENIZERS)}) does: llama.cpp would tokenize differently, "
                    "so export it as a Hugging Face folder instead")


def _split_then_bytes(regexes: tuple[str, ...]) -> dict[str, Any]:
    splits = [{"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated", "invert": False} for r in regexes]
    return {"type": "Sequence", "pretokenizers": [*splits, {"type": "ByteLevel", "add_prefix_space": False,
                                                            "trim_offsets": False, "use_regex": False}]}


def _pieces(tokenizer: Any, text: str) -> list[str]:
    return [piece for piece, _span in tokenizer.pre_tokenizer.pre_tokenize_str(text)]


def _has_byte_level(pre: Any) -> bool:
    if not isinstance(pre, dict):
        return False
    if pre.get("type") == "ByteLevel":
        return True
    return pre.get("type") == "Sequence" and any(_has_byte_level(p) for p in pre.get("pretokenizers") or [])


def _check_normalizer(normalizer: Any) -> None:
    """llama.cpp's BPE applies no normalizer; NFC changes nothing in text that is already composed (nearly all)."""
    parts = normalizer.get("normalizers", []) if isinstance(normalizer, dict) and \
        normalizer.get("type") == "Sequence" else [normalizer]
    kinds = [p.get("type") for p in parts if isinstance(p, dict)]
    if any(k != "NFC" for k in kinds):
        raise UserError(f"this model's tokenizer normalizes text first ({', '.join(map(str, kinds))}), which llama.cpp "
                        "does not do: export it as a Hugging Face folder instead")


def tokenizer_metadata(tokenizer_json: dict[str, Any], vocab_size: int, special_ids: dict[str, int | None]
                       ) -> dict[str, Any]:
    """What add_tokenizer writes for a tokenizer.json (as a dict): model, pre, tokens, types, and merges (byte-level
    BPE) or scores and add_space_prefix (SentencePiece-style), add_bos / add_eos, special ids. UserError for a
    tokenizer llama.cpp cannot represent, or one that does not belong to a model of `vocab_size` rows."""
    kind, pre = tokenizer_kind(tokenizer_json)
    model = tokenizer_json.get("model") or {}
    by_id: dict[int, str] = {int(i): t for t, i in model.get("vocab", {}).items()}
    added = {int(a["id"]): a for a in tokenizer_json.get("added_tokens", [])}
    if max([*by_id, *added], default=-1) >= vocab_size:
        raise UserError(f"the tokenizer has ids up to {max([*by_id, *added])} but the model only has {vocab_size} "
                        "embedding rows: they do not belong together")
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    tokens, types = _tokens_and_types(by_id, added, vocab_size, model.get("unk_token"))
    out = {"model": kind, "pre": pre, "tokens": tokens, "types": types, "special_ids": special_ids,
           **_added_by_post_processor(tokenizer_json, special_ids)}
    if kind == "llama":
        out.update(scores=_spm_scores(tokens, merges), add_space_prefix=_adds_space_prefix(tokenizer_json))
    else:
        out["merges"] = merges
    return out


def _tokens_and_types(by_id: dict[int, str], added: dict[int, Any], vocab_size: int, unk: Any
                      ) -> tuple[list[str], list[int]]:
    import gguf

    tokens: list[str] = []
    types: list[int] = []
    for i in range(vocab_size):
        if i in added:
            token, kind = added[i]["content"], (gguf.TokenType.CONTROL if added[i].get("special", True)
                                                else gguf.TokenType.USER_DEFINED)
        elif i in by_id:
            token = by_id[i]
            kind = gguf.TokenType.BYTE if _is_byte_token(token) else \
                gguf.TokenType.UNKNOWN if token == unk else gguf.TokenType.NORMAL
        else:  # embedding rows no token uses (model vocab rounded up): llama.cpp needs one entry per row
            token, kind = f"[PAD{i}]", gguf.TokenType.UNUSED
        tokens.append(token)
        types.append(int(kind))
    return tokens, types


def _is_byte_token(token: str) -> bool:
    return len(token) == 6 and token.startswith("<0x") and token.endswith(">") and \
        all(c in "0123456789ABCDEFabcdef" for c in token[3:5])


def _spm_scores(tokens: list[str], merges: list[str]) -> list[float]:
    """A score per token that orders merged tokens as the merge list does (the earliest merge scores highest), which
    is how llama.cpp's SentencePiece tokenizer picks the pair to join; other tokens score 0."""
    rank = {}
    for r, merge in enumerate(merges):
        rank.setdefault(merge.replace(" ", ""), r)
    return [-1.0 - rank[t] if t in rank else 0.0 for t in tokens]


def _adds_space_prefix(tokenizer_json: dict[str, Any]) -> bool:
    """Whether the tokenizer puts a word-start mark before the text (a Prepend normalizer, or a Metaspace that
    prepends), as Llama 2 and Mistral do and Gemma does not."""
    normalizer = tokenizer_json.get("normalizer") or {}
    parts = normalizer.get("normalizers", [normalizer]) if isinstance(normalizer, dict) else []
    if any(isinstance(p, dict) and p.get("type") == "Prepend" and p.get("prepend") == _SPM_SPACE for p in parts):
        return True
    pre = tokenizer_json.get("pre_tokenizer") or {}
    parts = pre.get("pretokenizers", [pre]) if isinstance(pre, dict) else []
    return any(isinstance(p, dict) and p.get("type") == "Metaspace" and p.get("prepend_scheme", "always") != "never"
               and p.get("add_prefix_space", True) for p in parts)


def _added_by_post_processor(tokenizer_json: dict[str, Any], special_ids: dict[str, int | None]) -> dict[str, bool]:
    """add_bos / add_eos: whether the tokenizer's post-processor puts its bos / eos around a single text."""
    post = tokenizer_json.get("post_processor") or {}
    steps = post.get("processors", [post]) if isinstance(post, dict) else []
    single: list[Any] = next((s.get("single") or [] for s in steps
                              if isinstance(s, dict) and s.get("type") == "TemplateProcessing"), [])
    first = bool(single) and isinstance(single[0], dict) and "SpecialToken" in single[0]
    last = bool(single) and isinstance(single[-1], dict) and "SpecialToken" in single[-1]
    return {"add_bos": first and special_ids.get("bos") is not None,
            "add_eos": last and special_ids.get("eos") is not None}


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
        meta = tokenizer_metadata(tokenizer.json, vocab_size, tokenizer.special_ids)
        writer.add_tokenizer_model(meta["model"])
        writer.add_tokenizer_pre(meta["pre"])
        writer.add_token_list(meta["tokens"])
        writer.add_token_types(meta["types"])
        if meta["model"] == "llama":
            writer.add_token_scores(meta["scores"])
            writer.add_add_space_prefix(meta["add_space_prefix"])
        else:
            writer.add_token_merges(meta["merges"])
        for role, add in (("bos", writer.add_bos_token_id), ("eos", writer.add_eos_token_id),
                          ("pad", writer.add_pad_token_id), ("unk", writer.add_unk_token_id)):
            if tokenizer.special_ids.get(role) is not None:
                add(int(tokenizer.special_ids[role]))
        # what the tokenizer adds around a text, llama.cpp must add to a prompt too (ours add nothing)
        writer.add_add_bos_token(meta["add_bos"])
        writer.add_add_eos_token(meta["add_eos"])
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
