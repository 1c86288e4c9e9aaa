"""Perplexity and bits per byte of a model on text: text files and folders, or a prepared dataset's validation split.

The figures are lm-evaluation-harness's (`loglikelihood_rolling`, the way it scores wikitext):
- Documents are split only where the data says so: a .txt/.md file is one document (blank lines included), a
  JSONL file's {"text": ...} records are one document each, a prepared dataset's documents (decoded with the
  dataset's own tokenizer) are its documents.
- The text is cut by bytes (`max_bytes` UTF-8 bytes in all, the last document on a character boundary) *before*
  tokenizing, so every model, whatever its tokenizer, is measured on the same bytes.
- Each document is tokenized with the model's tokenizer (no special tokens added) and prefixed by one token, BOS
  if the tokenizer has one, else EOS, so that every token of the document is predicted (the first one from the
  prefix). Rolling windows of the model's context (get_rolling_token_windows with context_len=1) predict each
  token exactly once: the first window [prefix, t0 .. tW-2] predicts t0 .. tW-1; each later window is the W tokens
  before its end and scores only the tokens the windows before it did not.
- Bits per byte = summed loss in bits / the UTF-8 bytes of the scored source text (never a re-decode); perplexity
  = exp(loss in nats / scored tokens), per token of the model's own tokenizer. A tokenizer with neither BOS nor EOS
  cannot predict a document's first token: its bytes are left out of the count.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Progress

if TYPE_CHECKING:
    from desktop_app.engine.protocols import CausalLM, TextTokenizer

MAX_BYTES = 400_000  # default text scored: the first 400 kB (about 100,000 tokens of English)
DEFAULT_WINDOW = 2048  # the window when the model states no context (lm-evaluation-harness's default max_length)
MAX_WINDOW = 8192  # longest window scored at once (a longer context costs memory, not much accuracy)
BATCH_TOKENS = 8192  # most tokens in one forward pass (windows per batch = this / the window, at least one)
LOSS_CHUNK = 2048  # positions whose logits are turned to float32 at once


# ------------------------------------------------------------------------------------------- the text


def cut_utf8(text: str, max_bytes: int) -> str:
    """The longest start of `text` whose UTF-8 encoding holds at most max_bytes (never half a character)."""
    data = text.encode("utf-8")
    if len(data) <= max_bytes:
        return text
    return data[:max_bytes].decode("utf-8", errors="ignore")  # drops only the cut character's leading bytes


def _whole_file(path: Path, max_bytes: int) -> str:
    """A text file's decoded text (one document), read no further than max_bytes of UTF-8."""
    from desktop_app.engine.data.ingest import iter_text  # lazy: numpy

    blocks: list[str] = []
    size = 0
    for block in iter_text(path):
        blocks.append(block)
        size += len(block.encode("utf-8"))
        if size >= max_bytes:
            break
    return "".join(blocks)


def _item_texts(path: Path) -> Iterator[str]:
    """The text documents of a JSONL file ({"text": ...} records; other records are not text to score), a document
    (PDF, EPUB, DOCX, HTML) or a table's text column, one document each, as the Data tab reads them."""
    from desktop_app.engine.data.ingest import Doc, read_items  # lazy: numpy

    parts: list[str] = []
    for item in read_items(path):
        if isinstance(item, Doc):
            parts.append(item.text)
            if item.last:
                yield "".join(parts)
                parts = []
    if parts:
        yield "".join(parts)


def _file_documents(path: Path, max_bytes: int) -> Iterator[str]:
    from desktop_app.engine.data.ingest import TEXT_EXTENSIONS, FileProblem, discover  # lazy: numpy

    for found, problem in discover([path]):
        if problem is not None:
            raise UserError(f"{found}: {problem.reason}")
        try:
            if found.suffix.lower() in TEXT_EXTENSIONS:
                yield _whole_file(found, max_bytes)
            else:
                yield from _item_texts(found)
        except FileProblem as exc:
            raise UserError(f"{found}: {exc.reason}") from None


def _dataset_documents(folder: Path) -> Iterator[str]:
    """A prepared dataset's validation documents (its training split when it has none), as text."""
    from desktop_app.engine.data.token_store import TokenStore  # lazy: numpy
    from desktop_app.engine.data.tokenization import load_tokenizer  # lazy: tokenizers

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
        if start >= len(tokens):  # lengths of an interrupted append the manifest never committed
            break
        piece = [int(t) for t in tokens[start:start + int(length)]]
        start += int(length)
        yield tokenizer.decode(piece, skip_special_tokens=True)


def _source_documents(sources: list[str], max_bytes: int) -> Iterator[str]:
    for source in sources:
        path = Path(source).expanduser()
        if not path.exists():
            raise UserError(f"{path} does not exist (give text files, folders or a prepared dataset)")
        if path.is_dir() and (path / "manifest.json").is_file():
            yield from _dataset_documents(path)
        else:
            yield from _file_documents(path, max_bytes)


def text_documents(sources: list[str], max_bytes: int = MAX_BYTES) -> list[str]:
    """The documents of the given files, folders and prepared datasets, in order, at most max_bytes of UTF-8 in
    all (the last one cut on a character boundary); documents of nothing but whitespace are skipped."""
    docs: list[str] = []
    left = max_bytes
    for doc in _source_documents(sources, max_bytes):
        if not doc.strip():
            continue
        cut = cut_utf8(doc, left)
        if cut.strip():
            docs.append(cut)
            left -= len(cut.encode("utf-8"))
        if cut != doc or left <= 0:  # the limit fell in this document: the text ends here
            break
    if not docs:
        raise UserError(f"no text to measure perplexity on in {', '.join(map(str, sources))}: empty, whitespace "
                        "only, or no {\"text\": ...} records")
    return docs


# ---------------------------------------------------------------------------------------------- tokens


def prefix_token(tokenizer: TextTokenizer) -> int | None:
    """The token each document is scored after: BOS if the tokenizer has one, else EOS, else None."""
    from tokenizers import Tokenizer

    if isinstance(tokenizer, Tokenizer):
        from desktop_app.engine.data.tokenization import special_tokens_of  # lazy: tokenizers

        specials = special_tokens_of(tokenizer)
        name = specials["bos"] or specials["eos"]
        return None if name is None else tokenizer.token_to_id(name)
    for attr in ("bos_token_id", "eos_token_id"):
        value = getattr(tokenizer, attr, None)
        if isinstance(value, int):
            return value
    return None


def encode_document(tokenizer: TextTokenizer, text: str) -> tuple[list[int], int]:
    """(ids of `text` without special tokens, the UTF-8 bytes of the source text up to the end of the first token)."""
    from tokenizers import Tokenizer

    if isinstance(tokenizer, Tokenizer):
        enc = tokenizer.encode(text, add_special_tokens=False)
        ids, offsets = list(enc.ids), list(enc.offsets)
    else:
        try:
            enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True, verbose=False)
            offsets = list(enc["offset_mapping"])
        except (NotImplementedError, TypeError, ValueError, KeyError):  # a slow tokenizer: no offsets
            enc, offsets = tokenizer(text, add_special_tokens=False, verbose=False), []
        ids = list(enc["input_ids"])
    if not ids:
        return ids, 0
    if offsets:
        return ids, len(text[:offsets[0][1]].encode("utf-8"))
    return ids, len(tokenizer.decode(ids[:1]).encode("utf-8"))  # no offsets to map the first token back with


# --------------------------------------------------------------------------------------------- windows


@dataclass
class Window:
    """One forward pass: the model reads tokens[:-1], predicts tokens[1:], and the last `scored` of those count."""

    tokens: list[int]
    scored: int


def rolling_windows(ids: list[int], prefix: int, width: int) -> Iterator[Window]:
    """lm-evaluation-harness's get_rolling_token_windows(ids, prefix, width, context_len=1), made disjoint: every
    id is predicted once, the first from `prefix`, each by a window of at most `width` inputs."""
    if not ids:
        return
    first = min(width, len(ids))
    yield Window([prefix, *ids[:first]], first)
    predicted = first
    while predicted < len(ids):
        end = min(len(ids), predicted + width)
        yield Window(ids[end - width - 1:end], end - predicted)  # end > width here
        predicted = end


def document_windows(tokenizer: TextTokenizer, docs: list[str], width: int) -> tuple[list[Window], int]:
    """The windows of every document and the UTF-8 bytes of the text they score."""
    prefix = prefix_token(tokenizer)
    windows: list[Window] = []
    text_bytes = 0
    for doc in docs:
        ids, first_bytes = encode_document(tokenizer, doc)
        text_bytes += len(doc.encode("utf-8"))
        if prefix is None:  # nothing to predict the first token from: it is context only, its bytes not counted
            text_bytes -= first_bytes if ids else 0
            windows += rolling_windows(ids[1:], ids[0], width) if ids else []
        else:
            windows += rolling_windows(ids, prefix, width)
    return windows, text_bytes


# ------------------------------------------------------------------------------------------------ loss


def _batch_nats(model: Any, part: list[Window], device: torch.device) -> float:
    """Summed loss in nats of the scored predictions of some windows, run together right-padded."""
    longest = max(len(w.tokens) for w in part) - 1
    x = torch.zeros(len(part), longest, dtype=torch.long, device=device)
    y = torch.full((len(part), longest), -100, dtype=torch.long, device=device)
    mask = torch.zeros(len(part), longest, dtype=torch.long, device=device)
    for i, w in enumerate(part):
        n = len(w.tokens) - 1
        x[i, :n] = torch.tensor(w.tokens[:-1], device=device)
        y[i, n - w.scored:n] = torch.tensor(w.tokens[len(w.tokens) - w.scored:], device=device)
        mask[i, :n] = 1
    logits = model(input_ids=x, attention_mask=mask, use_cache=False).logits
    nats = 0.0
    for i in range(len(part)):
        for s in range(0, longest, LOSS_CHUNK):
            nats += float(F.cross_entropy(logits[i, s:s + LOSS_CHUNK].float(), y[i, s:s + LOSS_CHUNK],
                                          ignore_index=-100, reduction="sum"))
    return nats


def _window_nats(model: Any, windows: list[Window], per_batch: int) -> Iterator[Progress]:
    """Yield Progress per batch; return the summed loss in nats (longest windows first: the least padding)."""
    device = next(model.parameters()).device
    ordered = sorted(windows, key=lambda w: -len(w.tokens))
    nats = 0.0
    for start in range(0, len(ordered), per_batch):
        nats += _batch_nats(model, ordered[start:start + per_batch], device)
        yield Progress("perplexity", min(start + per_batch, len(ordered)), len(ordered), "windows")
    return nats


@torch.no_grad()
def score_text(model: CausalLM, tokenizer: TextTokenizer, sources: list[str], *, max_bytes: int = MAX_BYTES,
               batch: int = 8, context: int | None = None) -> Iterator[Progress]:
    """Yield Progress per batch of windows; return {"bits_per_byte", "perplexity", "text_tokens" (scored),
    "text_bytes" (scored), "text_documents"}. context: the model's context (the window); batch: most windows per
    forward pass."""
    docs = text_documents(sources, max_bytes)
    width = min(context or DEFAULT_WINDOW, MAX_WINDOW)
    windows, text_bytes = document_windows(tokenizer, docs, width)
    predicted = sum(w.scored for w in windows)
    if not predicted or text_bytes <= 0:
        raise UserError("the text for perplexity is too short: no token of it can be predicted")
    was_training = model.training
    model.eval()
    try:
        nats = yield from _window_nats(model, windows, max(1, min(batch, BATCH_TOKENS // width)))
    finally:
        model.train(was_training)
    return {"bits_per_byte": nats / math.log(2) / text_bytes, "perplexity": math.exp(min(nats / predicted, 80.0)),
            "text_tokens": predicted, "text_bytes": text_bytes, "text_documents": len(docs)}
