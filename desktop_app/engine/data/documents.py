"""Books and documents -> plain text, each through the library made for its format, with limits for hostile files.

    PDF    pypdf: the text layer page by page; pages without text are named (scanned pages need OCR first)
    EPUB   zipfile + META-INF/container.xml -> the OPF package -> its spine: chapters in reading order, each
           chapter's XHTML through the HTML extractor
    DOCX   python-docx: paragraphs and tables in document order
    HTML   trafilatura: the main content, boilerplate (menus, footers, cookie notes) removed

Every problem is a FileProblem with one line a person reads (encrypted, damaged, not what its name says, a zip bomb,
too many pages). The libraries are the `documents` extra; a missing one is a verdict naming the extra.
`iter_sections` yields (text, ends_document): a PDF, DOCX or HTML file is one document, an EPUB one per chapter.
Extracted text is kept in a per-user cache (keyed by path, size and modification time), so the passes of
preparing a dataset (scan, tokenizer sample, encode) extract each file once.
"""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import logging
import os
import posixpath
import tempfile
import time
import xml.etree.ElementTree as ET
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from desktop_app.engine.data.items import FileProblem, what_is

DOCUMENT_KINDS = {".pdf": "pdf", ".epub": "epub", ".docx": "docx", ".html": "html", ".htm": "html",
                  ".xhtml": "html"}
DOCUMENT_EXTENSIONS = tuple(DOCUMENT_KINDS)
EXTRA_HINT = 'pip install "azr-model-trainer[documents]"'
LIBRARIES = {"pdf": ("pypdf", "pypdf"), "docx": ("docx", "python-docx"), "epub": ("trafilatura", "trafilatura"),
             "html": ("trafilatura", "trafilatura")}  # kind -> (module, package)

MAX_PDF_PAGES = 20_000  # a longer "PDF" is a scan archive or a hostile file, not a book
MAX_PDF_BYTES = 2 << 30  # pypdf seeks in the file; the limit keeps a hostile cross-reference table in bounds
MAX_MEMBER_BYTES = 256 << 20  # one member of a DOCX/EPUB, uncompressed
MAX_ARCHIVE_BYTES = 512 << 20  # all members together, uncompressed (python-docx holds a package in memory)
MAX_RATIO = 200  # uncompressed / compressed size of a member over 1 MB (text compresses ~5-20x)
MAX_MEMBERS = 20_000
MAX_HTML_BYTES = 64 << 20
EXTRACTOR_VERSION = 1  # bump when extraction changes: cached text of older versions is not reused
CACHE_MAX_AGE_S = 24 * 3600

Progress = Callable[[int, int], None]  # (done, total) parts of one file


@dataclass
class Found:
    """What extraction learned besides the text: parts read, and the parts (page numbers) without text."""

    unit: str = "page"
    parts: int = 0
    empty: list[int] = field(default_factory=list)
    broken: list[int] = field(default_factory=list)

    def partly(self) -> str:
        """The reason a usable file is only partly read ("" when it is whole)."""
        notes = []
        if self.empty:
            n = len(self.empty)
            notes.append(f"{n} of {self.parts} {self.unit}s {'has' if n == 1 else 'have'} no text (scanned?): "
                         f"{self.unit}{'s' if n > 1 else ''} {number_ranges(self.empty)}; run OCR (e.g. ocrmypdf) "
                         "to include them" if self.unit == "page" else
                         f"{n} of {self.parts} {self.unit}s hold no text: {number_ranges(self.empty)}")
        if self.broken:
            notes.append(f"{self.unit}s {number_ranges(self.broken)} could not be read (damaged)")
        return "; ".join(notes)


def number_ranges(numbers: list[int], limit: int = 12) -> str:
    """[1, 2, 3, 7] -> '1-3, 7' (at most `limit` ranges, then 'and N more')."""
    ranges: list[list[int]] = []
    for n in sorted(numbers):
        if ranges and n == ranges[-1][1] + 1:
            ranges[-1][1] = n
        else:
            ranges.append([n, n])
    text = [f"{a}-{b}" if b > a else str(a) for a, b in ranges[:limit]]
    more = f" and {len(ranges) - limit} more" if len(ranges) > limit else ""
    return ", ".join(text) + more


def document_kind(path: Path) -> str | None:
    return DOCUMENT_KINDS.get(path.suffix.lower())


def missing_library(kind: str) -> FileProblem | None:
    """The verdict for a format whose library is not installed (the extra that adds it), or None."""
    module, package = LIBRARIES[kind]
    if importlib.util.find_spec(module) is None:
        return FileProblem("unsupported", f"reading {kind.upper()} files needs {package} (the documents extra): "
                           f"{EXTRA_HINT}")
    return None


# --------------------------------------------------------------------------------------------------- zip

def open_zip(path: Path, what: str) -> zipfile.ZipFile:
    """A ZIP-based document opened after checking every member's declared size and compression ratio (zipfile
    itself never inflates a member past its declared size: it stops and fails the CRC)."""
    head = _head(path)
    if not head.startswith(b"PK\x03\x04"):
        raise _not_what(head, what)
    try:
        zf = zipfile.ZipFile(path)
        infos = zf.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError) as exc:
        raise FileProblem("damaged", f"damaged {what}: the ZIP archive inside cannot be read ({exc})") from None
    total = 0
    for info in infos:
        ratio = info.file_size / max(1, info.compress_size)
        if info.file_size > MAX_MEMBER_BYTES or (info.file_size > 1 << 20 and ratio > MAX_RATIO):
            zf.close()
            raise FileProblem("zip-bomb", f"refused: {info.filename} would inflate to {info.file_size:,} bytes "
                              f"({ratio:,.0f}x its packed size) - a decompression bomb, not a {what}")
        total += info.file_size
    if len(infos) > MAX_MEMBERS or total > MAX_ARCHIVE_BYTES:
        zf.close()
        raise FileProblem("zip-bomb", f"refused: {len(infos):,} members inflating to {total:,} bytes is over the "
                          f"limit for a {what} ({MAX_ARCHIVE_BYTES:,} bytes)")
    return zf


def read_member(zf: zipfile.ZipFile, name: str, what: str) -> bytes:
    """One member, inflated in 1 MB steps and never past its declared size (zipfile's own `read()` inflates a member
    whole before it cuts it to that size; a member that holds more than it declares then fails its checksum)."""
    try:
        info = zf.getinfo(name)
        chunks, size = [], 0
        with zf.open(info) as fh:
            while chunk := fh.read(1 << 20):
                size += len(chunk)
                if size > info.file_size:  # zipfile stops at the declared size; this only guards that promise
                    raise FileProblem("zip-bomb", f"refused: {name} holds more than the {info.file_size:,} bytes "
                                      f"it declares")
                chunks.append(chunk)
        return b"".join(chunks)
    except KeyError:
        raise FileProblem("damaged", f"damaged {what}: {name} is missing from the archive") from None
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, zlib.error) as exc:  # bad CRC, a lying size, ...
        raise FileProblem("damaged", f"damaged {what}: {name} cannot be unpacked ({exc})") from None


def checked_package(path: Path, what: str) -> io.BytesIO:
    """A copy of a ZIP package (stored, in memory) made of members read with `read_member`, for a library that would
    otherwise inflate the original's members whole (python-docx): it only ever sees checked bytes."""
    buffer = io.BytesIO()
    with open_zip(path, what) as zf, zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as copy:
        for info in zf.infolist():
            if not info.is_dir():
                copy.writestr(info.filename, read_member(zf, info.filename, what))
    buffer.seek(0)
    return buffer


def _head(path: Path) -> bytes:
    with open(path, "rb") as fh:
        return fh.read(1024)


def _not_what(head: bytes, what: str) -> FileProblem:
    a = f"an {what}" if what[0] in "AEIOU" else f"a {what}"
    real = what_is(head)
    if real:
        return FileProblem("wrong-type", f"this is {real}, not {a}: rename it or export it as {a}")
    return FileProblem("wrong-type", f"not {a} (its first bytes do not match the format): the file is damaged or was "
                       "renamed")


# ------------------------------------------------------------------------------------------- extractors

def _pdf_sections(path: Path, found: Found, progress: Progress | None) -> Iterator[tuple[str, bool]]:
    from pypdf import PdfReader
    from pypdf.errors import DependencyError, PyPdfError

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # its repair notes would flood the log; the verdict says it

    head = _head(path)
    if b"%PDF-" not in head:
        raise _not_what(head, "PDF document")
    size = path.stat().st_size
    if size > MAX_PDF_BYTES:
        raise FileProblem("too-large", f"a PDF of {size:,} bytes is over the limit of {MAX_PDF_BYTES:,}: split it")
    try:
        reader = PdfReader(path)
        if reader.is_encrypted and not reader.decrypt(""):  # an owner password alone still opens
            raise FileProblem("encrypted", "encrypted PDF (it needs a password): save an unprotected copy and "
                              "add that")
        pages = len(reader.pages)
    except FileProblem:
        raise
    except DependencyError:  # AES without the cryptography package: the file is fine, the install is not
        raise FileProblem("unsupported", f"this PDF is AES-encrypted: opening it needs the cryptography package (in "
                          f"the documents extra): {EXTRA_HINT}") from None
    except Exception as exc:  # pypdf raises many types for damaged files (PdfReadError, KeyError, ...)
        if isinstance(exc, PyPdfError) and "decrypt" in str(exc).lower():
            raise FileProblem("encrypted", "encrypted PDF (it needs a password): save an unprotected copy and "
                              "add that") from None
        raise FileProblem("damaged", f"damaged PDF: {exc or type(exc).__name__}") from None
    if pages > MAX_PDF_PAGES:
        raise FileProblem("too-large", f"{pages:,} pages is over the limit of {MAX_PDF_PAGES:,}: split the PDF")
    found.unit, found.parts = "page", pages
    for number in range(1, pages + 1):
        try:
            text = reader.pages[number - 1].extract_text() or ""
        except Exception:  # one damaged page: named in the verdict, the rest is read
            found.broken.append(number)
            text = ""
        else:
            if not text.strip():
                found.empty.append(number)
        if text.strip():
            yield text.rstrip("\n") + "\n", False
        if progress is not None:
            progress(number, pages)
    yield "", True


def _docx_sections(path: Path, found: Found, progress: Progress | None) -> Iterator[tuple[str, bool]]:
    import docx
    from docx.table import Table

    package = checked_package(path, "Word document (DOCX)")  # sizes checked before python-docx inflates anything
    try:
        document = docx.Document(package)
        blocks = list(document.iter_inner_content())
    except Exception as exc:  # not a Word package (another ZIP), damaged XML, ...
        raise FileProblem("damaged", f"not a readable Word document (DOCX): {exc or type(exc).__name__}") from None
    lines = []
    for block in blocks:
        if isinstance(block, Table):
            lines += ["\t".join(cell.text for cell in row.cells) for row in block.rows]
        else:
            lines.append(block.text)
    found.unit, found.parts = "paragraph", len(blocks)
    if progress is not None:
        progress(1, 1)
    yield "\n".join(lines), True


def html_text(data: bytes | str) -> str:
    """The readable text of an HTML page: its main content (trafilatura, favouring recall so a short book chapter is
    kept whole), or all of its text where no main content is found."""
    import trafilatura

    text = trafilatura.extract(data, include_comments=False, include_tables=True, favor_recall=True)
    return text if text is not None else (trafilatura.html2txt(data) or "")


def _html_sections(path: Path, found: Found, progress: Progress | None) -> Iterator[tuple[str, bool]]:
    size = path.stat().st_size
    if size > MAX_HTML_BYTES:
        raise FileProblem("too-large", f"an HTML page of {size:,} bytes is over the limit of {MAX_HTML_BYTES:,}")
    data = path.read_bytes()
    real = what_is(data[:16])
    if real or b"\x00" in data[:4096]:
        raise FileProblem("wrong-type", f"this is {real or 'binary data'}, not an HTML page")
    found.unit, found.parts = "page", 1
    if progress is not None:
        progress(1, 1)
    yield html_text(data), True


def _epub_spine(zf: zipfile.ZipFile) -> list[str]:
    """Member names of the chapters in reading order (container.xml -> OPF -> spine)."""
    what = "EPUB book"
    try:
        container = ET.fromstring(read_member(zf, "META-INF/container.xml", what))
        rootfile = next(e for e in container.iter() if e.tag.endswith("rootfile")).get("full-path") or ""
        opf = ET.fromstring(read_member(zf, rootfile, what))
    except FileProblem:
        raise
    except (ET.ParseError, StopIteration) as exc:
        raise FileProblem("damaged", f"damaged EPUB book: its package description cannot be read ({exc})") from None
    base = posixpath.dirname(rootfile)
    items = {e.get("id"): e.get("href") for e in opf.iter() if e.tag.endswith("}item") or e.tag == "item"}
    spine = [e.get("idref") for e in opf.iter() if e.tag.endswith("itemref")]
    chapters = [posixpath.normpath(posixpath.join(base, items[i])) for i in spine if items.get(i)]
    if not chapters:
        raise FileProblem("damaged", "damaged EPUB book: it lists no chapters (an empty spine)")
    return chapters


def _epub_sections(path: Path, found: Found, progress: Progress | None) -> Iterator[tuple[str, bool]]:
    with open_zip(path, "EPUB book") as zf:
        chapters = _epub_spine(zf)
        found.unit, found.parts = "chapter", len(chapters)
        for number, name in enumerate(chapters, 1):
            text = html_text(read_member(zf, name, "EPUB book")).strip()
            if text:
                yield text, True
            else:
                found.empty.append(number)
            if progress is not None:
                progress(number, len(chapters))


_EXTRACTORS = {"pdf": _pdf_sections, "docx": _docx_sections, "html": _html_sections, "epub": _epub_sections}


# ------------------------------------------------------------------------------------------------ cache

def cache_dir() -> Path:
    """The per-user folder of extracted text (AZR_EXTRACT_CACHE overrides it)."""
    folder = os.environ.get("AZR_EXTRACT_CACHE") or os.path.join(tempfile.gettempdir(),
                                                                  f"azr-extracted-{os.getuid()}")
    path = Path(folder)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def _cache_file(path: Path, kind: str) -> Path:
    st = path.stat()
    key = json.dumps([os.path.abspath(path), st.st_size, st.st_mtime_ns, kind, EXTRACTOR_VERSION])
    return cache_dir() / (hashlib.sha256(key.encode()).hexdigest()[:32] + ".jsonl")


def _from_cache(file: Path, found: Found) -> Iterator[tuple[str, bool]] | None:
    try:
        fh = open(file, encoding="utf-8")  # noqa: SIM115 - closed by the generator below
    except OSError:
        return None

    def lines() -> Iterator[tuple[str, bool]]:
        with fh:
            for line in fh:
                item = json.loads(line)
                if isinstance(item, dict):  # the summary, written last
                    found.unit, found.parts, found.empty, found.broken = (item["unit"], item["parts"], item["empty"],
                                                                          item["broken"])
                else:
                    yield item[0], item[1]
    return lines()


def _prune_cache(folder: Path) -> None:
    now = time.time()
    for old in folder.glob("*.jsonl"):
        try:
            if now - old.stat().st_mtime > CACHE_MAX_AGE_S:
                old.unlink()
        except OSError:
            pass


def iter_sections(path: Path, found: Found | None = None, progress: Progress | None = None,
                  *, cache: bool = True) -> Iterator[tuple[str, bool]]:
    """(text, ends_document) of a document file, from the cache when this file was extracted before; FileProblem
    for a file that cannot be read (`found` learns its parts and the parts without text)."""
    kind = document_kind(path)
    if kind is None:
        raise FileProblem("unsupported", f"'{path.suffix}' is not a document format")
    problem = missing_library(kind)
    if problem is not None:
        raise problem
    found = found if found is not None else Found()
    file = _cache_file(path, kind) if cache else None
    cached = _from_cache(file, found) if file is not None else None
    if cached is not None:
        yield from cached
        return
    sections = _EXTRACTORS[kind](path, found, progress)
    if file is None:
        yield from sections
        return
    tmp = file.with_suffix(f".{os.getpid()}.partial")
    try:
        with open(tmp, "w", encoding="utf-8") as out:
            for section in sections:
                out.write(json.dumps(section, ensure_ascii=False) + "\n")
                yield section
            out.write(json.dumps({"unit": found.unit, "parts": found.parts, "empty": found.empty,
                                  "broken": found.broken}) + "\n")
        os.replace(tmp, file)  # only a file read to its end is kept
        _prune_cache(file.parent)
    finally:
        if tmp.exists():
            tmp.unlink()
