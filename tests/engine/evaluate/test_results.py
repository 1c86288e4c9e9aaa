"""The evaluations file of a model folder: appended atomically, read back, tolerant of damage, bounded."""

from __future__ import annotations

import json
from pathlib import Path

from desktop_app.engine.evaluate import results
from desktop_app.engine.evaluate.results import (
    RESULTS_FILE,
    append_result,
    latest_result,
    read_results,
    results_folder,
    results_folder_of,
)


def _run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "checkpoints" / "step-00000010").mkdir(parents=True)
    (run / "run.json").write_text("{}", encoding="utf-8")
    return run


def test_records_are_kept_in_the_run_folder_and_read_back(tmp_path: Path) -> None:
    run = _run(tmp_path)
    checkpoint = run / "checkpoints" / "step-00000010"
    assert results_folder(checkpoint, "checkpoint") == run == results_folder_of(checkpoint) == results_folder_of(run)
    assert results_folder(tmp_path / "someones-hf-model", "hf") is None
    append_result(run, {"model": str(run), "checkpoint": str(checkpoint), "step": 10, "metrics": {"solve_rate": 0.1}})
    append_result(run, {"model": str(checkpoint), "checkpoint": str(checkpoint), "step": 10,
                        "metrics": {"solve_rate": 0.2}})
    records = read_results(run)
    assert [r["metrics"]["solve_rate"] for r in records] == [0.1, 0.2] and all("measured_at" in r for r in records)
    assert latest_result(checkpoint)["metrics"]["solve_rate"] == 0.2
    assert latest_result(run)["metrics"]["solve_rate"] == 0.2  # any of its checkpoints
    assert latest_result(tmp_path / "never-evaluated") is None


def test_a_damaged_file_reads_as_empty_and_is_replaced(tmp_path: Path, monkeypatch) -> None:
    run = _run(tmp_path)
    (run / RESULTS_FILE).write_text("{not json", encoding="utf-8")
    assert read_results(run) == []
    monkeypatch.setattr(results, "KEEP", 3)
    for i in range(5):
        append_result(run, {"model": "m", "metrics": {"i": i}})
    data = json.loads((run / RESULTS_FILE).read_text(encoding="utf-8"))
    assert data["format_version"] == 1 and [r["metrics"]["i"] for r in data["results"]] == [2, 3, 4]


def test_nothing_is_written_beside_a_model_that_is_not_ours(tmp_path: Path) -> None:
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF")
    hf = tmp_path / "hf"
    hf.mkdir()
    assert results.results_folder(gguf, "gguf") is None and results.results_folder(hf, "hf") is None
    assert results.results_folder(hf, "export") == hf
