"""Benchmark: document and table extraction in the app vs the plain library on the same files, same thread count.

    .venv/bin/python tests/bench/bench_prepare_formats.py                   # short: 8 PDFs x 40 pages, 200k rows
    .venv/bin/python tests/bench/bench_prepare_formats.py --pdfs 16 --pages 80 --rows 1000000 --workers 4
    .venv/bin/python tests/bench/bench_prepare_formats.py --json docs/bench/prepare_formats_<date>.json

Extraction only (no tokenizer, no checksum, the text cache off), the faster of --repeat runs of each side:
    PDF      plain: pypdf PdfReader + page.extract_text() for every page of every file
             app:   documents.iter_sections (limits, verdict notes, pages without text named)
             both sequential (1 thread), then both over --workers processes (a spawn pool per side)
    Parquet  plain: pyarrow.parquet.ParquetFile.iter_batches(columns=[text]) -> the column's Python strings
                    ("parquet-rows": batch.to_pylist() row dicts, the plain way to read records)
             app:   encode_items.source_items, what the encode pass reads: the guessed column mapping, then a list
                    of whole documents per Arrow record batch (tables.text_batches); 1 thread each
                    ("parquet-scan": rich_sources.table_items(batched=True), what the scan pass counts)
Goal: app / plain >= 0.8 for pdf and parquet. Figures are printed (and written with --json); nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from datetime import date
from multiprocessing import get_context
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))


def make_pdfs(folder: Path, count: int, pages: int) -> list[Path]:
    from fpdf import FPDF

    paths = []
    for i in range(count):
        pdf = FPDF()
        pdf.set_font("helvetica", size=10)
        for p in range(pages):
            pdf.add_page()
            pdf.multi_cell(0, 5, " ".join(f"Book {i} page {p} line {k}: the tide came in over the sand bar near "
                                          "the old pier, and the boats rose with it." for k in range(25)))
        path = folder / f"book{i:02d}.pdf"
        pdf.output(str(path))
        paths.append(path)
    return paths


def plain_pdf(path: str) -> int:
    from pypdf import PdfReader

    return sum(len(page.extract_text() or "") for page in PdfReader(path).pages)


def app_pdf(path: str) -> int:
    from desktop_app.engine.data.documents import iter_sections

    return sum(len(text) for text, _ in iter_sections(Path(path), cache=False))


def plain_parquet(path: str) -> int:
    """The plain library's way to stream a text column: its Python strings, batch by batch."""
    import pyarrow.parquet as pq

    return sum(sum(map(len, batch.column(0).to_pylist()))
               for batch in pq.ParquetFile(path).iter_batches(batch_size=1024, columns=["body"]))


def plain_parquet_rows(path: str) -> int:
    """The plain library's way to stream rows as records (dicts), the shape a column mapping reads."""
    import pyarrow.parquet as pq

    return sum(len(row["body"]) for batch in pq.ParquetFile(path).iter_batches(batch_size=1024)
               for row in batch.to_pylist())


def app_parquet(path: str) -> int:
    """What the encode pass reads of a table's text column (encode_items.source_items): the guessed mapping, then
    lists of whole documents per record batch, as prepare.py's reader thread takes them."""
    from desktop_app.engine.data.encode_items import source_items
    from desktop_app.engine.data.ingest import SourceInfo
    from desktop_app.engine.specs import DataSpec

    return sum(sum(map(len, item)) if isinstance(item, list) else len(item.text)
               for item in source_items(SourceInfo(path, format="parquet:text"), DataSpec()))


def app_parquet_docs(path: str) -> int:
    """The scan pass (ingest.inspect_file -> rich_sources.table_items, batched): lists of whole documents."""
    from desktop_app.engine.data.rich_sources import Notes, table_items

    return sum(sum(map(len, item)) if isinstance(item, list) else len(item.text)
               for item in table_items(Path(path), Notes(), batched=True))


def timed(fn, paths: list[Path], workers: int, repeat: int) -> tuple[float, int]:
    """The fastest wall time of `repeat` runs of fn over every path (in a spawn pool when workers > 1), and chars."""
    fn(str(paths[0]))  # warm up: imports and first-call costs are not extraction
    best, chars = float("inf"), 0
    for _ in range(repeat):
        start = time.perf_counter()
        if workers > 1:
            with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
                list(pool.map(abs, [0] * workers))  # start the workers before timing the work
                start = time.perf_counter()
                chars = sum(pool.map(fn, [str(p) for p in paths]))
        else:
            chars = sum(fn(str(p)) for p in paths)
        best = min(best, time.perf_counter() - start)
    return best, chars


def side_by_side(name: str, plain, app, paths: list[Path], workers: int, repeat: int, size: int) -> dict:
    plain_s, plain_chars = timed(plain, paths, workers, repeat)
    app_s, app_chars = timed(app, paths, workers, repeat)
    row = {"what": name, "workers": workers, "files": len(paths), "bytes": size,
           "plain_s": round(plain_s, 4), "app_s": round(app_s, 4), "plain_chars": plain_chars, "app_chars": app_chars,
           "plain_mb_per_s": round(size / plain_s / 1e6, 2), "app_mb_per_s": round(size / app_s / 1e6, 2),
           "ratio_app_to_plain": round(plain_s / app_s, 3)}
    print(f"{name:>8} x{workers}: plain {plain_s:7.3f} s, app {app_s:7.3f} s, ratio {row['ratio_app_to_plain']:.2f} "
          f"(goal >= 0.8)")
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pdfs", type=int, default=8)
    ap.add_argument("--pages", type=int, default=40)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes of the parallel PDF run")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", default="", help="also write the raw figures to this file")
    args = ap.parse_args()
    from desktop_app.engine.devices import cpu_name
    from tests.engine.document_cases import make_parquet

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        pdfs = make_pdfs(folder, args.pdfs, args.pages)
        parquet = folder / "rows.parquet"
        make_parquet(parquet, args.rows)
        pdf_bytes = sum(p.stat().st_size for p in pdfs)
        rows = [side_by_side("pdf", plain_pdf, app_pdf, pdfs, 1, args.repeat, pdf_bytes)]
        if args.workers > 1:
            rows.append(side_by_side("pdf", plain_pdf, app_pdf, pdfs, args.workers, args.repeat, pdf_bytes))
        for name, plain, app in (("parquet", plain_parquet, app_parquet), ("parquet-rows", plain_parquet_rows,
                                 app_parquet), ("parquet-scan", plain_parquet, app_parquet_docs)):
            rows.append(side_by_side(name, plain, app, [parquet], 1, args.repeat, parquet.stat().st_size))
    record = {"bench": "prepare_formats", "date": date.today().isoformat(), "machine": platform.node(),
              "platform": platform.platform(), "cpu": cpu_name(), "cpu_count": os.cpu_count(),
              "python": platform.python_version(), "settings": vars(args), "results": rows}
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    main()
