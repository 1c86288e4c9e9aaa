"""Perplexity and bits per byte of a model on text: text files and folders, or a prepared dataset's validation split.

The text is read as documents (data/ingest.py for files; a dataset's validation documents decoded with the
dataset's own tokenizer), tokenized with the *model's* tokenizer, joined with its end-of-sequence id, cut after
`max_tokens`, and scored in windows of the model's context (each token after the first is predicted once).
Bits per byte divide the summed loss in bits by the UTF-8 bytes of the scored text, so models with different
tokenizers compare; perplexity is per token of the model's own tokenizer.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Progress
from desktop_app.engine.selfplay.rollout import TextCodec

MAX_WINDOW = 1024  # longest window scored at once (long contexts cost memory, not accuracy here)


def _dataset_documents(folder: Path) -> Iterator[str]:
    """A prepared dataset's validation documents (its training split when it has none), as text."""
    from desktop_app.engine.data.token_store import TokenStore
    from desktop_app.engine.data.tokenization import load_tokenizer

    store = TokenStore(folder)
    if not store.tokenizer_path.is_file():
        raise UserError(f"dataset {folder} has no tokenizer.json: its tokens cannot be read back as text")
    tokenizer = load_tokenizer(store.tokenizer_path)
    split = "val" if len(store.tokens("val")) else "train"
    tokens, lengths = store.tokens(split), store.doc_lengths(split)
    if not len(lengths):
        lengths = [len(tokens)]
    start = 0
    for length in lengths:
        piece = [int(t) for t in tokens[start:start + int(length)]]
        start += int(length)
        text = tokenizer.decode(piece, skip_special_tokens=True)
        if text.strip():
            yield text


def _file_documents(sources: list[Path]) -> Iterator[str]:
    from desktop_app.engine.data.ingest import Doc, FileProblem, discover, read_items

    for path, problem in discover(sources):
        if problem is not None:
            raise UserError(f"{path}: {problem.reason}")
        parts: list[str] = []
        try:
            for item in read_items(path):
                if isinstance(item, Doc):
                    parts.append(item.text)
                    if item.last:
                        yield "".join(parts)
                        parts = []
        except FileProblem as exc:
            raise UserError(f"{path}: {exc.reason}") from None
        if parts:
            yield "".join(parts)


def text_documents(sources: list[str]) -> Iterator[str]:
    """Documents of the given files, folders and prepared datasets, in order."""
    for source in sources:
        path = Path(source).expanduser()
        if not path.exists():
            raise UserError(f"{path} does not exist (give text files, folders or a prepared dataset)")
        if path.is_dir() and (path / "manifest.json").is_file():
            yield from _dataset_documents(path)
        else:
            yield from _file_documents([path])


def token_stream(codec: TextCodec, documents: Iterator[str], max_tokens: int, eos: int | None) -> list[int]:
    """The documents' ids joined by EOS, at most max_tokens + 1 of them (the first is never predicted)."""
    ids: list[int] = []
    for doc in documents:
        if ids and eos is not None:
            ids.append(eos)
        ids += codec.encode(doc)
        if len(ids) > max_tokens:
            break
    return ids[: max_tokens + 1]


@torch.no_grad()
def score_text(model: Any, tokenizer: Any, sources: list[str], *, max_tokens: int = 100_000, batch: int = 8,
               context: int | None = None) -> Iterator[Progress]:
    """Yield Progress per batch of windows; return {"bits_per_byte", "perplexity", "text_tokens", "text_bytes"}."""
    codec = TextCodec(tokenizer)
    eos = getattr(tokenizer, "eos_token_id", None)
    if eos is None and hasattr(tokenizer, "token_to_id"):
        from desktop_app.engine.data.tokenization import eos_id

        eos = eos_id(tokenizer)
    ids = token_stream(codec, text_documents(sources), max_tokens, eos)
    if len(ids) < 2:
        raise UserError("the text for perplexity holds fewer than 2 tokens")
    text_bytes = len(codec.decode(ids).encode("utf-8"))
    width = min(context or MAX_WINDOW, MAX_WINDOW)
    windows = [ids[s: s + width + 1] for s in range(0, len(ids) - 1, width)]
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    nats, predicted = 0.0, 0
    try:
        for start in range(0, len(windows), batch):
            part = windows[start:start + batch]
            longest = max(len(w) for w in part)
            x = torch.zeros(len(part), longest - 1, dtype=torch.long, device=device)
            y = torch.full((len(part), longest - 1), -100, dtype=torch.long, device=device)
            mask = torch.zeros(len(part), longest - 1, dtype=torch.long, device=device)
            for i, w in enumerate(part):
                x[i, : len(w) - 1] = torch.tensor(w[:-1], device=device)
                y[i, : len(w) - 1] = torch.tensor(w[1:], device=device)
                mask[i, : len(w) - 1] = 1
            logits = model(input_ids=x, attention_mask=mask, use_cache=False).logits.float()
            nats += float(F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1), ignore_index=-100,
                                          reduction="sum"))
            predicted += int((y != -100).sum())
            yield Progress("perplexity", min(start + batch, len(windows)), len(windows), "windows")
    finally:
        model.train(was_training)
    return {"bits_per_byte": nats / math.log(2) / max(1, text_bytes),
            "perplexity": math.exp(min(nats / max(1, predicted), 80.0)), "text_tokens": predicted,
            "text_bytes": text_bytes}
