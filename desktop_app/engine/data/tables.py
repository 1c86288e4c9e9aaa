"""Tables -> rows, streamed with pyarrow in record batches (never loaded whole, whatever the file size).

    .csv / .tsv   pyarrow.csv's streaming reader; every column read as text (no type guessing that fails halfway)
    .parquet      pyarrow.parquet, batch by batch with buffered reads (memory ~ one batch, not one row group)
    .arrow        Arrow IPC (stream or file format), memory-mapped
    a `datasets` folder saved with save_to_disk (state.json + data-*.arrow): its Arrow files in order; a
                  DatasetDict folder (dataset_dict.json) holds one such folder per split, each read as one source
The `datasets` library is not needed: its files are Arrow IPC streams. pyarrow is in the `documents` extra.
Only the columns a mapping reads are loaded. A damaged or truncated file is a FileProblem with one clear line.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from desktop_app.engine.data.items import PIECE_CHARS, Doc, FileProblem, split_pieces, what_is

TABLE_KINDS = {".csv": "csv", ".tsv": "tsv", ".parquet": "parquet", ".arrow": "arrow"}
TABLE_EXTENSIONS = tuple(TABLE_KINDS)
DATASET_FORMAT = "datasets"
BATCH_ROWS = 1024  # rows per batch: memory per open table stays at one batch of the mapped columns
CSV_BLOCK_BYTES = 1 << 20
PREVIEW_ROWS = 5
EXTRA_HINT = 'pip install "azr-model-trainer[documents]"'


def is_dataset_folder(folder: Path) -> bool:
    """A folder written by `datasets`' save_to_disk (one split): state.json next to its Arrow files."""
    return (folder / "state.json").is_file() and any(folder.glob("*.arrow"))


def table_kind(path: Path) -> str | None:
    if path.is_dir():
        return DATASET_FORMAT if is_dataset_folder(path) else None
    return TABLE_KINDS.get(path.suffix.lower())


def missing_library(path: Path) -> FileProblem | None:
    """The verdict for a table when pyarrow is not installed (the extra that adds it), or None."""
    if importlib.util.find_spec("pyarrow") is None:
        what = f"{path.suffix} tables" if path.suffix else "datasets folders"
        return FileProblem("unsupported", f"reading {what} needs pyarrow (the documents extra): {EXTRA_HINT}")
    return None


def dataset_files(folder: Path) -> list[Path]:
    """The Arrow files of a save_to_disk folder in their order (state.json's list, else sorted by name)."""
    try:
        state = json.loads((folder / "state.json").read_text(encoding="utf-8"))
        names = [f["filename"] for f in state.get("_data_files", [])]
    except (OSError, ValueError, KeyError, TypeError):
        names = []
    files = [folder / n for n in names if (folder / n).is_file()]
    return files or sorted(folder.glob("*.arrow"))


def source_files(path: Path) -> list[Path]:
    """The files whose bytes make up a table source (its checksum and size)."""
    return dataset_files(path) if path.is_dir() else [path]


def _damaged(path: Path, kind: str, exc: Exception) -> FileProblem:
    with open(path, "rb") as fh:
        real = what_is(fh.read(16))
    name = {"csv": "CSV", "tsv": "TSV", "parquet": "Parquet", "arrow": "Arrow"}.get(kind, kind)
    if real and not (kind == "parquet" and real == "a Parquet table"):
        return FileProblem("wrong-type", f"this is {real}, not a {name} table")
    detail = (str(exc).splitlines() or [type(exc).__name__])[0].strip("'\" .")
    hint = ": it may be cut short; download it again" if kind in ("parquet", "arrow") else ""
    return FileProblem("damaged", f"damaged {name} file ({detail}){hint}")


def _csv_reader(path: Path, kind: str, columns: list[str] | None) -> Any:
    from pyarrow import csv

    parse = csv.ParseOptions(delimiter="\t" if kind == "tsv" else ",", newlines_in_values=True)
    read = csv.ReadOptions(block_size=CSV_BLOCK_BYTES)
    names = csv.open_csv(path, read_options=read, parse_options=parse).schema.names
    import pyarrow as pa

    convert = csv.ConvertOptions(column_types=dict.fromkeys(names, pa.string()), strings_can_be_null=True,
                                 include_columns=columns)
    return csv.open_csv(path, read_options=read, parse_options=parse, convert_options=convert)


def _arrow_batches(path: Path, columns: list[str] | None) -> Iterator[Any]:
    import pyarrow as pa

    source = pa.memory_map(str(path))
    try:
        reader: Any = pa.ipc.open_stream(source)
        batches: Iterator[Any] = iter(reader)
    except pa.ArrowInvalid:  # the IPC file format (with a footer) instead of a stream
        reader = pa.ipc.open_file(source)
        batches = (reader.get_batch(i) for i in range(reader.num_record_batches))
    for batch in batches:
        yield batch.select(columns) if columns is not None else batch


def _file_batches(path: Path, kind: str, columns: list[str] | None) -> Iterator[Any]:
    if kind == "parquet":
        import pyarrow.parquet as pq

        table = pq.ParquetFile(path, buffer_size=1 << 20, pre_buffer=False)
        yield from table.iter_batches(batch_size=BATCH_ROWS, columns=columns)
    elif kind in ("csv", "tsv"):
        yield from _csv_reader(path, kind, columns)
    else:
        yield from _arrow_batches(path, columns)


def iter_batches(path: Path, columns: list[str] | None = None) -> Iterator[Any]:
    """pyarrow RecordBatches of a table (only `columns` when given); FileProblem for a damaged file."""
    import pyarrow as pa

    kind = table_kind(path) or ""
    files = dataset_files(path) if kind == DATASET_FORMAT else [path]
    for file in files:
        file_kind = "arrow" if kind == DATASET_FORMAT else kind
        try:
            yield from _file_batches(file, file_kind, columns)
        except (pa.ArrowException, OSError, ValueError) as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            raise _damaged(file, file_kind, exc) from None


def column_names(path: Path) -> list[str]:
    """The table's columns, read from its schema (no rows)."""
    import pyarrow as pa

    kind = table_kind(path) or ""
    file = dataset_files(path)[0] if kind == DATASET_FORMAT else path
    file_kind = "arrow" if kind == DATASET_FORMAT else kind
    try:
        if file_kind == "parquet":
            import pyarrow.parquet as pq

            return list(pq.ParquetFile(file).schema_arrow.names)
        if file_kind in ("csv", "tsv"):
            return list(_csv_reader(file, file_kind, None).schema.names)
        return list(next(_arrow_batches(file, None)).schema.names)
    except StopIteration:
        return []
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise _damaged(file, file_kind, exc) from None


def no_blank_rows(path: Path, column: str) -> bool:
    """True when a Parquet file's own statistics prove that no row of `column` is empty or blank: in every row group
    the smallest and largest values start with a printable ASCII character (every value then does, and no such text
    is empty or whitespace only). Free (the footer is read anyway); False when a file has no such statistics."""
    import pyarrow.parquet as pq

    if table_kind(path) != "parquet":
        return False
    try:
        meta = pq.ParquetFile(path).metadata
        at = meta.schema.to_arrow_schema().get_field_index(column)
        for g in range(meta.num_row_groups):
            stats = meta.row_group(g).column(at).statistics
            low, high = (stats.min, stats.max) if stats is not None and stats.has_min_max else ("", "")
            if not (isinstance(low, str) and isinstance(high, str) and low and high
                    and low[0] > " " and high[0] < "\x7f"):
                return False
    except (OSError, ValueError, IndexError, TypeError):
        return False
    return True


def _plain_texts(column: Any, no_blanks: bool) -> list[str] | None:
    """The column's strings when every row is a whole document as it stands (text, not blank, short enough for the
    tokenizer in one piece), told from the Arrow buffers (offsets and first bytes, a few numpy operations per batch,
    none of them when `no_blanks` says the file's statistics rule blanks out); None when some row needs a look."""
    import pyarrow as pa

    if column.null_count or not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
        return None
    n = len(column)
    if n == 0:
        return []
    width = np.int64 if pa.types.is_large_string(column.type) else np.int32
    offsets = np.frombuffer(column.buffers()[1], dtype=width)[column.offset:column.offset + n + 1]
    # bytes >= characters: within PIECE_CHARS bytes is within PIECE_CHARS characters
    if offsets[-1] - offsets[0] > PIECE_CHARS and np.diff(offsets).max() > PIECE_CHARS:
        return None
    texts = column.to_pylist()
    if no_blanks:
        return texts
    if np.diff(offsets).min() == 0:
        return None
    # A whitespace-only text starts with ASCII whitespace or control (<= 0x20: str.isspace counts \x1c-\x1f too)
    # or a non-ASCII lead byte (U+00A0, U+3000, ...): only a batch with such a first byte is looked at row by row.
    first = np.frombuffer(column.buffers()[2], dtype=np.uint8)[offsets[:-1]]
    if (first.min() <= 0x20 or first.max() >= 0x80) and any(map(str.isspace, texts)):
        return None
    return texts


def text_batches(path: Path, column: str, notes: Any) -> Iterator[list[str] | Doc]:
    """A table's text column, one document per row, in row order: a list of whole documents per record batch (no
    object per row: the encode pass takes the list as it is), or Doc pieces for a text longer than PIECE_CHARS.
    Blank rows are left out; a row that is not text is counted in `notes` (rows, skipped, first_skip)."""
    no_blanks = no_blank_rows(path, column)
    for batch in iter_batches(path, [column]):
        texts = _plain_texts(batch.column(0), no_blanks)
        if texts is None:
            yield from _checked_texts(batch.column(0).to_pylist(), column, notes)
        elif texts:
            yield texts
        notes.rows += batch.num_rows


def _checked_texts(values: list[Any], column: str, notes: Any) -> Iterator[list[str] | Doc]:
    """The rows of one batch that need a look: blanks left out, non-text counted, long texts cut into pieces."""
    whole: list[str] = []
    for i, text in enumerate(values):
        if type(text) is str and len(text) <= PIECE_CHARS:
            if text and not text.isspace():
                whole.append(text)
        elif isinstance(text, str):
            if whole:
                yield whole
                whole = []
            pieces = split_pieces(text, PIECE_CHARS)
            for k, piece in enumerate(pieces):
                yield Doc(piece, k == 0, k == len(pieces) - 1)
        else:
            notes.skipped += 1
            what = "is empty" if text is None else f"must be text, not {type(text).__name__}"
            notes.first_skip = notes.first_skip or f"row {notes.rows + i + 1}: '{column}' (text) {what}"
    if whole:
        yield whole


def iter_rows(path: Path, columns: list[str] | None = None) -> Iterator[dict[str, Any]]:
    """Rows as dicts of Python values (nested lists/structs as lists/dicts), batch by batch."""
    for batch in iter_batches(path, columns):
        yield from batch.to_pylist()


@dataclass
class TablePreview:
    """The columns of a table and its first rows, as text cells (what the window's column panel shows)."""

    columns: list[str]
    rows: list[list[str]]
    total_rows: int | None  # None when it would take a full read (CSV)


def _cell(value: Any, limit: int = 200) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def table_rows(path: Path, enough: int) -> int | None:
    """Rows of a table, counted (streamed) until `enough`; None when it cannot be read (its verdict says why)."""
    if missing_library(path) is not None:
        return None
    n = 0
    try:
        for batch in iter_batches(path):
            n += batch.num_rows
            if n >= enough:
                break
    except Exception:  # a damaged table: the run's own checks name it
        return None
    return n


def _row_count(path: Path) -> int | None:
    kind = table_kind(path)
    if kind == "parquet":
        import pyarrow.parquet as pq

        return int(pq.ParquetFile(path).metadata.num_rows)
    return None


def preview_table(path: Path, rows: int = PREVIEW_ROWS) -> TablePreview:
    """Columns and the first `rows` rows (reads one batch); FileProblem for a damaged file."""
    names = column_names(path)
    out: list[list[str]] = []
    for row in iter_rows(path):
        out.append([_cell(row.get(c)) for c in names])
        if len(out) >= rows:
            break
    return TablePreview(names, out, _row_count(path))
