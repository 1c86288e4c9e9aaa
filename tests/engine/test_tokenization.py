"""Tokenizer training, saving, loading, transformers wrapping and exact byte-level round trips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from desktop_app.engine.data.tokenization import (
    CHAT_TEMPLATE,
    SPECIAL_TOKEN_LIST,
    SPECIAL_TOKENS,
    TOKENIZER_KINDS,
    eos_id,
    hf_tokenizer,
    load_tokenizer,
    save_tokenizer,
    special_tokens_of,
    tokenizer_sha256,
    train_tokenizer,
)
from desktop_app.engine.errors import UserError

CORPUS = [
    "The quick brown fox jumps over the lazy dog. The dog sleeps.",
    "Anna found a red ball in the park and played with it all day long.",
    "Привет, мир! Как дела? Всё хорошо, спасибо.",
    "你好，世界。今天天气很好。我们去公园吧。",
    "Emoji party 🎉🎉👍🏽 with friends 👨‍👩‍👧 and cats 🐱.",
    "Tabs\tand\tCRLF\r\nline endings\r\nstay.",
] * 20

ROUND_TRIP = [
    "Привет, мир! Съешь же ещё этих мягких французских булок.",
    "你好，世界。東京タワー、서울 타워.",
    "Emoji: 🎉👍🏽👨‍👩‍👧🐱 and flags 🇫🇷",
    "mixed: naïve café, Москва, 東京, עברית, العربية, हिन्दी",
    "tabs\tand\tCRLF\r\nlines\r\n\r\n  leading spaces and trailing   ",
    "never seen: ᚠᛇᚻ ꦲꦏ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \u200b zero-width",
    "",
    " ",
    "<|endoftext|> looks special but is text here",
]


@pytest.fixture(scope="module")
def byte_bpe() -> Tokenizer:
    return train_tokenizer(iter(CORPUS), "byte-bpe", vocab_size=400, min_frequency=2)


@pytest.mark.parametrize("kind", TOKENIZER_KINDS)
def test_every_kind_trains_with_fixed_special_ids(kind: str) -> None:
    tok = train_tokenizer((t for t in CORPUS), kind, vocab_size=300, min_frequency=1)
    assert [tok.id_to_token(i) for i in range(len(SPECIAL_TOKEN_LIST))] == SPECIAL_TOKEN_LIST
    assert 8 < tok.get_vocab_size() <= 300
    assert tok.encode("the dog").ids  # encodes something


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_byte_level_round_trip_is_exact(byte_bpe: Tokenizer, text: str) -> None:
    ids = byte_bpe.encode(text, add_special_tokens=False).ids
    assert byte_bpe.decode(ids, skip_special_tokens=False) == text
    assert SPECIAL_TOKENS["unk"] not in [byte_bpe.id_to_token(i) for i in ids]


@pytest.mark.parametrize("kind", ["bpe", "unigram"])
def test_sentencepiece_style_kinds_round_trip_seen_text(kind: str) -> None:
    tok = train_tokenizer(iter(CORPUS), kind, vocab_size=300, min_frequency=1)
    text = "The dog found a red ball in the park."
    assert tok.decode(tok.encode(text).ids) == text


def test_wordpiece_keeps_words() -> None:
    tok = train_tokenizer(iter(CORPUS), "wordpiece", vocab_size=300, min_frequency=1)
    assert tok.decode(tok.encode("the lazy dog").ids) == "the lazy dog"


def test_training_consumes_an_iterator_once_and_reports_each_text() -> None:
    seen: list[str] = []
    train_tokenizer((t for t in CORPUS[:12]), "byte-bpe", vocab_size=300, on_text=seen.append)
    assert seen == CORPUS[:12]


@pytest.mark.parametrize(("kind", "vocab"), [("byte-bpe", 100), ("bpe", 10)])
def test_too_small_vocab_is_refused(kind: str, vocab: int) -> None:
    with pytest.raises(UserError, match="too small"):
        train_tokenizer(iter(CORPUS), kind, vocab_size=vocab)


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(UserError, match="unknown tokenizer kind"):
        train_tokenizer(iter(CORPUS), "sentencepiece")


def test_save_load_and_hash(byte_bpe: Tokenizer, tmp_path: Path) -> None:
    path = save_tokenizer(byte_bpe, tmp_path / "tok" / "tokenizer.json")
    assert path.is_file()
    again = load_tokenizer(path)
    assert again.encode("Привет 🎉").ids == byte_bpe.encode("Привет 🎉").ids
    digest = tokenizer_sha256(path)
    assert digest == tokenizer_sha256(tmp_path / "tok")  # the folder resolves to the same file
    assert len(digest) == 64
    # A folder path saves tokenizer.json inside it.
    folder_path = save_tokenizer(byte_bpe, tmp_path / "folder")
    assert folder_path == tmp_path / "folder" / "tokenizer.json"
    assert tokenizer_sha256(folder_path) == digest


def test_load_errors_are_clear(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        load_tokenizer(tmp_path / "nope.json")
    model_dir = tmp_path / "hf_model"
    model_dir.mkdir()
    (model_dir / "config.json").write_text("{}")
    (model_dir / "vocab.json").write_text("{}")
    with pytest.raises(UserError, match=r"has no tokenizer\.json.*vocab\.json"):
        load_tokenizer(model_dir)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UserError, match=r"not a valid tokenizer\.json"):
        load_tokenizer(bad)


def test_hf_tokenizer_specials_chat_template_and_autotokenizer(byte_bpe: Tokenizer, tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    fast = hf_tokenizer(byte_bpe, model_max_length=128)
    assert (fast.pad_token_id, fast.bos_token_id, fast.eos_token_id, fast.unk_token_id) == (0, 1, 2, 3)
    assert fast.pad_token == "<|pad|>" and fast.eos_token == "<|endoftext|>"
    chat = [{"role": "system", "content": "Be kind."}, {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello"}]
    text = fast.apply_chat_template(chat, tokenize=False)
    assert text == "<|system|>Be kind.<|end|><|user|>Hi<|end|><|assistant|>Hello<|end|>"
    prompt = fast.apply_chat_template(chat[:2], tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|user|>Hi<|end|><|assistant|>")
    ids = fast(text)["input_ids"]
    assert ids[0] == byte_bpe.token_to_id("<|system|>")  # role tokens are single special ids

    fast.save_pretrained(tmp_path / "hf")
    loaded = AutoTokenizer.from_pretrained(tmp_path / "hf")
    assert loaded.eos_token_id == 2 and loaded.pad_token_id == 0
    assert loaded("Привет 🎉")["input_ids"] == fast("Привет 🎉")["input_ids"]
    assert loaded.apply_chat_template(chat, tokenize=False) == text
    # The saved folder is itself a valid source for load_tokenizer / hf_tokenizer.
    assert load_tokenizer(tmp_path / "hf").get_vocab_size() == byte_bpe.get_vocab_size()
    assert hf_tokenizer(tmp_path / "hf").chat_template == CHAT_TEMPLATE


def test_foreign_tokenizer_eos_detection(tmp_path: Path) -> None:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=200, special_tokens=["<unk>", "<s>", "</s>"]))
    assert special_tokens_of(tok)["eos"] == "</s>"
    assert eos_id(tok) == tok.token_to_id("</s>")
    folder = tmp_path / "foreign"
    save_tokenizer(tok, folder)
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<s>"}))
    assert special_tokens_of(tok, folder / "tokenizer.json")["eos"] == "<s>"  # the config wins
    fast = hf_tokenizer(folder)
    assert fast.eos_token == "<s>" and fast.pad_token == "<s>"  # pad falls back to eos
    assert fast.chat_template is None  # no role tokens -> no invented template

    plain = Tokenizer(models.BPE())
    plain.train_from_iterator(CORPUS, trainers.BpeTrainer(vocab_size=100))
    with pytest.raises(UserError, match="no end-of-text token"):
        eos_id(plain)
