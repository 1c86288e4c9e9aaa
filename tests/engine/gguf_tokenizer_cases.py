"""Tokenizers of every kind the GGUF export writes, trained here on a small mixed corpus with the `tokenizers` library
(the real ones of Qwen, Llama 3 and Llama 2 are these kinds with other vocabularies): byte-level BPE with GPT-2's
split (ours), Llama 3's, Qwen2's, SmolLM's, DeepSeek's, ... regex split, and SentencePiece-style BPE with byte fallback
(Llama 2 and Phi-3 with a word-start mark from a normalizer, Mistral from a Metaspace pre-tokenizer, Gemma without)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from desktop_app.engine.export.gguf_pretokenizers import LLAMA_PRE_TOKENIZERS

TEXTS = [
    "The cat sat on the mat. The dog ran to the park; it's 12 o'clock, I'M here and we'Ve 3.14 apples.",
    "café naïve 東京 Привет мир 🙂 emoji, numbers 1234567 and 89, tabs\tand\nnew lines  with  two spaces",
    "def f(x):\n    return x ** 2  # a comment\n\n\nprint(f(3))",
]
MIXED = ("Hello world, café naïve 東京 🙂 12345 67.89\nA new line  with  double spaces\r\n\ttab I'M HERE it's "
         "we'Ve 3...3 ------======= нещо на Български")
SPECIALS = ["<unk>", "<s>", "</s>"]


def corpus(n: int = 200) -> list[str]:
    return [TEXTS[i % len(TEXTS)] + f" {i} {i * 7} " + TEXTS[(i + 1) % len(TEXTS)][: 20 + i % 30] for i in range(n)]


def byte_level(pre: str) -> Any:
    """A byte-level BPE whose text is split as llama.cpp's pre-tokenizer `pre` splits it ("gpt-2": GPT-2's own
    ByteLevel regex) and that looks whole words up before merging where llama.cpp does there (Llama 3)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(ignore_merges=LLAMA_PRE_TOKENIZERS[pre].ignore_merges))
    if pre == "gpt-2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        splits = [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in LLAMA_PRE_TOKENIZERS[pre].regexes]
        tok.pre_tokenizer = pre_tokenizers.Sequence([*splits, pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                                                        use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=420, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    return tok


def sentencepiece_style(style: str) -> Any:
    """A SentencePiece-style BPE (byte fallback, "▁" for spaces) as `style` ships it in tokenizer.json: "llama-2"
    (and Phi-3: Prepend and Replace normalizers), "mistral" (a Metaspace pre-tokenizer that prepends, as transformers
    writes Llama and Mistral tokenizers now) or "gemma" (no word-start mark before the text; a Split on spaces that
    never splits, as transformers writes it); <unk> <s> </s>, the 256 byte tokens, then the learned pieces."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

    trainer_tok = Tokenizer(models.BPE(unk_token="<unk>"))
    trainer_tok.normalizer = normalizers.Replace(" ", "\u2581")
    trainer = trainers.BpeTrainer(vocab_size=450, special_tokens=SPECIALS, show_progress=False)
    trainer_tok.train_from_iterator(corpus(), trainer)
    learned = json.loads(trainer_tok.to_str())["model"]
    vocab = {t: i for i, t in enumerate(SPECIALS)}
    for b in range(256):
        vocab[f"<0x{b:02X}>"] = len(vocab)
    for token, _ in sorted(learned["vocab"].items(), key=lambda kv: kv[1]):
        vocab.setdefault(token, len(vocab))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in learned["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    if style == "llama-2":
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("\u2581"), normalizers.Replace(" ", "\u2581")])
    elif style == "mistral":
        tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="first", split=False)
    else:
        tok.normalizer = normalizers.Replace(" ", "\u2581")
        tok.pre_tokenizer = pre_tokenizers.Split(" ", behavior="merged_with_previous")
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.add_special_tokens(SPECIALS)
    return tok


def hf(tok: Any) -> Any:
    """transformers' fast tokenizer over `tok` (bos <s>, eos </s>, unk <unk>)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


BYTE_LEVEL = ("gpt-2", "llama-bpe", "dbrx", "qwen2", "qwen35", "smollm", "deepseek-llm", "deepseek-v3", "falcon",
              "gpt-4o", "tekken")
# style -> the GGUF architecture by which transformers' GGUF reader picks that SentencePiece flavour (phi3: a Prepend
# normalizer, llama: Metaspace, gemma2: no word-start mark)
SENTENCEPIECE = {"llama-2": "phi3", "mistral": "llama", "gemma": "gemma2"}
# name -> (how to make it, the GGUF architecture to write it with)
KINDS = {
    **{pre: (lambda pre=pre: byte_level(pre), "llama") for pre in BYTE_LEVEL},
    **{f"{style} (SentencePiece)": (lambda style=style: sentencepiece_style(style), SENTENCEPIECE[style])
       for style in SENTENCEPIECE},
}


def special_ids(fast: Any) -> dict[str, int | None]:
    return {role: getattr(fast, f"{role}_token_id") for role in ("bos", "eos", "pad", "unk")}


def write_vocab_gguf(tokenizer_json: dict[str, Any], ids: dict[str, int | None], vocab_size: int, path: Path,
                     arch: str = "llama") -> Path:
    """A vocabulary-only GGUF (what llama.cpp's ggml-vocab-*.gguf files are) written by the export's own
    add_tokenizer."""
    import gguf

    from desktop_app.engine.export.gguf_tokenizer import GGUFTokenizer, add_tokenizer

    writer = gguf.GGUFWriter(str(path), arch)
    add_tokenizer(writer, GGUFTokenizer(tokenizer_json, ids), vocab_size)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    return path


def llama_vocab(path: Path) -> Any:
    """llama.cpp over a vocabulary-only GGUF (skips the test without llama-cpp-python)."""
    import pytest

    llama_cpp = pytest.importorskip("llama_cpp")
    return llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
