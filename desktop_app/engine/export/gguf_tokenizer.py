"""A model's tokenizer as GGUF metadata (tokenizer.ggml.*), as llama.cpp reads it.

- A model whose weights came from a GGUF file (directly or as the base of a fine-tune) keeps that file's tokenizer
  metadata as it was (tokens, types, merges, pre-tokenizer name, special ids), so llama.cpp tokenizes exactly as
  it did for the original.
- A byte-level BPE tokenizer.json (GPT-2, Llama 3, Qwen2/2.5/3, SmolLM, OLMo, DeepSeek, ours) becomes
  tokenizer.ggml.model "gpt2" with its tokens in id order (padded with unused tokens up to the model's vocab size),
  types and merges. Its `tokenizer.ggml.pre` is the llama.cpp pre-tokenizer that splits text exactly as it does
  (gguf_pretokenizers.py); none: refused in one line, as a normalizer llama.cpp does not apply (anything but NFC) is.
- A SentencePiece-style tokenizer.json (BPE with byte fallback: Llama 2, Mistral, Gemma, Phi-3) becomes
  tokenizer.ggml.model "llama": tokens with scores that rank them as the merges do (llama.cpp's SPM tokenizer joins
  the pair whose token scores highest), BYTE types for <0xXX>, and add_space_prefix from what its normalizer or
  Metaspace pre-tokenizer does. Its merges are written too: llama.cpp ignores them there, transformers' GGUF reader
  rebuilds the exact BPE from them.
- Added tokens: CONTROL when special, USER_DEFINED otherwise (llama.cpp matches those in raw text, as transformers
  does), the unknown token UNKNOWN. Special ids (bos, eos, pad, unk) as given, and add_bos / add_eos as the
  tokenizer adds them, so llama.cpp adds to a prompt exactly what transformers adds.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from desktop_app.engine.errors import UserError
from desktop_app.engine.export.gguf_pretokenizers import SPM_SPACE, SpmShape, llama_pre_name, spm_shape
from desktop_app.engine.model.gguf_file import ArrayValue, read_header

_COPIED_TOKENIZER_KEYS = ("tokenizer.ggml.", )
_AS_HF = "export it as a Hugging Face folder instead"


@dataclass(frozen=True)
class GGUFTokenizer:
    """Where a GGUF's tokenizer metadata comes from: the GGUF file `source` (copied when its vocabulary fits the
    model), else `json` (a tokenizer.json as a dict) with the bos/eos/pad/unk `special_ids`; and the chat template.
    `add_bos` / `add_eos`: whether the tokenizer puts bos / eos around a text, where the caller knows it (see
    added_around_text); None: as the tokenizer.json's post-processor does."""

    json: dict[str, Any] | None = None
    special_ids: dict[str, int | None] = field(default_factory=dict)
    chat_template: str | None = None
    source: Path | None = None
    add_bos: bool | None = None
    add_eos: bool | None = None


def tokenizer_kind(tokenizer_json: dict[str, Any]) -> tuple[str, str]:
    """(tokenizer.ggml.model, tokenizer.ggml.pre) for a tokenizer.json: ("gpt2", name) for byte-level BPE, ("llama",
    "default") for SentencePiece-style BPE; UserError (one line) for what llama.cpp would not tokenize the same."""
    model = tokenizer_json.get("model") or {}
    if model.get("type") != "BPE":
        raise UserError(f"GGUF export writes BPE tokenizers; this model's is {model.get('type', 'unknown')}: "
                        f"{_AS_HF}")
    if model.get("byte_fallback"):
        _checked_spm(tokenizer_json)
        return "llama", "default"
    if not _has_byte_level(tokenizer_json.get("pre_tokenizer")):
        raise UserError("GGUF export writes byte-level BPE and SentencePiece-style tokenizers; this model's BPE has "
                        f"neither a ByteLevel pre-tokenizer nor byte fallback: {_AS_HF}")
    _check_normalizer(tokenizer_json.get("normalizer"), spm=False)
    return "gpt2", llama_pre_name(tokenizer_json)


def _checked_spm(tokenizer_json: dict[str, Any]) -> SpmShape:
    """The SpmShape of a SentencePiece-style tokenizer.json, refused (one line) where llama.cpp would differ."""
    _check_normalizer(tokenizer_json.get("normalizer"), spm=True)
    shape = spm_shape(tokenizer_json)
    vocab = tokenizer_json["model"].get("vocab") or {}
    if not all(f"<0x{b:02X}>" in vocab for b in range(256)):  # llama.cpp has no other way to write a new character
        raise UserError(f"this model's tokenizer falls back to bytes but lacks some of the 256 byte tokens <0x00>.."
                        f"<0xFF> llama.cpp needs: {_AS_HF}")
    if shape.splits_words and any(SPM_SPACE in token[1:] for token in vocab if token not in _added(tokenizer_json)):
        raise UserError("this model's tokenizer never merges across words but has tokens that span them, which "
                        f"llama.cpp would use: {_AS_HF}")
    return shape


def _has_byte_level(pre: Any) -> bool:
    if not isinstance(pre, dict):
        return False
    if pre.get("type") == "ByteLevel":
        return True
    return pre.get("type") == "Sequence" and any(_has_byte_level(p) for p in pre.get("pretokenizers") or [])


def _normalizer_steps(normalizer: Any) -> list[dict[str, Any]]:
    if not isinstance(normalizer, dict):
        return []
    if normalizer.get("type") == "Sequence":
        return [s for p in normalizer.get("normalizers") or [] for s in _normalizer_steps(p)]
    return [normalizer]


def _check_normalizer(normalizer: Any, *, spm: bool) -> None:
    """llama.cpp normalizes nothing (NFC, tolerated, changes nothing in text that is already composed: nearly all);
    its SentencePiece tokenizer turns spaces into "▁" and may put one before the text."""
    allowed = {"NFC", "Prepend", "Replace"} if spm else {"NFC"}
    steps = _normalizer_steps(normalizer)
    odd = [str(s.get("type")) for s in steps if s.get("type") not in allowed or _odd_spm_step(s)]
    if odd:
        raise UserError(f"this model's tokenizer normalizes text first ({', '.join(odd)}), which llama.cpp does not "
                        f"do: {_AS_HF}")


def _odd_spm_step(step: dict[str, Any]) -> bool:
    if step.get("type") == "Prepend":
        return step.get("prepend") != SPM_SPACE
    if step.get("type") == "Replace":
        return step.get("pattern") != {"String": " "} or step.get("content") != SPM_SPACE
    return False


def _added(tokenizer_json: dict[str, Any]) -> dict[int, dict[str, Any]]:
    return {int(a["id"]): a for a in tokenizer_json.get("added_tokens") or []}


def tokenizer_metadata(tokenizer_json: dict[str, Any], vocab_size: int, special_ids: dict[str, int | None], *,
                       add_bos: bool | None = None, add_eos: bool | None = None) -> dict[str, Any]:
    """What add_tokenizer writes for a tokenizer.json (as a dict): model, pre, tokens, types, merges, and for
    SentencePiece-style BPE scores and add_space_prefix; add_bos / add_eos (given, else as the post-processor adds
    them) and the special ids. UserError for a tokenizer llama.cpp cannot represent, or one that does not belong to
    a model of `vocab_size` rows."""
    kind, pre = tokenizer_kind(tokenizer_json)
    model = tokenizer_json.get("model") or {}
    by_id: dict[int, str] = {int(i): t for t, i in (model.get("vocab") or {}).items()}
    added = _added(tokenizer_json)
    if max([*by_id, *added], default=-1) >= vocab_size:
        raise UserError(f"the tokenizer has ids up to {max([*by_id, *added])} but the model only has {vocab_size} "
                        "embedding rows: they do not belong together")
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]
    unk = special_ids.get("unk")
    vocab = _Vocab(by_id, added, unk if unk is not None else (model.get("vocab") or {}).get(model.get("unk_token")),
                   kind == "llama")
    tokens, types = vocab.tokens_and_types(vocab_size)
    out = {"model": kind, "pre": pre, "tokens": tokens, "types": types, "merges": merges,
           **_around_text(tokenizer_json, special_ids, add_bos, add_eos)}
    if kind == "llama":
        shape = _checked_spm(tokenizer_json)
        out.update(scores=_spm_scores(tokens, types, merges), add_space_prefix=shape.space_prefix)
    return out


@dataclass(frozen=True)
class _Vocab:
    """A tokenizer.json's tokens by id: its model's, its added tokens, the unknown token's id; SentencePiece-style."""

    by_id: dict[int, str]
    added: dict[int, dict[str, Any]]
    unk_id: int | None
    spm: bool

    def tokens_and_types(self, vocab_size: int) -> tuple[list[str], list[int]]:
        """One token and type per embedding row; rows no token uses (model vocab rounded up) are UNUSED, since
        llama.cpp needs one entry per row."""
        pairs = [self.token(i) for i in range(vocab_size)]
        return [t for t, _ in pairs], [k for _, k in pairs]

    def token(self, i: int) -> tuple[str, int]:
        import gguf

        if i in self.added:
            return self._added_token(i)
        if i not in self.by_id:
            return f"[PAD{i}]", int(gguf.TokenType.UNUSED)
        token = self.by_id[i]
        kind = gguf.TokenType.UNKNOWN if i == self.unk_id else \
            gguf.TokenType.BYTE if self.spm and _is_byte_token(token) else gguf.TokenType.NORMAL
        return token, int(kind)

    def _added_token(self, i: int) -> tuple[str, int]:
        import gguf

        entry = self.added[i]
        if i == self.unk_id:
            return entry["content"], int(gguf.TokenType.UNKNOWN)
        if entry.get("special", True):
            return entry["content"], int(gguf.TokenType.CONTROL)
        # llama.cpp finds user-defined tokens in the raw text, before its SentencePiece tokenizer writes spaces as
        # "▁" (as llama.cpp's converter does for Gemma's)
        content = entry["content"].replace(SPM_SPACE, " ") if self.spm else entry["content"]
        return content, int(gguf.TokenType.USER_DEFINED)


def _is_byte_token(token: str) -> bool:
    return len(token) == 6 and token.startswith("<0x") and token.endswith(">") and \
        all(c in "0123456789ABCDEFabcdef" for c in token[3:5])


def _spm_scores(tokens: list[str], types: list[int], merges: list[str]) -> list[float]:
    """A score per token that orders merged tokens as the merge list does (the earliest merge scores highest), which
    is how llama.cpp's SentencePiece tokenizer picks the pair to join. Single characters score 0 (never joined into);
    tokens no merge makes, and special, added, byte and unused ones, score below every merge, so llama.cpp joins
    into them last (it joins any adjacent pair whose text is a token)."""
    import gguf

    rank: dict[str, int] = {}
    for r, merge in enumerate(merges):
        rank.setdefault(merge.replace(" ", ""), r)
    last = -1.0 - len(merges)
    normal = int(gguf.TokenType.NORMAL)
    return [-1.0 - rank[t] if k == normal and t in rank else 0.0 if k == normal and len(t) == 1 else last
            for t, k in zip(tokens, types, strict=True)]


def _post_processor_adds(tokenizer_json: dict[str, Any]) -> tuple[int | None, int | None]:
    """The ids of the special tokens the post-processor puts before and after a single text (None: none)."""
    post = tokenizer_json.get("post_processor") or {}
    steps = post.get("processors", [post]) if isinstance(post, dict) else []
    template = next((s for s in steps if isinstance(s, dict) and s.get("type") == "TemplateProcessing"), {})
    single: list[Any] = template.get("single") or []
    specials = template.get("special_tokens") or {}

    def special_id(item: Any) -> int | None:
        name = item.get("SpecialToken", {}).get("id") if isinstance(item, dict) else None
        ids = (specials.get(name) or {}).get("ids") or []
        return int(ids[0]) if len(ids) == 1 else None

    return (special_id(single[0]), special_id(single[-1])) if single else (None, None)


def _around_text(tokenizer_json: dict[str, Any], special_ids: dict[str, int | None], add_bos: bool | None,
                 add_eos: bool | None) -> dict[str, Any]:
    """add_bos, add_eos and the special ids to write: the bos a post-processor adds is the one llama.cpp must add."""
    before, after = _post_processor_adds(tokenizer_json)
    ids = dict(special_ids)
    if add_bos is None and before is not None:
        ids["bos"] = before
    if ids.get("eos") is None:
        ids["eos"] = after
    bos = before is not None if add_bos is None else add_bos
    eos = (after is not None and after == ids["eos"]) if add_eos is None else add_eos
    return {"add_bos": bos and ids.get("bos") is not None, "add_eos": eos and ids.get("eos") is not None,
            "special_ids": ids}


def added_around_text(tokenizer: Any) -> dict[str, bool]:
    """{"add_bos", "add_eos"}: whether a transformers tokenizer puts its bos before / its eos after a text, found by
    encoding one (for GGUFTokenizer's add_bos / add_eos: what it does, whatever its tokenizer.json says)."""
    plain = list(tokenizer("Hello", add_special_tokens=False)["input_ids"])
    full = list(tokenizer("Hello")["input_ids"])
    at = next((i for i in range(len(full) - len(plain) + 1) if full[i:i + len(plain)] == plain), None)
    if at is None:
        return {"add_bos": False, "add_eos": False}
    before, after = full[:at], full[at + len(plain):]
    return {"add_bos": before == [tokenizer.bos_token_id] and tokenizer.bos_token_id is not None,
            "add_eos": after == [tokenizer.eos_token_id] and tokenizer.eos_token_id is not None}


def copy_tokenizer_metadata(source: Path, writer: Any, vocab_size: int) -> bool:
    """Copy the tokenizer.ggml.* metadata of a (checked) GGUF file into `writer`, when its vocabulary fits a
    model of `vocab_size` rows. False (nothing written) when it does not fit."""
    import gguf


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
        meta = tokenizer_metadata(tokenizer.json, vocab_size, tokenizer.special_ids, add_bos=tokenizer.add_bos,
                                  add_eos=tokenizer.add_eos)
        _write_vocabulary(writer, meta)
    if tokenizer.chat_template:
        writer.add_chat_template(tokenizer.chat_template)


def _write_vocabulary(writer: Any, meta: dict[str, Any]) -> None:
    writer.add_tokenizer_model(meta["model"])
    writer.add_tokenizer_pre(meta["pre"])
    writer.add_token_list(meta["tokens"])
    writer.add_token_types(meta["types"])
    if meta["merges"]:
        writer.add_token_merges(meta["merges"])
    if meta["model"] == "llama":
        writer.add_token_scores(meta["scores"])
        writer.add_add_space_prefix(meta["add_space_prefix"])
    ids = meta["special_ids"]
    for role, add in (("bos", writer.add_bos_token_id), ("eos", writer.add_eos_token_id),
                      ("pad", writer.add_pad_token_id), ("unk", writer.add_unk_token_id)):
        if ids.get(role) is not None:
            add(int(ids[role]))
    # what the tokenizer adds around a text, llama.cpp must add to a prompt too (ours add nothing)
    writer.add_add_bos_token(meta["add_bos"])
    writer.add_add_eos_token(meta["add_eos"])


def read_tokenizer_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UserError(f"{path} is not a readable tokenizer.json: {exc}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path} is not a tokenizer.json (not a JSON object)")
    return data
