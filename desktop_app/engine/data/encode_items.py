"""What the encode pass of prepare.py reads of each source, and the train/validation split of each document.

A table's text column arrives as lists of whole documents, one list per Arrow record batch (tables.text_batches): no
Python object per row on the way to the tokenizer's batch encode. Everything else arrives as ingest's documents and
records. Each document gets its own split either way.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path

from desktop_app.engine.data.ingest import Doc, Record, SourceInfo, read_items
from desktop_app.engine.data.rich_sources import Notes, table_mapping
from desktop_app.engine.data.tables import table_kind, text_batches
from desktop_app.engine.specs import DataSpec

SPLIT_KEY_CHARS = 4096  # the split of a document is decided by a seeded hash of its first characters


def split_of(text: str, seed: int, val_fraction: float) -> str:
    """'train' or 'val' for a document: a seeded hash of its content, so adding files never moves
    an existing document to the other split, and identical documents always share a split."""
    if val_fraction <= 0:
        return "train"
    digest = hashlib.blake2b(text[:SPLIT_KEY_CHARS].encode("utf-8", "surrogatepass"), digest_size=8,
                             key=str(seed).encode()[:64]).digest()
    return "val" if int.from_bytes(digest, "little") / 2.0**64 < val_fraction else "train"


def source_items(src: SourceInfo, spec: DataSpec) -> Iterator[Doc | Record | list[str]]:
    """What the encode pass reads of one source: a table's text column as lists of whole documents (one list per
    Arrow record batch, no object per row), anything else as documents and records."""
    path, columns = Path(src.path), spec.columns or None
    if src.format.endswith(":text") and table_kind(path):
        return text_batches(path, table_mapping(path, columns).columns[0], Notes())
    return read_items(path, columns=columns)


def batch_entry(index: int, item: Doc | Record | list[str], split: str, spec: DataSpec) -> tuple[tuple, str, int]:
    """(batch entry, the split of the document it continues, characters) of one item: a list of documents gets
    one split per document; a Doc piece the split of its document's first piece."""
    if isinstance(item, list):
        splits = [split_of(text, spec.seed, spec.val_fraction) for text in item]
        return (index, splits, item), split, sum(map(len, item))
    if isinstance(item, Doc):
        if item.first:
            split = split_of(item.text, spec.seed, spec.val_fraction)
        return (index, split, item), split, len(item.text)
    return (index, split_of(json.dumps(item.data, ensure_ascii=False), spec.seed, spec.val_fraction), item), split, 256
