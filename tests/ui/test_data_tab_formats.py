"""The Data tab with documents and tables: per-file verdicts (partly in amber, refusals in red, nothing else lost),
a progress bar per file while it is read, the extracted text of the selected file before tokenizing, and the column
panel whose mapping re-judges the tables and goes into the prepared dataset."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from PySide6.QtWidgets import QProgressBar

from desktop_app.engine.data.items import FileProgress
from desktop_app.engine.events import FileVerdict
from desktop_app.engine.specs import DataSpec
from desktop_app.ui import theme

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engine"))  # the engine tests' document generators
from document_cases import PAGES, make_dataset_folder, make_docx, make_encrypted_pdf, make_pdf

pytest.importorskip("pypdf", reason="the documents extra is not installed")
pytest.importorskip("docx", reason="the documents extra is not installed")
pytest.importorskip("pyarrow", reason="the documents extra is not installed")
pytest.importorskip("fpdf", reason="fpdf2 (test extra) makes the test PDFs")


@pytest.fixture
def drop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AZR_EXTRACT_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "drop"
    folder.mkdir()
    book = make_pdf(folder / "book.pdf")  # page 2 has no text
    make_encrypted_pdf(folder / "locked.pdf", book)
    make_docx(folder / "notes.docx")
    lines = ["x,y"] + [f"{i},Row {i} tells how the tide came in over the sand bar near the pier." for i in range(80)]
    (folder / "table.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def _judged(tab) -> bool:
    return len(tab.verdicts()) == 4 and all(tab.verdicts().values())


def _row(tab, name: str) -> int:
    return next(row for path, row in tab.rows.items() if Path(path).name == name)


def test_documents_and_tables_get_verdicts_and_nothing_is_lost(window, qtbot, drop: Path) -> None:
    tab = window.data_tab
    tab.add_paths([str(drop)])
    qtbot.waitUntil(lambda: _judged(tab), timeout=30000)
    qtbot.wait(300)  # the pool's last progress reports, if any, have arrived: no bar is left over a verdict
    assert not [r for r in range(tab.table.rowCount()) if tab.table.cellWidget(r, 6) is not None]
    verdicts = {Path(p).name: v for p, v in tab.verdicts().items()}
    assert verdicts == {"book.pdf": "partly", "locked.pdf": "encrypted", "notes.docx": "ok", "table.csv": "unsupported"}
    book = _row(tab, "book.pdf")
    assert "page 2" in tab.table.item(book, 7).text()
    assert tab.table.item(book, 6).foreground().color().name() == theme.WARN
    assert tab.table.item(_row(tab, "locked.pdf"), 6).foreground().color().name() == theme.ERROR
    assert "text=<column>" in tab.table.item(_row(tab, "table.csv"), 7).text()  # what to do, in one line
    assert "2 usable" in tab.summary.text() and "2 skipped" in tab.summary.text()


def test_a_progress_bar_per_file_until_its_verdict(window) -> None:
    tab = window.data_tab
    tab.show_file_progress(FileProgress("/books/long.pdf", 12, 300))
    row = tab.rows["/books/long.pdf"]
    bar = tab.table.cellWidget(row, 6)
    assert isinstance(bar, QProgressBar) and (bar.value(), bar.maximum()) == (12, 300)
    assert bar.format() == "reading 12 of 300"
    tab.set_verdict(FileVerdict(path="/books/long.pdf", verdict="ok", reason="1 document", format="pdf"))
    assert tab.table.cellWidget(row, 6) is None and tab.verdicts()["/books/long.pdf"] == "ok"
    tab.show_file_progress(FileProgress("/books/long.pdf", 300, 300))  # a report that arrives late
    assert tab.table.cellWidget(row, 6) is None


def test_selected_document_shows_its_extracted_text(window, qtbot, drop: Path) -> None:
    tab = window.data_tab
    tab.add_paths([str(drop)])
    qtbot.waitUntil(lambda: _judged(tab), timeout=30000)
    tab.table.selectRow(_row(tab, "book.pdf"))
    panel = tab.file_preview
    qtbot.waitUntil(lambda: panel.text.toPlainText() != "", timeout=20000)
    assert tab.lower.currentIndex() == 1
    assert panel.text.toPlainText().split() == " ".join(p for p in PAGES if p).split()
    tab.table.selectRow(_row(tab, "locked.pdf"))
    qtbot.waitUntil(lambda: panel.problem.isVisibleTo(panel), timeout=20000)
    assert "password" in panel.problem.text()


def test_column_panel_maps_a_table_and_the_mapping_is_prepared(window, qtbot, drop: Path) -> None:
    tab = window.data_tab
    tab.add_paths([str(drop / "table.csv"), str(drop / "notes.docx")])
    qtbot.waitUntil(lambda: len(tab.verdicts()) == 2 and all(tab.verdicts().values()), timeout=30000)
    tab.table.selectRow(_row(tab, "table.csv"))
    columns = tab.file_preview.columns
    qtbot.waitUntil(lambda: columns.columns == ["x", "y"], timeout=20000)
    assert columns.rows.rowCount() == 5 and columns.rows.item(0, 1).text().startswith("Row 0 tells")
    assert "no column to read" in columns.note.text()
    columns.set_kind("text")
    with qtbot.waitSignal(columns.mapping_changed, timeout=5000) as changed:
        columns.set_role("text", "y")
    assert changed.args[0] == {"text": "y"} and tab.columns == {"text": "y"}
    csv_path = str(drop / "table.csv")
    qtbot.waitUntil(lambda: tab.verdicts().get(csv_path) == "ok", timeout=30000)  # judged again with the mapping
    tab.form.set_spec(DataSpec(vocab_size=300, context_length=16))
    with qtbot.waitSignal(tab.dataset_ready, timeout=60000) as ready:
        assert tab.prepare()
    qtbot.waitUntil(lambda: not window.ctx.runner.is_running("prepare"), timeout=30000)
    manifest = json.loads((Path(ready.args[0]) / "manifest.json").read_text())
    assert manifest["spec"]["columns"] == {"text": "y"}
    assert manifest["splits"]["train"]["documents"] + manifest["splits"]["val"]["documents"] == 81


def test_finetuning_file_list_reads_tables_and_datasets_folders(tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from desktop_app.ui.widgets.data_files import describe_data_file, expand_data_paths

    alpaca = tmp_path / "alpaca.parquet"
    pq.write_table(pa.Table.from_pylist([{"instruction": "Greet", "output": "Hello!"}]), alpaca)
    assert describe_data_file(str(alpaca), "sft") == ("Alpaca instructions", "")
    label, problem = describe_data_file(str(alpaca), "dpo")
    assert label == "Alpaca instructions" and "DPO needs preference pairs" in problem
    pairs = make_dataset_folder(tmp_path / "prefs" / "train", [{"prompt": "Sky?", "chosen": "Blue.",
                                                                 "rejected": "Green."}], shards=1)
    assert expand_data_paths([str(tmp_path / "prefs")]) == [str(pairs)]
    assert describe_data_file(str(pairs), "dpo") == ("preference pairs", "")
    odd = tmp_path / "odd.csv"
    odd.write_text("x,y\n1,2\n", encoding="utf-8")
    assert "no column to read: the file has x, y" in describe_data_file(str(odd), "sft")[1]
