"""Documents (PDF, EPUB, DOCX, HTML) and tables (CSV, TSV, Parquet, Arrow, `datasets` folders) as the stream of
documents and records that ingest.py yields for text and JSONL files.

A document file becomes pretraining text (one document per file, or per chapter for an EPUB), cut into pieces on
safe boundaries. A table row becomes a document or a record through the column mapping (columns.py): the given
one, or the one common column names suggest. Rows the mapping cannot read are skipped and counted; the file's
verdict is then "partly", with the first row's reason. `Notes` carries what the verdict needs out of the stream.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from desktop_app.engine.column_roles import ColumnMapping
from desktop_app.engine.data.columns import RowProblem, apply_mapping, mapping_for
from desktop_app.engine.data.documents import Found, document_kind, iter_sections
from desktop_app.engine.data.items import PIECE_CHARS, Doc, FileProblem, Record, split_pieces
from desktop_app.engine.data.tables import (
    column_names,
    iter_batches,
    iter_rows,
    missing_library,
    source_files,
    table_kind,
    text_batches,
)
from desktop_app.engine.errors import UserError

RICH_FORMATS = ("pdf", "epub", "docx", "html", "csv", "tsv", "parquet", "arrow", "datasets")


@dataclass
class Notes:
    """What a rich source's stream learned for its verdict: its format, the parts read only partly, the mapping."""

    format: str = ""
    found: Found = field(default_factory=Found)
    mapping: ColumnMapping | None = None
    rows: int = 0
    skipped: int = 0
    first_skip: str = ""

    def partly(self) -> str:
        """Why a usable source is only partly read ("" when it is whole)."""
        if self.skipped:
            return f"{self.skipped:,} of {self.rows:,} rows skipped ({self.first_skip})"
        return self.found.partly()


def rich_kind(path: Path) -> str | None:
    """"pdf", "parquet", "datasets", ... for a source read here; None for text and JSONL (ingest.py reads them)."""
    return document_kind(path) or table_kind(path)


def source_size(path: Path) -> int:
    return sum(f.stat().st_size for f in source_files(path)) if path.is_dir() else path.stat().st_size


def hash_source(path: Path, hasher: Any) -> None:
    """Feed the bytes of a source (every Arrow file of a `datasets` folder) to `hasher`, in blocks."""
    for file in source_files(path):
        with open(file, "rb") as fh:
            while block := fh.read(1 << 20):
                hasher.update(block)


def _pieces(text: str) -> Iterator[Doc]:
    parts = split_pieces(text, PIECE_CHARS)
    for i, part in enumerate(parts):
        yield Doc(part, i == 0, i == len(parts) - 1)


def document_items(path: Path, notes: Notes, progress: Callable[[int, int], None] | None = None) -> Iterator[Doc]:
    """A document file's text as Doc pieces; the piece that ends a document (file or chapter) has last=True."""
    notes.format = document_kind(path) or ""
    pending: Doc | None = None  # one piece behind, so the last piece of a document is known
    first = True
    for text, ends in iter_sections(path, notes.found, progress):
        for piece in (split_pieces(text, PIECE_CHARS) if text else []):
            if pending is not None:
                yield pending
            pending, first = Doc(piece, first, False), False
        if ends and pending is not None:
            pending.last = True
            yield pending
            pending, first = None, True
    if pending is not None:
        pending.last = True
        yield pending


def table_mapping(path: Path, columns: dict[str, str] | None) -> ColumnMapping:
    """The mapping a table is read with; FileProblem naming its columns when none fits."""
    names = column_names(path)
    try:
        return mapping_for(names, columns)
    except UserError as exc:
        raise FileProblem("unsupported", f"{path.suffix or 'datasets'} table: {exc}") from None


def row_item(kind: str, payload: Any) -> Iterator[Doc | Record]:
    if kind == "text":
        if payload.strip():
            yield from _pieces(payload)
    else:
        yield Record(kind, payload)


def _text_column(path: Path, column: str, notes: Notes) -> Iterator[Doc]:
    """A text column as documents, one per row: the hot loop of a big Parquet corpus, so it reads the column's
    strings straight from each batch (no row dicts) and makes one Doc per row."""
    for batch in iter_batches(path, [column]):
        texts = batch.column(0).to_pylist()
        for i, text in enumerate(texts):
            if type(text) is str and len(text) <= PIECE_CHARS:
                if text and not text.isspace():
                    yield Doc(text)
            elif isinstance(text, str):
                yield from _pieces(text)
            else:
                notes.skipped += 1
                what = "is empty" if text is None else f"must be text, not {type(text).__name__}"
                notes.first_skip = notes.first_skip or f"row {notes.rows + i + 1}: '{column}' (text) {what}"
        notes.rows += len(texts)


def table_items(path: Path, notes: Notes, columns: dict[str, str] | None = None, *, batched: bool = False
                ) -> Iterator[Doc | Record | list[str]]:
    """A table's rows through the column mapping; rows it cannot read are counted in `notes`, not raised. The mapping
    is decided now (a FileProblem when none fits); the rows are read as the iterator is consumed. `batched`: a text
    column comes as lists of whole documents, one per record batch (tables.text_batches: what the scan counts and
    the encode pass reads), else as one Doc per row."""
    problem = missing_library(path)
    if problem is not None:
        raise problem
    mapping = notes.mapping = table_mapping(path, columns)
    notes.format = f"{table_kind(path)}:{mapping.kind}"
    if mapping.kind == "text" and batched:
        return text_batches(path, mapping.columns[0], notes)
    if mapping.kind == "text":  # no generator in between: this loop runs once per row of a big corpus
        return _text_column(path, mapping.columns[0], notes)
    return _mapped_rows(path, mapping, notes)


def _mapped_rows(path: Path, mapping: ColumnMapping, notes: Notes) -> Iterator[Doc | Record]:
    for notes.rows, row in enumerate(iter_rows(path, mapping.columns), 1):
        try:
            kind, payload = apply_mapping(row, mapping)
        except RowProblem as exc:
            notes.skipped += 1
            notes.first_skip = notes.first_skip or f"row {notes.rows}: {exc}"
            continue
        yield from row_item(kind, payload)


def rich_items(path: Path, notes: Notes, *, columns: dict[str, str] | None = None,
               progress: Callable[[int, int], None] | None = None, batched: bool = False
               ) -> Iterator[Doc | Record | list[str]]:
    """The documents and records of a document or table source (`batched`: see table_items)."""
    if document_kind(path):
        return document_items(path, notes, progress)
    return table_items(path, notes, columns, batched=batched)
def mapped_json(obj: Any, mapping: ColumnMapping, line: int) -> tuple[str, Any]:
    """A JSON Lines object read through an explicit mapping; FileProblem naming the line when it cannot be."""
    if not isinstance(obj, dict):
        raise FileProblem("bad-jsonl", f"line {line}: expected a JSON object, got {json.dumps(obj)[:40]}", line=line)
    try:
        return apply_mapping(obj, mapping)
    except RowProblem as exc:
        raise FileProblem("bad-jsonl", f"line {line}: {exc}", line=line) from None
