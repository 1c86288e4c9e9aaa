"""Find input files, judge each one, and stream its documents with bounded memory.

Every file gets a verdict: "ok" or the problem, with a reason a person reads and, where it applies,
the line number or byte offset. Nothing here raises for a bad file; bad files are reported and the
rest of the batch goes on.

Documents:
    .txt / .md   blank lines separate documents (paragraph blocks); a document longer than
                 PIECE_CHARS is streamed in pieces cut before whitespace, so a 200 MB single-line file
                 never sits in memory whole.
    .jsonl       one JSON object per line: {"text": ...} is a pretraining document; chat
                 ({"messages": [...]}), instruction ({"instruction", "input"?, "output"}) and
                 preference ({"prompt", "chosen", "rejected"}) records are validated and kept apart.
"""

from __future__ import annotations

import codecs
import errno
import hashlib
import json
import os
import re
import stat
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from desktop_app.engine.column_roles import ColumnMapping, mapping_from_dict
from desktop_app.engine.data.chat import ChatError, check_messages
from desktop_app.engine.data.documents import DOCUMENT_EXTENSIONS
from desktop_app.engine.data.items import MAGIC, PIECE_CHARS, Doc, FileProblem, Record, safe_cut, split_pieces
from desktop_app.engine.data.rich_sources import Notes, hash_source, mapped_json, rich_items, rich_kind, source_size
from desktop_app.engine.data.tables import TABLE_EXTENSIONS, is_dataset_folder
from desktop_app.engine.events import FileVerdict

TEXT_EXTENSIONS = (".txt", ".md", ".markdown", ".text")
JSONL_EXTENSIONS = (".jsonl",)
SUPPORTED_EXTENSIONS = TEXT_EXTENSIONS + JSONL_EXTENSIONS + DOCUMENT_EXTENSIONS + TABLE_EXTENSIONS
RECORD_KINDS = ("chat", "instruction", "preference")

BLOCK_BYTES = 1 << 20  # read size: memory per open file stays around a few MiB whatever the file size
MAX_JSONL_LINE = 64 << 20  # a JSON line must be parsed whole; longer lines are refused, not loaded

USABLE_VERDICTS = ("ok", "partly")  # "partly": usable, with a part named in the reason (e.g. PDF pages without text)


@dataclass
class SourceInfo:
    """What scanning learned about one input file (the manifest keeps this per source)."""

    path: str
    verdict: str = "ok"
    reason: str = ""
    format: str = ""
    encoding: str = ""
    size: int = 0
    sha256: str = ""
    documents: int = 0
    records: dict[str, int] = field(default_factory=dict)
    chars: int = 0
    line: int | None = None
    offset: int | None = None
    tokens: int = 0
    partly: str | None = None  # what a usable file lacks (pages without text, rows skipped); None when whole

    @property
    def ok(self) -> bool:
        return self.verdict in USABLE_VERDICTS

    def to_event(self) -> FileVerdict:
        return FileVerdict(path=self.path, verdict=self.verdict, reason=self.reason, format=self.format,
                           encoding=self.encoding, size=self.size,
                           documents=self.documents + sum(self.records.values()), tokens=self.tokens)

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if v is not None}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SourceInfo:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in known})


# ---------------------------------------------------------------------------------------------- paths

def _open_binary(path: Path) -> Any:
    """Open for reading (a seam tests patch to simulate unreadable files when running as root)."""
    return open(path, "rb")


def _stat_problem(path: Path) -> tuple[os.stat_result | None, FileProblem | None]:
    try:
        return os.stat(path), None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return None, FileProblem("symlink-loop", "symbolic link loop: the link leads back to itself")
        if os.path.islink(path):
            return None, FileProblem("not-found", f"broken symbolic link (target {os.readlink(path)} is missing)")
        if exc.errno == errno.ENOENT:
            return None, FileProblem("not-found", "no such file or folder")
        if exc.errno in (errno.EACCES, errno.EPERM):
            return None, FileProblem("unreadable", "permission denied")
        return None, FileProblem("unreadable", exc.strerror or str(exc))


def _is_prepared_dataset(folder: Path) -> bool:
    return (folder / "manifest.json").is_file() and (folder / "tokenizer.json").is_file()


def discover(paths: Iterable[str | Path]) -> Iterator[tuple[Path, FileProblem | None]]:
    """Every candidate file under `paths` (folders recursively, sorted), with a problem found so far.

    Hidden files and folders inside a folder are skipped; symlinked folders are followed once
    (a cycle of folder links is never walked twice).
    """
    seen_dirs: set[tuple[int, int]] = set()
    seen_files: set[str] = set()

    def walk(folder: Path) -> Iterator[tuple[Path, FileProblem | None]]:
        try:
            st = os.stat(folder)
            key = (st.st_dev, st.st_ino)
            if key in seen_dirs:
                return
            seen_dirs.add(key)
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as exc:
            yield folder, FileProblem("unreadable", f"cannot list folder: {exc.strerror or exc}")
            return
        for entry in entries:
            if entry.name.startswith("."):
                continue
            child = Path(entry.path)
            st_child, problem = _stat_problem(child)
            if problem is not None:
                yield child, problem
            else:
                yield from visit(child, st_child, False)

    def visit(path: Path, st: os.stat_result | None, top: bool) -> Iterator[tuple[Path, FileProblem | None]]:
        if st is not None and stat.S_ISDIR(st.st_mode) and is_dataset_folder(path):
            yield from one(path, None)  # a `datasets` save_to_disk folder is one source
        elif st is not None and stat.S_ISDIR(st.st_mode):
            if top or not _is_prepared_dataset(path):  # our own output (--out inside an input folder) is not input
                yield from walk(path)
        else:
            yield from one(path, st)

    def one(path: Path, st: os.stat_result | None) -> Iterator[tuple[Path, FileProblem | None]]:
        key = os.path.abspath(path)
        if key in seen_files:
            return
        seen_files.add(key)
        if st is not None and not stat.S_ISREG(st.st_mode):
            yield path, FileProblem("unsupported", "not a regular file (device, pipe or socket)")
        elif st is not None and path.suffix.lower() not in SUPPORTED_EXTENSIONS:  # st None: a `datasets` folder
            yield path, FileProblem("unsupported", f"unsupported file type '{path.suffix or '(none)'}': "
                                    f"use {', '.join(SUPPORTED_EXTENSIONS)}")
        else:
            yield path, None

    for raw in paths:
        path = Path(raw).expanduser()
        st, problem = _stat_problem(path)
        if problem is not None:
            yield path, problem
        else:
            yield from visit(path, st, True)


# ------------------------------------------------------------------------------------------ decoding

def _detect_encoding(head: bytes) -> tuple[str, int]:
    """(codec, BOM length) from the first bytes; raise FileProblem for binary data."""
    if head.startswith(b"\xff\xfe\x00\x00") or head.startswith(b"\x00\x00\xfe\xff"):
        raise FileProblem("invalid-encoding", "UTF-32 text is not supported: save the file as UTF-8")
    if head.startswith(codecs.BOM_UTF8):
        return "utf-8", 3
    if head.startswith(codecs.BOM_UTF16_LE):
        return "utf-16-le", 2
    if head.startswith(codecs.BOM_UTF16_BE):
        return "utf-16-be", 2
    for magic, what in MAGIC[:12]:  # a text file that is really one of these (Parquet's PAR1 / MZ are text-like)
        if head.startswith(magic):
            raise FileProblem("binary", f"this is {what}, not text", offset=0)
    return "utf-8", 0


def _looks_like_utf16(head: bytes) -> bool:
    """Mostly-ASCII UTF-16 without a BOM: every other byte is NUL."""
    sample = head[:4096]
    if len(sample) < 8:
        return False
    even, odd = sample[0::2], sample[1::2]
    return max(even.count(0) / len(even), odd.count(0) / len(odd)) > 0.4 and min(
        even.count(0), odd.count(0)) < 0.05 * len(odd)


_ENCODING_NAMES = {("utf-8", 0): "utf-8", ("utf-8", 3): "utf-8-bom", ("utf-16-le", 2): "utf-16-le-bom",
                   ("utf-16-be", 2): "utf-16-be-bom"}


def iter_text(path: Path, info: SourceInfo | None = None, *, hasher: Any = None) -> Iterator[str]:
    """Decoded text of a file in blocks (strict: binary or undecodable data raises FileProblem)."""
    with _open_binary(path) as fh:
        head = fh.read(max(BLOCK_BYTES, 64))  # enough for any BOM / magic number
        if hasher is not None:
            hasher.update(head)
        codec, bom = _detect_encoding(head)
        if info is not None:
            info.encoding = _ENCODING_NAMES[(codec, bom)]
        decoder = codecs.getincrementaldecoder(codec)("strict")
        check_nul = codec == "utf-8"  # NUL bytes are normal inside UTF-16
        block, base = head[bom:], bom
        while True:
            final = len(block) == 0
            if check_nul:
                nul = block.find(b"\x00")
                if nul >= 0 and base == bom and _looks_like_utf16(head):
                    raise FileProblem("invalid-encoding", "looks like UTF-16 text without a byte-order mark: "
                                      "save it as UTF-8 (or UTF-16 with a BOM)", offset=0)
                if nul >= 0:
                    raise FileProblem("binary", f"binary data (NUL byte at byte offset {base + nul}): "
                                      "not a text file", offset=base + nul)
            pending = len(decoder.getstate()[0])
            try:
                text = decoder.decode(block, final=final)
            except UnicodeDecodeError as exc:
                offset = base - pending + exc.start
                label = "UTF-8" if codec == "utf-8" else codec.upper()
                raise FileProblem("invalid-encoding", f"not valid {label} text: {exc.reason} at byte offset "
                                  f"{offset}; save the file as UTF-8", offset=offset) from None
            if text:
                yield text
            if final:
                return
            base += len(block)
            block = fh.read(BLOCK_BYTES)
            if hasher is not None:
                hasher.update(block)


# A line break followed by one or more whitespace-only lines: the boundary between two documents.
_SEPARATOR = re.compile(r"\n(?:[^\S\n]*\n)+")
_LEADING_BLANK_LINES = re.compile(r"(?:[^\S\n]*\n)+")
_TRAILING_BLANK = re.compile(r"(?:\r?\n[^\S\n]*)+$")


def iter_text_docs(blocks: Iterable[str], limit: int | None = None) -> Iterator[Doc]:
    """Paragraph documents (blank-line separated) from decoded text, each at most `limit` per piece.

    The line break that ends a paragraph is replaced by EOS later; inner line breaks (and CRLF) stay.
    Works on whole blocks with a regex (not line by line): this runs over every byte of the input.
    """
    limit = limit or PIECE_CHARS
    buf = ""
    first = True  # False while a long document is being handed on in pieces

    def start_of(text: str) -> str:
        if first:  # a new document never starts with blank lines (e.g. at the top of a file)
            m = _LEADING_BLANK_LINES.match(text)
            if m:
                return text[m.end():]
        return text

    for block in blocks:
        buf += block
        pos = 0
        for m in _SEPARATOR.finditer(buf):
            text = start_of(buf[pos:m.start()])
            if text.endswith("\r"):
                text = text[:-1]
            pos = m.end()
            if text.strip() or not first:
                yield Doc(text, first, True)
            first = True
        buf = buf[pos:] if pos else buf
        while len(buf) > limit:  # a huge paragraph: hand it on in pieces, same document
            buf = start_of(buf)
            if len(buf) <= limit:
                break
            cut = safe_cut(buf, limit)
            yield Doc(buf[:cut], first, False)
            first = False
            buf = buf[cut:]
    text = _TRAILING_BLANK.sub("", start_of(buf))
    if text.strip() or not first:
        yield Doc(text, first, True)


# -------------------------------------------------------------------------------------------- JSONL

def _jsonl_record(obj: Any) -> tuple[str, Any]:
    """(kind, payload) of one JSONL object, or raise ValueError (ChatError for its messages) with the reason."""
    if not isinstance(obj, dict):
        raise ValueError(f"expected a JSON object, got {type(obj).__name__}")
    if "messages" in obj:
        clean = check_messages(obj["messages"])  # the one reading of chat messages (data/chat.py)
        if not any(m["role"] == "assistant" for m in clean):
            raise ValueError("a chat needs at least one assistant message")
        return "chat", {"messages": clean}
    if "prompt" in obj and ("chosen" in obj or "rejected" in obj):
        for key in ("prompt", "chosen", "rejected"):
            if not isinstance(obj.get(key), str):
                raise ValueError(f"preference record needs a text '{key}'")
        return "preference", {k: obj[k] for k in ("prompt", "chosen", "rejected")}
    if "instruction" in obj or "output" in obj:
        for key in ("instruction", "output"):
            if not isinstance(obj.get(key), str):
                raise ValueError(f"instruction record needs a text '{key}'")
        extra = obj.get("input", "")
        if not isinstance(extra, str):
            raise ValueError("'input' must be text")
        return "instruction", {"instruction": obj["instruction"], "input": extra, "output": obj["output"]}
    if "text" in obj:
        if not isinstance(obj["text"], str):
            raise ValueError("'text' must be a string")
        return "text", obj["text"]
    raise ValueError("no 'text', 'messages', 'instruction'/'output' or 'prompt'/'chosen'/'rejected' field")


def iter_jsonl(blocks: Iterable[str], mapping: ColumnMapping | None = None) -> Iterator[tuple[str, Any]]:
    """(kind, payload) per non-empty line; a bad line raises FileProblem naming its line number. A line holding every
    column of `mapping` is read through it; other lines by their standard keys."""
    pending: list[str] = []
    size = 0
    lineno = 0

    def parse(line: str, n: int) -> tuple[str, Any] | None:
        if not line.strip():
            return None
        try:
            obj = json.loads(line)
            if mapping is not None and isinstance(obj, dict) and all(c in obj for c in mapping.columns):
                return mapped_json(obj, mapping, n)
            return _jsonl_record(obj)
        except json.JSONDecodeError as exc:
            raise FileProblem("bad-jsonl", f"line {n}: invalid JSON ({exc.msg}; column {exc.colno})",
                              line=n) from None
        except (ValueError, ChatError) as exc:
            raise FileProblem("bad-jsonl", f"line {n}: {exc}", line=n) from None

    for block in blocks:
        while block:
            nl = block.find("\n")
            if nl < 0:
                pending.append(block)
                size += len(block)
                if size > MAX_JSONL_LINE:
                    raise FileProblem("bad-jsonl", f"line {lineno + 1} is longer than {MAX_JSONL_LINE:,} characters",
                                      line=lineno + 1)
                break
            pending.append(block[:nl])
            block = block[nl + 1:]
            lineno += 1
            item = parse("".join(pending), lineno)
            pending, size = [], 0
            if item is not None:
                yield item
    if pending:
        item = parse("".join(pending), lineno + 1)
        if item is not None:
            yield item


# ------------------------------------------------------------------------------------------ reading

def read_items(path: Path, info: SourceInfo | None = None, *, hasher: Any = None,
               columns: dict[str, str] | None = None) -> Iterator[Doc | Record]:
    """Documents (pretraining text pieces) and records of one source, streamed; tables and JSON Lines through the
    column mapping `columns` (role -> column) where they hold its columns."""
    if rich_kind(path) is not None:
        if hasher is not None:
            hash_source(path, hasher)
        yield from rich_items(path, Notes(), columns=columns)
        return
    blocks = iter_text(path, info, hasher=hasher)
    if path.suffix.lower() in JSONL_EXTENSIONS:
        for kind, payload in iter_jsonl(blocks, mapping_from_dict(columns) if columns else None):
            if kind == "text":
                if not payload.strip():
                    continue
                pieces = split_pieces(payload, PIECE_CHARS)
                for i, piece in enumerate(pieces):
                    yield Doc(piece, i == 0, i == len(pieces) - 1)
            else:
                yield Record(kind, payload)
    else:
        yield from iter_text_docs(blocks)


def inspect_file(path: Path, problem: FileProblem | None = None, *, columns: dict[str, str] | None = None,
                 progress: Callable[[int, int], None] | None = None) -> SourceInfo:
    """Read a source once (streaming): sha256, encoding, documents/records counts and the verdict. `columns` maps
    a table's columns (columns.py); `progress(done, total)` follows a document's pages or chapters."""
    info = SourceInfo(path=str(path))
    if problem is None:
        try:
            info.size = source_size(path) if path.is_dir() else os.stat(path).st_size
        except OSError as exc:
            problem = FileProblem("unreadable", exc.strerror or str(exc))
    if problem is None and info.size == 0:
        problem = FileProblem("empty", "the file is empty (0 bytes)")
    if problem is not None:
        return _with_problem(info, problem)
    hasher = hashlib.sha256()
    notes = Notes() if rich_kind(path) is not None else None
    try:
        if notes is not None:
            info.format = rich_kind(path) or ""  # shown with a refusal too ("pdf": encrypted)
            hash_source(path, hasher)
            items: Iterable[Doc | Record | list[str]] = rich_items(path, notes, columns=columns, progress=progress,
                                                                   batched=True)
        else:
            items = read_items(path, info, columns=columns, hasher=hasher)
        saw_text, kinds = _count(items, info)
        info.sha256 = hasher.hexdigest()
    except FileProblem as exc:
        return _with_problem(info, exc)
    except PermissionError:
        return _with_problem(info, FileProblem("unreadable", "permission denied"))
    except OSError as exc:
        return _with_problem(info, FileProblem("unreadable", exc.strerror or str(exc)))
    except Exception as exc:  # a library's own error on a hostile document or table: a verdict, not a traceback
        if notes is None:
            raise
        return _with_problem(info, FileProblem("damaged", f"cannot be read ({type(exc).__name__}: {exc})"))
    is_jsonl = path.suffix.lower() in JSONL_EXTENSIONS
    if saw_text and is_jsonl:
        kinds.add("jsonl-text")
    if notes is not None:
        info.format = notes.format or info.format
    else:
        info.format = ("mixed" if len(kinds) > 1 else kinds.pop()) if kinds else ("text" if not is_jsonl else "")
    if not info.documents and not info.records:
        return _with_problem(info, _nothing_in(info, is_jsonl, notes))
    parts = []
    if info.documents:
        parts.append(f"{info.documents} document{'s' if info.documents != 1 else ''}")
    parts += [f"{n} {kind} record{'s' if n != 1 else ''}" for kind, n in sorted(info.records.items())]
    info.reason = ", ".join(parts) + (f" ({info.encoding})" if info.encoding not in ("utf-8", "") else "")
    if notes is not None:
        _note_rich(info, notes)
    return info


def _count(items: Iterable[Doc | Record | list[str]], info: SourceInfo) -> tuple[bool, set[str]]:
    """Count the documents, characters and records of a stream into `info`: (any text seen, record kinds). A list
    is a batch of whole documents (a table's text column)."""
    kinds: set[str] = set()
    saw_text = False
    for item in items:
        if isinstance(item, list):
            saw_text = saw_text or bool(item)
            info.documents += len(item)
            info.chars += sum(map(len, item))
        elif isinstance(item, Doc):
            saw_text = True
            info.chars += len(item.text)
            if item.last:
                info.documents += 1
        else:
            kinds.add(item.kind)
            info.records[item.kind] = info.records.get(item.kind, 0) + 1
    return saw_text, kinds


def _note_rich(info: SourceInfo, notes: Notes) -> None:
    """The mapping a table was read with, and "partly" with what a document or table lacks."""
    if notes.mapping is not None:
        info.reason += f" ({notes.mapping.describe()})"
    partly = notes.partly()
    if partly:
        info.verdict, info.partly = "partly", partly
        info.reason += f"; {partly}"


def _nothing_in(info: SourceInfo, is_jsonl: bool, notes: Notes | None) -> FileProblem:
    """Why a readable source gave no document and no record."""
    if notes is not None:
        if notes.skipped:
            return FileProblem("no-rows", f"no usable row: {notes.partly()}")
        if notes.found.empty and len(notes.found.empty) == notes.found.parts:
            return FileProblem("no-text", f"no {notes.found.unit} has text (a scanned document?): run OCR (e.g. "
                               "ocrmypdf) and add the result")
        return FileProblem("no-text", "no text found in the file")
    if info.encoding.endswith("-bom") and info.size <= 3:
        return FileProblem("empty", "the file holds only a byte-order mark")
    if is_jsonl:
        return FileProblem("empty", "no JSON records (only blank lines)")
    return FileProblem("whitespace-only", "the file holds only whitespace")


def _with_problem(info: SourceInfo, problem: FileProblem) -> SourceInfo:
    info.verdict, info.reason, info.line, info.offset = problem.verdict, problem.reason, problem.line, problem.offset
    return info


def mark_duplicate(info: SourceInfo, seen: dict[str, str]) -> None:
    """A usable source whose content (sha256) was seen before becomes 'duplicate'; else it is remembered."""
    if info.ok:
        if info.sha256 in seen:
            info.verdict = "duplicate"
            info.reason = f"same content as {seen[info.sha256]}"
        else:
            seen[info.sha256] = info.path


def scan(paths: Iterable[str | Path], *, known_sha256: dict[str, str] | None = None,
         columns: dict[str, str] | None = None) -> Iterator[SourceInfo]:
    """Judge every file under `paths` one after the other (extract.py's `scan_sources` reads documents in parallel);
    identical files (sha256) after the first are 'duplicate'."""
    seen: dict[str, str] = dict(known_sha256 or {})
    for path, problem in discover(paths):
        info = inspect_file(path, problem, columns=columns)
        mark_duplicate(info, seen)
        yield info
