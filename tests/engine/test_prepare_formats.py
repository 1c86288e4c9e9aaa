"""Documents and tables through `prepare` (the CLI's --columns, saved in the manifest so a run reproduces) and through
fine-tuning's reader (tables read with the same column mapping)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from document_cases import make_dataset_folder, make_docx, make_encrypted_pdf, make_pdf
from test_cli_prepare import prepare

from desktop_app.engine.finetune.formats import detect_format, expand_data_paths, read_records

pa = pytest.importorskip("pyarrow", reason="the documents extra (pyarrow) is not installed")
pq = pytest.importorskip("pyarrow.parquet")
pytest.importorskip("pypdf", reason="the documents extra is not installed")
pytest.importorskip("docx", reason="the documents extra is not installed")
pytest.importorskip("fpdf", reason="fpdf2 (test extra) makes the test PDFs")

QA = [{"q": f"What is {i} plus one?", "a": f"{i + 1}", "id": i} for i in range(40)]


@pytest.fixture
def drop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("AZR_EXTRACT_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "drop"
    folder.mkdir()
    pq.write_table(pa.Table.from_pylist(QA), folder / "qa.parquet")
    pages = [" ".join(f"Sentence {p}.{k} about harbours and ships." for k in range(30)) for p in range(6)]
    book = make_pdf(folder / "book.pdf", pages)
    make_encrypted_pdf(folder / "locked.pdf", book)
    make_docx(folder / "notes.docx")
    return folder


def test_cli_prepares_documents_and_a_mapped_table_and_saves_the_mapping(drop: Path, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    proc = prepare(str(drop), "--out", str(out), "--vocab-size", "300", "--context", "16",
                   "--columns", "instruction=q,output=a", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    verdicts = {Path(f["path"]).name: f["verdict"] for f in result["files"]}
    assert verdicts == {"book.pdf": "ok", "locked.pdf": "encrypted", "notes.docx": "ok", "qa.parquet": "ok"}
    assert result["records"] == {"instruction": 40} and result["tokens"]["train"] > 0
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["spec"]["columns"] == {"instruction": "q", "output": "a"}  # the run that reads it reproduces
    first = json.loads((out / "records" / "instruction.jsonl").read_text().splitlines()[0])
    assert (first["instruction"], first["output"]) in {(r["q"], r["a"]) for r in QA}


def test_cli_bad_columns_is_one_line_and_exit_2(drop: Path, tmp_path: Path) -> None:
    proc = prepare(str(drop), "--out", str(tmp_path / "ds"), "--columns", "question", cwd=tmp_path)
    assert proc.returncode == 2
    assert "'question' is not role=column" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "ds").exists()


def test_cli_append_refuses_columns(drop: Path, tmp_path: Path) -> None:
    out = tmp_path / "ds"
    assert prepare(str(drop / "notes.docx"), "--out", str(out), "--vocab-size", "300", "--context", "16",
                   cwd=tmp_path).returncode == 0
    proc = prepare(str(drop / "qa.parquet"), "--out", str(out), "--append", "--columns", "text=q", cwd=tmp_path)
    assert proc.returncode == 2 and "drop --columns" in proc.stderr


def test_finetuning_reads_tables_through_the_mapping(tmp_path: Path) -> None:
    alpaca = tmp_path / "alpaca.parquet"
    pq.write_table(pa.Table.from_pylist([{"instruction": "Greet", "input": "", "output": "Hello!"},
                                         {"instruction": "Count", "input": "", "output": None}]), alpaca)
    assert detect_format(alpaca) == "alpaca"
    records, verdicts = read_records(alpaca)
    assert records[0]["messages"] == [{"role": "user", "content": "Greet"}, {"role": "assistant", "content": "Hello!"}]
    assert records[0]["source"] == {"path": str(alpaca), "line": 1}
    assert any(v.line == 2 and "'output' (output) is empty" in v.reason for v in verdicts)
    qa = tmp_path / "qa.csv"
    qa.write_text("q,a\nWhy?,Because.\n", encoding="utf-8")
    records, _ = read_records(qa, columns={"instruction": "q", "output": "a"})
    assert records[0]["messages"][-1] == {"role": "assistant", "content": "Because."}


def test_finetuning_reads_a_datasets_folder_and_refuses_a_text_table(tmp_path: Path) -> None:
    chosen = [{"role": "user", "content": "Sky?"}, {"role": "assistant", "content": "Blue."}]
    rejected = [{"role": "user", "content": "Sky?"}, {"role": "assistant", "content": "Green."}]
    folder = make_dataset_folder(tmp_path / "uf" / "train", [{"prompt": "Sky?", "chosen": chosen,
                                                               "rejected": rejected}] * 4)
    assert expand_data_paths(tmp_path / "uf") == [folder]
    records, _ = read_records(folder)
    assert len(records) == 4 and records[0]["chosen"] == [{"role": "assistant", "content": "Blue."}]
    text = tmp_path / "text.parquet"
    pq.write_table(pa.table({"text": ["just prose"]}), text)
    _, verdicts = read_records(text)
    summary = next(v for v in verdicts if v.line == 0)
    assert summary.status == "error" and "that is pretraining text" in summary.reason
