"""Train, load and save tokenizers (Hugging Face `tokenizers`), wrap them for transformers, and save transformers
tokenizers so that any transformers version loads them (`save_hf_tokenizer`).

Every tokenizer we train starts with the same special tokens at fixed low ids (0..7): pad, bos, eos,
unk and the reserved chat-role tokens, so models, datasets and chat templates agree on them.

Kinds:
    byte-bpe   byte-level BPE (GPT-2 style). Never needs <|unk|>; decode(encode(text)) == text exactly.
    bpe        character BPE with a SentencePiece-style "▁" for spaces; unseen characters -> <|unk|>.
    wordpiece  BERT-style WordPiece (whitespace is normalised away on decode).
    unigram    SentencePiece-style Unigram LM with "▁" for spaces.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from desktop_app.engine.errors import UserError
from desktop_app.engine.fileio import atomic_write_text

# Order matters: position = id in every tokenizer we train.
SPECIAL_TOKENS: dict[str, str] = {
    "pad": "<|pad|>",
    "bos": "<|bos|>",
    "eos": "<|endoftext|>",
    "unk": "<|unk|>",
    "system": "<|system|>",
    "user": "<|user|>",
    "assistant": "<|assistant|>",
    "end": "<|end|>",
}
SPECIAL_TOKEN_LIST: list[str] = list(SPECIAL_TOKENS.values())
TOKENIZER_KINDS = ("byte-bpe", "bpe", "wordpiece", "unigram")

# A plain chat format built on the reserved role tokens: <|user|>Hi<|end|><|assistant|>Hello<|end|>
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|' + message['role'] + '|>' + message['content'] + '<|end|>' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}"
)

# End-of-sequence spellings of other tokenizers, tried in order when a foreign tokenizer.json is loaded.
_EOS_CANDIDATES = ("<|endoftext|>", "</s>", "<|end_of_text|>", "<eos>", "<|eot_id|>", "[SEP]", "<|im_end|>")


def min_vocab_size(kind: str) -> int:
    """Smallest sensible vocabulary: byte-bpe must hold all 256 bytes plus the special tokens."""
    return 256 + len(SPECIAL_TOKEN_LIST) if kind == "byte-bpe" else 64


def _nfc_tokenizer(model: Any, pre_tokenizer: Any, decoder: Any) -> Tokenizer:
    """An untrained tokenizer that NFC-normalises text first (every kind but byte-bpe, which must stay reversible)."""
    tok = Tokenizer(model)
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizer
    tok.decoder = decoder
    return tok


def _build(kind: str, vocab_size: int, min_frequency: int) -> tuple[Tokenizer, Any]:
    unk = SPECIAL_TOKENS["unk"]
    common = {"vocab_size": vocab_size, "special_tokens": SPECIAL_TOKEN_LIST, "show_progress": False}
    if kind == "byte-bpe":
        tok = Tokenizer(models.BPE())
        # No prefix space and no normalizer: the byte mapping is then exactly reversible.
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(min_frequency=min_frequency,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), **common)
    elif kind == "bpe":
        tok = _nfc_tokenizer(models.BPE(unk_token=unk), pre_tokenizers.Metaspace(), decoders.Metaspace())
        trainer = trainers.BpeTrainer(min_frequency=min_frequency, **common)
    elif kind == "wordpiece":
        tok = _nfc_tokenizer(models.WordPiece(unk_token=unk), pre_tokenizers.BertPreTokenizer(), decoders.WordPiece())
        trainer = trainers.WordPieceTrainer(min_frequency=min_frequency, **common)
    elif kind == "unigram":
        tok = _nfc_tokenizer(models.Unigram(), pre_tokenizers.Metaspace(), decoders.Metaspace())
        common.pop("show_progress")
        trainer = trainers.UnigramTrainer(unk_token=unk, show_progress=False, **common)
    else:
        raise UserError(f"unknown tokenizer kind {kind!r}: use one of {', '.join(TOKENIZER_KINDS)}")
    return tok, trainer


def train_tokenizer(
    texts: Iterable[str],
    kind: str = "byte-bpe",
    vocab_size: int = 4096,
    min_frequency: int = 2,
    *,
    length: int | None = None,
    on_text: Callable[[str], None] | None = None,
) -> Tokenizer:
    """Train a tokenizer from an iterator of texts (streamed: texts are consumed one by one).

    `on_text` is called with each text before the trainer sees it (progress, cancellation: raise
    StopIteration-like exceptions from the iterator itself to stop early). The result always has the
    special tokens of SPECIAL_TOKENS at ids 0..7.
    """
    if kind not in TOKENIZER_KINDS:
        raise UserError(f"unknown tokenizer kind {kind!r}: use one of {', '.join(TOKENIZER_KINDS)}")
    if vocab_size < min_vocab_size(kind):
        raise UserError(f"vocab size {vocab_size} is too small for a {kind} tokenizer: use at least "
                        f"{min_vocab_size(kind)}")
    tok, trainer = _build(kind, vocab_size, min_frequency)

    def feed() -> Iterator[str]:
        for text in texts:
            if on_text is not None:
                on_text(text)
            if text:
                yield text

    tok.train_from_iterator(feed(), trainer=trainer, length=length)
    for i, token in enumerate(SPECIAL_TOKEN_LIST):
        if tok.token_to_id(token) != i:  # would break every consumer that relies on fixed ids
            raise RuntimeError(f"special token {token} got id {tok.token_to_id(token)}, expected {i}")
    return tok


def save_tokenizer(tok: Tokenizer, path: str | Path) -> Path:
    """Write tokenizer.json atomically. `path` may be a folder (tokenizer.json is written inside)."""
    path = Path(path)
    if path.is_dir() or not path.suffix:
        path = path / "tokenizer.json"
    atomic_write_text(path, tok.to_str(pretty=True))
    return path


def _tokenizer_file(path: str | Path) -> Path:
    path = Path(path).expanduser()
    if path.is_dir():
        file = path / "tokenizer.json"
        if not file.is_file():
            others = sorted(p.name for p in path.glob("*") if p.name in (
                "tokenizer.model", "vocab.json", "merges.txt", "vocab.txt", "spiece.model"))
            hint = (f" (it has {', '.join(others)}: convert it once with transformers' AutoTokenizer and "
                    "save_pretrained to get a tokenizer.json)") if others else ""
            raise UserError(f"{path} has no tokenizer.json{hint}")
        return file
    if not path.exists():
        raise UserError(f"tokenizer {path} does not exist")
    return path


def load_tokenizer(path: str | Path) -> Tokenizer:
    """Load a tokenizer.json file, or the tokenizer.json inside a local Hugging Face model folder."""
    file = _tokenizer_file(path)
    try:
        return Tokenizer.from_file(str(file))
    except Exception as exc:  # the Rust side raises plain Exception with a parse message
        raise UserError(f"{file} is not a valid tokenizer.json: {exc}") from None


def tokenizer_sha256(path: str | Path) -> str:
    """sha256 of the tokenizer.json a path resolves to (identifies which ids a dataset holds)."""
    h = hashlib.sha256()
    with open(_tokenizer_file(path), "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _folder_config(path: Path | None) -> dict[str, Any]:
    """tokenizer_config.json / special_tokens_map.json next to a tokenizer.json, if any."""
    if path is None:
        return {}
    folder = path if path.is_dir() else path.parent
    config: dict[str, Any] = {}
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        file = folder / name
        if file.is_file():
            try:
                data = json.loads(file.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            if isinstance(data, dict):
                config.update(data)
    return config


def _token_str(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return value["content"]
    return None


def special_tokens_of(tok: Tokenizer, path: str | Path | None = None) -> dict[str, str | None]:
    """Which strings act as bos/eos/pad/unk in `tok` (ours, or guessed for a foreign tokenizer)."""
    vocab = tok.get_vocab(with_added_tokens=True)
    config = _folder_config(Path(path) if path else None)
    result: dict[str, str | None] = {}
    for role in ("bos", "eos", "pad", "unk"):
        configured = _token_str(config.get(f"{role}_token"))
        ours = SPECIAL_TOKENS[role]
        if configured and configured in vocab:
            result[role] = configured
        elif ours in vocab:
            result[role] = ours
        else:
            result[role] = None
    if result["eos"] is None:
        result["eos"] = next((c for c in _EOS_CANDIDATES if c in vocab), None)
    return result


def eos_id(tok: Tokenizer, path: str | Path | None = None) -> int:
    """Id appended after each document; a tokenizer without any end-of-text token cannot be used."""
    eos = special_tokens_of(tok, path)["eos"]
    if eos is None:
        raise UserError("the tokenizer has no end-of-text token (looked for "
                        f"{', '.join(_EOS_CANDIDATES)}); it cannot mark document ends")
    return int(tok.token_to_id(eos))


def hf_tokenizer(tokenizer_or_path: Tokenizer | str | Path, *, model_max_length: int | None = None) -> Any:
    """A transformers PreTrainedTokenizerFast with bos/eos/pad/unk and a chat template set.

    After `save_pretrained(folder)`, `AutoTokenizer.from_pretrained(folder)` loads it offline.
    """
    from transformers import PreTrainedTokenizerFast

    path = None
    if isinstance(tokenizer_or_path, Tokenizer):
        tok = tokenizer_or_path
    else:
        path = Path(tokenizer_or_path)
        tok = load_tokenizer(path)
    specials = special_tokens_of(tok, path)
    if specials["pad"] is None:
        specials["pad"] = specials["eos"]  # common practice: pad with eos when no pad token exists
    kwargs: dict[str, Any] = {f"{role}_token": value for role, value in specials.items() if value is not None}
    if model_max_length:
        kwargs["model_max_length"] = model_max_length
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, **kwargs)
    vocab = tok.get_vocab(with_added_tokens=True)
    config = _folder_config(path)
    if isinstance(config.get("chat_template"), str):
        fast.chat_template = config["chat_template"]
    elif all(SPECIAL_TOKENS[r] in vocab for r in ("system", "user", "assistant", "end")):
        fast.chat_template = CHAT_TEMPLATE
    return fast


def save_hf_tokenizer(tokenizer: Any, folder: str | Path, context_length: int | None = None) -> None:
    """`tokenizer.save_pretrained(folder)`, made loadable by older transformers and other tools too.

    transformers 5 writes its own class name ("TokenizersBackend") into tokenizer_config.json and keeps the chat
    template only in chat_template.jinja; 4.x needs "PreTrainedTokenizerFast" and the template inside
    tokenizer_config.json. `context_length` (when known) is recorded as model_max_length.
    """
    folder = Path(folder)
    tokenizer.save_pretrained(str(folder))
    path = folder / "tokenizer_config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if not isinstance(config, dict):
        return
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    if context_length:
        config["model_max_length"] = int(context_length)
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, str) and template:
        config["chat_template"] = template
    path.write_text(json.dumps(config, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
