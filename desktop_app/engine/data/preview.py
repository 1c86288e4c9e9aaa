"""What the Data tab shows of one dropped file before anything is tokenized: the first characters of its text as
extraction gives them (documents, text files), or a table's columns with a few rows and the column mapping in
effect (the given one where the table holds its columns, else the guess; the problem sentence when none fits)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from desktop_app.engine.data.columns import mapping_for
from desktop_app.engine.data.ingest import JSONL_EXTENSIONS, Doc, read_items
from desktop_app.engine.data.items import FileProblem
from desktop_app.engine.data.tables import PREVIEW_ROWS, TablePreview, preview_table, table_kind
from desktop_app.engine.errors import UserError

PREVIEW_CHARS = 6000


@dataclass
class SourcePreview:
    """One file as the person will see it: text ("text") or a table ("table"), or the problem that stops it."""

    path: str
    kind: str = "text"
    text: str = ""
    more: bool = False  # the file holds more text than `text`
    table: TablePreview | None = None
    mapping: dict[str, str] = field(default_factory=dict)
    note: str = ""  # the mapping in words, or why none fits
    problem: str = ""


def _text_preview(path: Path, out: SourcePreview, max_chars: int) -> None:
    parts: list[str] = []
    size = 0
    for item in read_items(path):
        if not isinstance(item, Doc):
            continue
        parts.append(item.text + ("\n\n" if item.last else ""))
        size += len(parts[-1])
        if size >= max_chars:
            out.more = True
            break
    out.text = "".join(parts)[:max_chars].rstrip()


def _jsonl_table(path: Path, rows: int) -> TablePreview:
    """The first JSON objects of a JSON Lines file as a table (columns: their keys, in order of appearance)."""
    objects = []
    with open(path, encoding="utf-8-sig", errors="replace") as fh:
        for line in fh:
            if line.strip():
                try:
                    obj = json.loads(line)
                except ValueError:
                    continue
                if isinstance(obj, dict):
                    objects.append(obj)
            if len(objects) >= rows:
                break
    names = list(dict.fromkeys(k for obj in objects for k in obj))

    def cell(v: object) -> str:
        text = v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)
        return text if len(text) <= 200 else text[:199] + "…"

    return TablePreview(names, [[cell(obj.get(k, "")) for k in names] for obj in objects], None)


def preview_source(path: str | Path, columns: dict[str, str] | None = None,
                   max_chars: int = PREVIEW_CHARS) -> SourcePreview:
    """The preview of one source; never raises for the file's content (the problem is in `problem`)."""
    p = Path(path)
    out = SourcePreview(str(p))
    try:
        if table_kind(p) or p.suffix.lower() in JSONL_EXTENSIONS:
            out.kind = "table"
            out.table = preview_table(p) if table_kind(p) else _jsonl_table(p, PREVIEW_ROWS)
            given = columns if columns and all(c in out.table.columns for c in columns.values()) else None
            try:
                mapping = mapping_for(out.table.columns, given)
                out.mapping, out.note = mapping.to_dict(), mapping.describe()
            except UserError as exc:
                out.note = str(exc)
        else:
            _text_preview(p, out, max_chars)
    except FileProblem as exc:
        out.problem = exc.reason
    except OSError as exc:
        out.problem = f"cannot be read: {exc.strerror or exc}"
    return out
