"""What every input reader yields and raises (stdlib only): documents, records and a file's problem.

Shared by the text/JSONL reader (ingest.py), the document extractors (documents.py) and the table readers
(tables.py), so none of them imports another to name these.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from desktop_app.engine.events import Transient

PIECE_CHARS = 1 << 18  # longest text handed to the tokenizer at once (cut before whitespace)


class FileProblem(Exception):
    """A file that cannot be used; `verdict` is a short code, the message says why."""

    def __init__(self, verdict: str, reason: str, *, line: int | None = None, offset: int | None = None):
        super().__init__(reason)
        self.verdict = verdict
        self.reason = reason
        self.line = line
        self.offset = offset


@dataclass
class Doc:
    """One piece of a pretraining document. `last` marks the piece after which EOS goes."""

    text: str
    first: bool = True
    last: bool = True


@dataclass
class Record:
    kind: str  # chat | instruction | preference
    data: dict[str, Any]


@dataclass
class FileProgress(Transient):
    """How far the extraction of one file has got (its pages or chapters), while a scan reads it."""

    type: ClassVar[str] = "file-progress"
    path: str
    done: int
    total: int


# Magic numbers of common binary formats that people rename (or mis-save) under another extension.
MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "a PNG image"),
    (b"PK\x03\x04", "a ZIP archive (or docx/xlsx/odt)"),
    (b"PK\x05\x06", "an empty ZIP archive"),
    (b"%PDF-", "a PDF document"),
    (b"\x1f\x8b", "gzip-compressed data"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"\x7fELF", "an executable (ELF)"),
    (b"BZh", "bzip2-compressed data"),
    (b"\xfd7zXZ\x00", "xz-compressed data"),
    (b"7z\xbc\xaf\x27\x1c", "a 7-Zip archive"),
    (b"SQLite format 3\x00", "an SQLite database"),
    (b"PAR1", "a Parquet table"),
    (b"MZ", "a Windows executable"),
)


def what_is(head: bytes) -> str | None:
    """What the first bytes of a file say it is ("a PNG image"), or None for no known magic number."""
    for magic, what in MAGIC:
        if head.startswith(magic):
            return what
    return None


def safe_cut(text: str, limit: int) -> int:
    """Where to cut `text` (at most `limit` chars) so the tokenizer sees whole words: before whitespace."""
    window = text[limit // 2:limit]
    cut = limit  # no whitespace at all (e.g. minified data): a hard cut between characters
    for ch in (" ", "\t", "\n"):
        at = window.rfind(ch)
        if at > 0:
            cut = limit // 2 + at
            break
    # Never cut inside a run of blank lines: that run is a document boundary the next block must see
    # whole. Move the cut back to the line break that starts it.
    while True:
        nl = text.rfind("\n", 0, cut)
        if nl < 0 or text[nl + 1:cut].strip():
            break
        cut = nl
    if cut <= 0:
        cut = limit  # nothing but blank lines and spaces: any cut will do
    if cut > 1 and text[cut - 1] == "\r":  # never split a CRLF pair
        cut -= 1
    return cut


def split_pieces(text: str, limit: int | None = None) -> list[str]:
    """Cut a long text into pieces of at most `limit` characters on safe boundaries."""
    limit = limit or PIECE_CHARS
    pieces = []
    while len(text) > limit:
        cut = safe_cut(text, limit)
        pieces.append(text[:cut])
        text = text[cut:]
    pieces.append(text)
    return pieces
