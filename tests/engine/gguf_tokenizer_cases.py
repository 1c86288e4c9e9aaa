"""Tokenizers of every kind the GGUF export writes, trained here on a small mixed corpus with the `tokenizers` library
(the real ones of Qwen, Llama 3 and Llama 2 are these kinds with other vocabularies): byte-level BPE with GPT-2's
split (ours), Llama 3's and Qwen2's regex split, and SentencePiece-style BPE with byte fallback (Llama 2 / Mistral
with a word-start mark, Gemma without)."""

from __future__ import annotations

import json
from typing import Any

from desktop_app.engine.export.gguf_tokenizer import LLAMA_PRE_TOKENIZERS

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
    ByteLevel regex)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    if pre == "gpt-2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        splits = [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in LLAMA_PRE_TOKENIZERS[pre]]
        tok.pre_tokenizer = pre_tokenizers.Sequence([*splits, pre_tokenizers.ByteLevel(add_prefix_space=False,
                                                                                        use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=420, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer)
    return tok


def sentencepiece_style(space_prefix: bool) -> Any:
    """A SentencePiece-style BPE (byte fallback, "▁" for spaces) as Llama 2 / Mistral (`space_prefix`: a word-start
    mark before the text) and Gemma (none) ship it in tokenizer.json: <unk> <s> </s>, the 256 byte tokens, then the
    learned pieces."""
    from tokenizers import Tokenizer, decoders, models, normalizers, trainers

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
    steps = [normalizers.Prepend("\u2581")] if space_prefix else []
    tok.normalizer = normalizers.Sequence([*steps, normalizers.Replace(" ", "\u2581")])
    tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
    tok.add_special_tokens(SPECIALS)
    return tok


def hf(tok: Any) -> Any:
    """transformers' fast tokenizer over `tok` (bos <s>, eos </s>, unk <unk>)."""
    from transformers import PreTrainedTokenizerFast

    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>", unk_token="<unk>")


KINDS = {
    "gpt-2": lambda: byte_level("gpt-2"),
    "llama-bpe": lambda: byte_level("llama-bpe"),
    "qwen2": lambda: byte_level("qwen2"),
    "smollm": lambda: byte_level("smollm"),
    "llama-2 (SentencePiece)": lambda: sentencepiece_style(True),
    "gemma (SentencePiece)": lambda: sentencepiece_style(False),
}
