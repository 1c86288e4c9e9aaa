"""Real documents and tables the format tests generate with the libraries made for them (fpdf2, pypdf, python-docx,
zipfile for EPUB, pyarrow), and the hostile ones (zip bomb, encrypted PDF, a PNG named .pdf, a truncated Parquet)."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

PAGES = ["The first page tells of a quiet harbour town.", "",  # page 2 has no text: a scanned page
         "The third page ends the story at sea."]
DOCX_PARAGRAPHS = ["Notes on sailing", "Keep the wind on your back.", "Trim the sails before the storm."]
CHAPTERS = [("chapter-b.xhtml", "Chapter One", ["It began on a grey morning in the port.",
                                                "Nobody expected the ship to leave before noon."]),
            ("chapter-a.xhtml", "Chapter Two", ["The crossing took eleven days.",
                                                "On the last one they saw land at dawn."])]
ARTICLE = ["Rivers carry sediment from the mountains to the sea over thousands of years.",
           "Where the current slows, the sediment settles and builds wide fertile deltas."]


def make_pdf(path: Path, pages: list[str] = PAGES) -> Path:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("helvetica", size=12)
    for text in pages:
        pdf.add_page()
        if text:
            pdf.cell(0, 10, text)
    pdf.output(str(path))
    return path


def make_encrypted_pdf(path: Path, source: Path) -> Path:
    from pypdf import PdfWriter

    writer = PdfWriter(clone_from=str(source))
    writer.encrypt(user_password="secret", algorithm="RC4-128")
    writer.write(str(path))
    return path


def make_docx(path: Path) -> Path:
    import docx

    document = docx.Document()
    for text in DOCX_PARAGRAPHS:
        document.add_paragraph(text)
    table = document.add_table(rows=1, cols=2)
    table.rows[0].cells[0].text, table.rows[0].cells[1].text = "knots", "12"
    document.save(str(path))
    return path


def _chapter(title: str, paragraphs: list[str]) -> str:
    body = "".join(f"<p>{p}</p>" for p in paragraphs)
    return (f'<?xml version="1.0" encoding="utf-8"?><html xmlns="http://www.w3.org/1999/xhtml"><head>'
            f"<title>{title}</title></head><body><h1>{title}</h1>{body}</body></html>")


def make_epub(path: Path) -> Path:
    """An EPUB whose spine order (b, then a) differs from the order of its file names."""
    container = ('<?xml version="1.0"?><container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:'
                 'container"><rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-'
                 'package+xml"/></rootfiles></container>')
    items = "".join(f'<item id="c{i}" href="{name}" media-type="application/xhtml+xml"/>'
                    for i, (name, _, _) in enumerate(CHAPTERS))
    spine = "".join(f'<itemref idref="c{i}"/>' for i in range(len(CHAPTERS)))
    opf = ('<?xml version="1.0"?><package xmlns="http://www.idpf.org/2007/opf" version="3.0"><metadata/>'
           f"<manifest>{items}</manifest><spine>{spine}</spine></package>")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        zf.writestr("META-INF/container.xml", container)
        zf.writestr("OEBPS/content.opf", opf)
        for name, title, paragraphs in CHAPTERS:
            zf.writestr(f"OEBPS/{name}", _chapter(title, paragraphs))
    return path


def make_html(path: Path) -> Path:
    nav = "<nav><a href='/'>Home</a> | <a href='/about'>About us</a> | <a href='/shop'>Shop</a></nav>"
    footer = "<footer>Copyright 2024 Example Corp. All rights reserved. Cookie settings.</footer>"
    body = "".join(f"<p>{p}</p>" for p in ARTICLE)
    path.write_text(f"<html><head><title>Deltas</title></head><body>{nav}<article><h1>How deltas form</h1>{body}"
                    f"</article>{footer}</body></html>", encoding="utf-8")
    return path


def make_zip_bomb(path: Path, member: str = "word/document.xml", size: int = 40 << 20) -> Path:
    """A ZIP (named .docx or .epub) whose one member inflates ~1000x: refused before anything is inflated."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("[Content_Types].xml", "<Types/>")
        zf.writestr(member, b"\0" * size)
    return path


def make_parquet(path: Path, rows: int) -> list[str]:
    """A Parquet file with a text column of `rows` distinct rows (several row groups); returns the texts."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = [f"Row {i}: the river carried {i % 97} boats past the old mill." for i in range(rows)]
    pq.write_table(pa.table({"id": list(range(rows)), "body": texts}), path, row_group_size=20_000)
    return texts


def make_dataset_folder(folder: Path, records: list[dict[str, object]], shards: int = 2) -> Path:
    """The layout `datasets`' save_to_disk writes: Arrow IPC stream shards, state.json listing them, dataset_info."""
    import pyarrow as pa

    folder.mkdir(parents=True)
    table = pa.Table.from_pylist(records)
    per = -(-len(records) // shards)
    names = []
    for k in range(shards):
        name = f"data-{k:05d}-of-{shards:05d}.arrow"
        with pa.OSFile(str(folder / name), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table.slice(k * per, per))
        names.append({"filename": name})
    (folder / "state.json").write_text(json.dumps({"_data_files": names, "_split": "train"}), encoding="utf-8")
    (folder / "dataset_info.json").write_text(json.dumps({"features": {}}), encoding="utf-8")
    return folder


def make_lying_docx(path: Path, extra: int = 50 << 20) -> Path:
    """A real DOCX whose document.xml inflates to ~50 MB while its headers declare 100 kB (a ratio that passes the
    declared-size check): only reading it in bounded steps keeps memory small."""
    import struct

    source = make_docx(path.with_name("source-" + path.name))
    name = b"word/document.xml"
    with zipfile.ZipFile(source) as zin, zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zout:
        for info in zin.infolist():
            data = zin.read(info)
            zout.writestr(info.filename, data + b" " * extra if info.filename == name.decode() else data)
    raw = bytearray(path.read_bytes())
    for signature, name_at, size_at in ((b"PK\x01\x02", 46, 24), (b"PK\x03\x04", 30, 22)):  # central, local header
        i = raw.find(signature)
        while i >= 0:
            length = struct.unpack_from("<H", raw, i + name_at - 18)[0]
            if raw[i + name_at:i + name_at + length] == name:
                struct.pack_into("<I", raw, i + size_at, 100_000)
            i = raw.find(signature, i + 4)
    path.write_bytes(bytes(raw))
    return path
