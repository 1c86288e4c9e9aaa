"""How a tokenizer.json splits text before its BPE merges, next to what llama.cpp does (for gguf_tokenizer.py).

- Byte-level BPE: llama.cpp splits with the regexes of a named pre-tokenizer (`tokenizer.ggml.pre`). Its converter
  names one by hashing the ids a published vocabulary gives its check text, which no tokenizer trained here has; this
  finds it by the split itself: the tokenizer's own pre-tokenizer splits the check texts, and the first of llama.cpp's
  pre-tokenizers whose regexes split them identically (and that looks whole words up before merging exactly when the
  tokenizer does: `ignore_merges`) names it.
- SentencePiece-style BPE: llama.cpp turns spaces into "▁", puts one before the text when `add_space_prefix` says so,
  and merges over the whole text; the tokenizer's normalizer and pre-tokenizer must do no more than that.
Both refuse in one line (UserError) what llama.cpp would tokenize differently.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from typing import Any

from desktop_app.engine.errors import UserError

SPM_SPACE = "\u2581"  # SentencePiece's word-start mark
_AS_HF = "export it as a Hugging Face folder instead"

# llama.cpp's check text (conversion/base.py, get_vocab_base_pre: chktxt), then a few more kinds of text: code, a line
# ending in spaces, digit groups, contractions. None starts with a space (see spm_shape).
CHECK_TEXTS = (
    "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n🚀 (normal) 😶\u200d🌫️ (multiple emojis concatenated) ✅ "
    "🦙🦙 3 33 333 3333 33333 333333 3333333 33333333 3.3 3..3 3...3 កាន់តែពិសេសអាច😁 ?我想在apple工作1314151天～ "
    "------======= нещо на Български ''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE you "
    "sure? 'M not sure I'll make it, 'D you like some tea? We'Ve a'lL",
    "Hello world, café naïve 東京 🙂 12345 67.89\nA new line  with  double spaces\r\n\ttab I'M HERE",
    "def f(x):\n    return x ** 2  # don't DON'T\n\n\n   1,234,567 1234567.89 ÀÉÎõü ﬁ Ⅻ ①  \n  ",
)

_GPT2 = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_LLAMA3 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)"
           r"|\s+")
_QWEN2 = _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_QWEN35 = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+"
           r"|\s+(?!\S)|\s+")
_UPPER_LOWER = (r"[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+<c>|[^\r\n\p{L}\p{N}]?"
                r"((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*<c>")
_TEKKEN = _UPPER_LOWER.replace("<c>", "") + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_GPT4O = (_UPPER_LOWER.replace("<c>", _CONTRACTIONS + "?") + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+"
          r"|\s+(?!\S)|\s+")
# Mistral NeMo's (tekken) and Llama 4's / GPT-4o's splits as their tokenizer.json files write them
_CASED = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+<c>|[^\r\n\p{L}\p{N}]?"
          r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*<c>")
_TEKKEN_HF = _CASED.replace("<c>", "") + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
_GPT4O_HF = (_CASED.replace("<c>", r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?") + r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")
# (written with escapes: the ranges' ends are exactly llama.cpp's code points)
_DEEPSEEK_LETTERS = (
    "\\s?[A-Za-z\u00b5\u00c0-\u00d6\u00d8-\u00f6\u00f8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af"
    "\u0370-\u0373\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5"
    "\u03f7-\u0481\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-"
    "\u1cbf\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d"
    "\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-"
    "\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113"
    "\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149"
    "\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b"
    "\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a\uff41-"
    "\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-\U00010cb2\U00010cc0"
    "-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+")
_DEEPSEEK_PUNCT = "\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+"
_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
_DEEPSEEK_V3 = ("[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+" r"|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+"
                r"| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_BLOOM = " ?[^(\\s|.,!?\u2026\u3002\uff0c\u3001\u0964\u06d4\u060c)]+"


@dataclass(frozen=True)
class LlamaPre:
    """One of llama.cpp's BPE pre-tokenizers: the regexes it splits with, in turn, and whether it takes a word that is
    a token as it is before merging (llama.cpp's ignore_merges; tokenizer.json's model.ignore_merges)."""

    regexes: tuple[str, ...]
    ignore_merges: bool = False
    # the regexes as the tokenizer.json of the models llama.cpp's converter gives this name spell them, where llama.cpp
    # rewrote them for its own regex engine in a way that splits some text apart differently (for tekken and gpt-4o:
    # combining marks after letters, as in Khmer or Devanagari): llama.cpp tokenizes those models so all the same
    published: tuple[str, ...] = ()


# tokenizer.ggml.pre name -> what llama.cpp does for it (src/llama-vocab.cpp: llm_tokenizer_bpe and the flags set where
# the name is read), in the order they are tried. Names that behave the same are listed once: gpt-2 = olmo, phi-2,
# mpt; dbrx = smaug-bpe, chatglm-bpe; qwen2 = deepseek-r1-qwen, megrez; smollm = starcoder, refact, command-r;
# gpt-4o = llama4; bloom = poro-chat, gpt3-finnish.
LLAMA_PRE_TOKENIZERS: dict[str, LlamaPre] = {
    "gpt-2": LlamaPre((_GPT2,)),
    "llama-bpe": LlamaPre((_LLAMA3,), ignore_merges=True),
    "dbrx": LlamaPre((_LLAMA3,)),
    "qwen2": LlamaPre((_QWEN2,)),
    "qwen35": LlamaPre((_QWEN35,)),
    "smollm": LlamaPre((r"\p{N}", _GPT2)),
    "tekken": LlamaPre((_TEKKEN,), ignore_merges=True, published=(_TEKKEN_HF,)),
    "gpt-4o": LlamaPre((_GPT4O,), published=(_GPT4O_HF,)),
    "deepseek-llm": LlamaPre((r"[\r\n]", _DEEPSEEK_LETTERS, _DEEPSEEK_PUNCT, r"\s+$", _CJK, r"\p{N}+")),
    "deepseek-coder": LlamaPre((r"[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK, r"\p{N}")),
    "deepseek-v3": LlamaPre((r"\p{N}{1,3}", "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+", _DEEPSEEK_V3)),
    "falcon": LlamaPre((r"[\p{P}\$\+<=>\^~\|`]+", _GPT2, r"[0-9][0-9][0-9]")),
    "seed-coder": LlamaPre((_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+"
                            r"|\s+(?!\S)|\s+",)),
    "minicpm5": LlamaPre((r"\p{N}{1,3}", _CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*"
                          r"|\s*[\r\n]+|\s+(?!\S)|\s+"), ignore_merges=True),
    "bloom": LlamaPre((_BLOOM,)),
    "viking": LlamaPre((_BLOOM, r"\p{N}")),
}

# A tokenizer.json with nothing but a word-level model, to run a normalizer or pre-tokenizer on its own.
_BARE = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
         "pre_tokenizer": None, "post_processor": None, "decoder": None,
         "model": {"type": "WordLevel", "vocab": {"x": 0}, "unk_token": "x"}}


def _bare(**parts: Any) -> Any:
    from tokenizers import Tokenizer

    try:
        return Tokenizer.from_str(json.dumps({**_BARE, **parts}))
    except Exception as exc:  # the tokenizers library says only Exception
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UserError(f"this model's tokenizer.json has a {' or '.join(parts)} the tokenizers library cannot read "
                        f"({first}): {_AS_HF}") from None


def split_then_bytes(regexes: tuple[str, ...]) -> dict[str, Any]:
    """The tokenizer.json pre-tokenizer that splits as llama.cpp does with `regexes` (then maps bytes to GPT-2's
    alphabet, as llama.cpp's BPE does)."""
    splits = [{"type": "Split", "pattern": {"Regex": r}, "behavior": "Isolated", "invert": False} for r in regexes]
    return {"type": "Sequence", "pretokenizers": [*splits, {"type": "ByteLevel", "add_prefix_space": False,
                                                            "trim_offsets": False, "use_regex": False}]}


def _pieces(pre_tokenizer: Any) -> tuple[tuple[str, ...], ...]:
    tokenizer = _bare(pre_tokenizer=pre_tokenizer)
    return tuple(tuple(p for p, _ in tokenizer.pre_tokenizer.pre_tokenize_str(text)) for text in CHECK_TEXTS)


@cache
def _llama_pieces(name: str) -> tuple[tuple[tuple[str, ...], ...], ...]:
    """How llama.cpp's pre-tokenizer `name` splits the check texts (and how the regexes it was made from do)."""
    pre = LLAMA_PRE_TOKENIZERS[name]
    return tuple(_pieces(split_then_bytes(regexes)) for regexes in (pre.regexes, pre.published) if regexes)


def llama_pre_name(tokenizer_json: dict[str, Any]) -> str:
    """The llama.cpp pre-tokenizer that splits the check texts exactly as this byte-level BPE tokenizer.json does and
    merges as it does; UserError (one line) when there is none."""
    wanted = _pieces(tokenizer_json.get("pre_tokenizer"))
    same_split = [name for name in LLAMA_PRE_TOKENIZERS if wanted in _llama_pieces(name)]
    if not same_split:
        kind = (tokenizer_json.get("pre_tokenizer") or {}).get("type", "no")
        raise UserError(f"this model's tokenizer splits text ({kind} pre-tokenizer) in a way none of llama.cpp's "
                        f"pre-tokenizers ({', '.join(LLAMA_PRE_TOKENIZERS)}) does: llama.cpp would tokenize "
                        f"differently, so {_AS_HF}")
    whole_words = bool((tokenizer_json.get("model") or {}).get("ignore_merges"))
    for name in same_split:
        if LLAMA_PRE_TOKENIZERS[name].ignore_merges == whole_words:
            return name
    if _merges_make_every_token(tokenizer_json):  # then looking words up first changes nothing
        return same_split[0]
    raise UserError(f"this model's tokenizer splits text as llama.cpp's {same_split[0]} does but "
                    f"{'looks whole words up before merging' if whole_words else 'always merges'}, which "
                    f"llama.cpp does not do there: {_AS_HF}")


def _merges_make_every_token(tokenizer_json: dict[str, Any]) -> bool:
    """Whether the merges alone turn every token's text into that token (then ignore_merges makes no difference)."""
    model = {**tokenizer_json["model"], "ignore_merges": False, "dropout": None}
    merges_only = _bare(model=model).model
    added = {a.get("content") for a in tokenizer_json.get("added_tokens") or []}
    return all(len(merges_only.tokenize(token)) == 1 for token in model.get("vocab", {}) if token not in added)


@dataclass(frozen=True)
class SpmShape:
    """What a SentencePiece-style tokenizer.json does to text before merging, as llama.cpp says it: whether it puts
    a word-start mark before the text (add_space_prefix), and whether it splits words apart (merges never cross)."""

    space_prefix: bool
    splits_words: bool


def spm_shape(tokenizer_json: dict[str, Any]) -> SpmShape:
    """The SpmShape of a SentencePiece-style tokenizer.json (spaces to "▁", perhaps a "▁" before the text, perhaps
    split before each "▁"); UserError (one line) for a normalizer or pre-tokenizer that does anything else.

    A text starting with a space is not checked: a Metaspace pre-tokenizer adds no second mark there where llama.cpp
    (and the Prepend normalizer of older tokenizer.json files) does, as with llama.cpp's own converter."""
    bare = _bare(normalizer=tokenizer_json.get("normalizer"), pre_tokenizer=tokenizer_json.get("pre_tokenizer"))
    prefixes, splits = set(), False
    for text in CHECK_TEXTS:
        normalized = bare.normalizer.normalize_str(text) if bare.normalizer is not None else text
        pieces = [p for p, _ in bare.pre_tokenizer.pre_tokenize_str(normalized)] if bare.pre_tokenizer is not None \
            else [normalized]
        joined, escaped = "".join(pieces), text.replace(" ", SPM_SPACE)
        prefixes.add(True if joined == SPM_SPACE + escaped else False if joined == escaped else None)
        splits = splits or len(pieces) > 1
        if any(not p.startswith(SPM_SPACE) for p in pieces[1:]):
            raise UserError(f"this model's SentencePiece-style tokenizer splits text apart elsewhere than at "
                            f"spaces, which llama.cpp does not do: {_AS_HF}")
    if None in prefixes or len(prefixes) != 1:
        raise UserError(f"this model's SentencePiece-style tokenizer changes text ({_describe(tokenizer_json)}) in a "
                        f"way llama.cpp does not: {_AS_HF}")
    return SpmShape(prefixes.pop(), splits)


def _describe(tokenizer_json: dict[str, Any]) -> str:
    kinds = [str((tokenizer_json.get(part) or {}).get("type")) for part in ("normalizer", "pre_tokenizer")
             if tokenizer_json.get(part)]
    return ", ".join(kinds) or "no normalizer"
