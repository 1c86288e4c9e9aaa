"""The Evaluate view's Benchmarks section: the searchable benchmark list (with each one's data state), the task
folder's editor, the results table's "value ± standard error" cells and "Δ vs <base>" rows, saved results shown
again, and one sentence in place of the section when lm-evaluation-harness is not installed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest
from PySide6.QtCore import Qt

from desktop_app.engine.evaluate.results import RESULTS_FILE
from desktop_app.engine.evaluate.spec import EvalSpec
from desktop_app.ui.widgets.benchmark_picker import BenchmarkPicker, matches
from desktop_app.ui.widgets.field_editors import FolderEdit

TASKS = Path(__file__).resolve().parents[1] / "fixtures" / "benchmark_tasks"
needs_harness = pytest.mark.skipif(importlib.util.find_spec("lm_eval") is None,
                                   reason="lm-evaluation-harness (the [benchmarks] extra) is not installed")


def _rows(picker: BenchmarkPicker) -> dict[str, str]:
    return {picker.list.item(i).data(Qt.ItemDataRole.UserRole): picker.list.item(i).text()
            for i in range(picker.list.count())}


def _tick(picker: BenchmarkPicker, name: str) -> None:
    item = next(picker.list.item(i) for i in range(picker.list.count())
                if picker.list.item(i).data(Qt.ItemDataRole.UserRole) == name)
    item.setCheckState(Qt.CheckState.Checked)


def _headers(view) -> list[str]:
    return [view.table.horizontalHeaderItem(c).text() for c in range(view.table.columnCount())]


def _cell(view, row: int, header: str) -> str:
    item = view.table.item(row, _headers(view).index(header))
    return item.text() if item is not None else ""


def test_matches_search_names_and_descriptions_by_every_word():
    names = ["arc_easy", "arc_challenge", "mmlu", "mmlu_anatomy", "hellaswag"]
    described = {"arc_easy": "grade-school science questions", "hellaswag": "sensible ending of a scene"}
    assert matches("arc", names, described) == (["arc_easy", "arc_challenge"], 2)
    assert matches("science", names, described) == (["arc_easy"], 1)  # a word of the description
    assert matches("mmlu anat", names, described) == (["mmlu_anatomy"], 1)  # every word must match
    assert matches("a", names, described, most=2) == (["arc_easy", "hellaswag"], 4)  # the first few, and the count


def test_the_picker_lists_popular_benchmarks_searches_ticks_and_takes_typed_names(qtbot):
    from desktop_app.engine.evaluate.benchmark_catalog import popular_benchmarks

    picker = BenchmarkPicker()
    qtbot.addWidget(picker)
    wanted, fetches = [], []
    picker.catalog_wanted.connect(lambda: wanted.append(1))
    picker.fetch_requested.connect(fetches.append)
    picker.set_popular(popular_benchmarks())
    rows = _rows(picker)
    assert {"mmlu", "arc_easy", "gsm8k", "humaneval"} <= set(rows)
    assert "grade-school science" in rows["arc_easy"]  # each with its one line
    assert picker.value() == [] and not wanted and "none ticked" in picker.state_note.text()
    _tick(picker, "gsm8k")
    _tick(picker, "arc_easy")
    assert picker.value() == ["gsm8k", "arc_easy"] and wanted  # ticking asks for the task list
    # searching before the task list is read says so; once read, the matches are listed
    qtbot.keyClicks(picker.search, "mmlu_ana")
    assert "reading the harness's task list" in picker.state_note.text()
    picker.set_catalog(["arc_easy", "gsm8k", "mmlu", "mmlu_anatomy", "mmlu_astronomy"])
    assert list(_rows(picker)) == ["mmlu_anatomy"] and "1 match" in picker.state_note.text()
    qtbot.keyClick(picker.search, Qt.Key.Key_Return)  # the one match is ticked
    assert picker.value() == ["gsm8k", "arc_easy", "mmlu_anatomy"] and picker.search.text() == ""
    # a name the list does not know (a private task of a folder not read yet) is ticked as typed
    qtbot.keyClicks(picker.search, "my_private_task")
    assert "press Enter to tick it anyway" in picker.state_note.text()
    qtbot.keyClick(picker.search, Qt.Key.Key_Return)
    assert picker.value()[-1] == "my_private_task"
    assert "not a task the harness or the folder knows" in _rows(picker)["my_private_task"]
    # words with spaces are a search, never a name
    qtbot.keyClicks(picker.search, "grade school")
    qtbot.keyClick(picker.search, Qt.Key.Key_Return)
    assert len(picker.value()) == 4
    picker.search.clear()
    # data states: a missing one enables Fetch data, which asks for exactly the missing ticked ones
    assert not picker.fetch_btn.isEnabled()
    picker.set_states({"gsm8k": "missing", "arc_easy": "ready", "mmlu": "missing"})
    rows = _rows(picker)
    assert rows["gsm8k"].startswith("gsm8k — data to fetch — grade-school maths")  # the state before the words
    assert rows["arc_easy"].startswith("arc_easy — data fetched")
    assert "data to fetch for gsm8k" in picker.state_note.text() and picker.fetch_btn.isEnabled()
    picker.fetch_btn.click()
    assert fetches == [["gsm8k"]]  # mmlu's data is missing too, but it is not ticked
    # the value round-trips (a saved spec shown again); unticking removes
    picker.set_value(["hellaswag", "gsm8k"])
    assert picker.value() == ["hellaswag", "gsm8k"] and list(_rows(picker))[:2] == ["hellaswag", "gsm8k"]
    _tick(picker, "mmlu")
    item = picker.list.item(0)
    item.setCheckState(Qt.CheckState.Unchecked)
    assert picker.value() == ["gsm8k", "mmlu"]


def test_the_evaluation_form_uses_the_benchmark_list_and_a_folder_editor(qtbot, tmp_path):
    from desktop_app.ui.widgets.spec_form import SpecForm

    form = SpecForm(EvalSpec)
    qtbot.addWidget(form)
    assert isinstance(form.editors["benchmarks"], BenchmarkPicker)
    folder = form.editors["benchmark_dir"]
    assert isinstance(folder, FolderEdit) and folder.browse_btn.text() == "Browse…"
    form.set_values({"benchmarks": ["arc_easy", "mmlu"], "benchmark_dir": str(tmp_path), "benchmark_limit": 50})
    spec = form.spec()
    assert spec.benchmarks == ["arc_easy", "mmlu"] and spec.benchmark_dir == str(tmp_path)
    assert spec.benchmark_limit == 50 and not form.validate()
    # a benchmark alone is something to evaluate; nothing at all is refused in words
    form.set_values({"benchmarks": []})
    assert any("nothing to evaluate" in p for p in form.validate())


def _saved(folder: Path, name: str, metrics: dict) -> None:
    folder.mkdir(parents=True)
    (folder / "model_spec.json").write_text("{}", encoding="utf-8")
    record = {"model": str(folder), "name": name, "kind": "export", "checkpoint": str(folder), "step": None,
              "measured_at": "2026-11-27T10:00:00", "seconds": 1.0, "spec": {}, "metrics": metrics}
    (folder / RESULTS_FILE).write_text(json.dumps({"format_version": 1, "results": [record]}), encoding="utf-8")


BASE = {"bench/arc_easy/acc": 0.5, "bench/arc_easy/acc/stderr": 0.0125, "bench/arc_easy/acc_norm": 0.45,
        "bench/arc_easy/acc_norm/stderr": 0.01, "bench/arc_easy/items": 2376, "bench/arc_easy/fewshot": 0,
        "bench/gsm8k/exact_match[strict-match]": 0.1, "bench/gsm8k/exact_match[strict-match]/stderr": None,
        "bench/gsm8k/items": 1319, "bench/gsm8k/fewshot": 5, "benchmark_harness": "lm_eval 0.4.13"}


def test_saved_benchmark_results_show_value_stderr_and_the_difference_against_the_first_model(window, tmp_path):
    from desktop_app.ui.widgets.evaluate_view import EvaluateView

    base, tuned = tmp_path / "base-model", tmp_path / "tuned-model"
    _saved(base, "base-model", BASE)
    _saved(tuned, "tuned-model", {**BASE, "bench/arc_easy/acc": 0.4, "bench/gsm8k/exact_match[strict-match]": 0.25})
    view = EvaluateView(window.ctx, [str(base), str(tuned)])
    headers = _headers(view)
    # one column per task and metric; standard errors, items and few-shot counts are in the cells, not columns
    assert headers == ["model", "arc_easy acc", "arc_easy acc_norm", "gsm8k exact_match[strict-match]"]
    assert view.table.rowCount() == 3  # the two models, and the tuned one against the first
    assert _cell(view, 0, "arc_easy acc") == "0.500 ± 0.013"
    assert _cell(view, 0, "gsm8k exact_match[strict-match]") == "0.100"  # no standard error given: the value only
    tip = view.table.item(0, headers.index("arc_easy acc")).toolTip()
    assert "2,376 items" in tip and "0-shot" in tip and "lm_eval 0.4.13" in tip
    assert _cell(view, 2, "model") == "tuned-model: Δ vs base-model"
    assert _cell(view, 2, "arc_easy acc") == "−0.1" and _cell(view, 2, "gsm8k exact_match[strict-match]") == "+0.15"
    assert _cell(view, 2, "arc_easy acc_norm") == "0"  # unchanged
    assert view.plotted(view_columns(view)) == ["bench/arc_easy/acc", "bench/arc_easy/acc_norm",
                                                "bench/gsm8k/exact_match[strict-match]"]
    view.deleteLater()


def view_columns(view) -> list[str]:
    from desktop_app.ui.widgets.evaluate_view import columns_of

    return columns_of(view.rows)


def test_without_the_harness_the_section_says_one_sentence_and_the_rest_works(window, monkeypatch, populated_workspace):
    import sys

    from desktop_app.ui.widgets.evaluate_view import EvaluateView

    monkeypatch.setitem(sys.modules, "lm_eval", None)  # import lm_eval fails, as in the default install
    monkeypatch.setitem(sys.modules, "lm_eval.tasks", None)
    view = EvaluateView(window.ctx, [str(populated_workspace.folder("runs") / "tiny-run")])
    picker = view.form.editors["benchmarks"]
    sentence = picker.state_note.text()
    assert "azr-model-trainer[benchmarks]" in sentence and sentence.count(".") <= 2
    assert picker.search.isHidden() and picker.list.isHidden() and picker.fetch_btn.isHidden()
    assert not window.ctx.errors
    # the rest of the view works: its other evaluations are offered and validate
    view.form.set_values({"world": "mini", "per_type": 2})
    assert not view.form.validate() and view.run_btn.isEnabled()
    view.deleteLater()


@needs_harness
def test_the_task_folder_s_tasks_are_found_and_their_local_data_shown(window, qtbot):
    from desktop_app.ui.widgets.evaluate_view import EvaluateView

    view = EvaluateView(window.ctx, [])
    picker = view.form.editors["benchmarks"]
    view.form.set_values({"benchmark_dir": str(TASKS)})
    qtbot.keyClicks(picker.search, "azr_tiny")
    qtbot.waitUntil(lambda: bool(picker.names), timeout=120000)
    assert {"azr_tiny", "azr_tiny_mc", "azr_tiny_gen"} <= set(_rows(picker))
    _tick(picker, "azr_tiny_mc")
    assert view.form.spec().benchmarks == ["azr_tiny_mc"]
    qtbot.waitUntil(lambda: "azr_tiny_mc" in picker.states, timeout=120000)
    assert picker.states["azr_tiny_mc"] == "local" and "local data files" in _rows(picker)["azr_tiny_mc"]
    assert not picker.fetch_btn.isEnabled() and not window.ctx.errors
    qtbot.waitUntil(lambda: not window.ctx.runner.running_kinds(), timeout=60000)
    view.deleteLater()


@needs_harness
def test_fetch_data_shows_download_progress_and_the_benchmark_is_then_ready(window, qtbot, hub_server, tmp_path,
                                                                            monkeypatch):
    pytest.importorskip("datasets")
    from hub_datasets import TINY_ARC, tiny_arc_files, use_datasets_library, write_tiny_arc_tasks

    from desktop_app.ui.widgets.evaluate_view import EvaluateView

    use_datasets_library(hub_server, tmp_path / "datasets-cache", monkeypatch)
    hub_server.add_dataset(TINY_ARC, tiny_arc_files())
    folder = str(write_tiny_arc_tasks(tmp_path / "tasks"))
    view = EvaluateView(window.ctx, [])
    picker = view.form.editors["benchmarks"]
    view.form.set_values({"benchmark_dir": folder, "benchmarks": ["tiny_arc_easy"]})
    qtbot.waitUntil(lambda: "tiny_arc_easy" in picker.states, timeout=120000)
    assert picker.states["tiny_arc_easy"] == "missing" and picker.fetch_btn.isEnabled()
    assert not hub_server.fetched("Easy/test.jsonl")  # nothing is fetched before the person asks
    picker.fetch_btn.click()
    assert not picker.bar.isHidden() and not picker.cancel_btn.isHidden() and not picker.fetch_btn.isEnabled()
    qtbot.waitUntil(lambda: not view.benchmarks.fetching(), timeout=120000)
    assert not window.ctx.errors, window.ctx.errors
    assert "tiny_arc_easy is here" in picker.fetch_note.text() and picker.bar.value() == 1000
    qtbot.waitUntil(lambda: picker.states.get("tiny_arc_easy") == "ready", timeout=60000)
    assert not picker.fetch_btn.isEnabled() and picker.cancel_btn.isHidden()
    assert hub_server.fetched("Easy/test.jsonl") and not hub_server.fetched("Hard/test.jsonl")
    qtbot.waitUntil(lambda: not window.ctx.runner.running_kinds(), timeout=60000)
    view.deleteLater()


@needs_harness
def test_a_benchmark_evaluated_in_the_view_shows_value_and_stderr_and_again_later(window, populated_workspace,
                                                                                  qtbot):
    window.ctx.workspace_items_changed.emit()
    run = populated_workspace.folder("runs") / "tiny-run"
    lib = window.library_tab
    assert lib.select(str(run))
    view = lib.open_evaluate().view
    view.form.set_values({"world": "none", "text": [], "qa": "", "benchmarks": ["azr_tiny_mc"],
                          "benchmark_dir": str(TASKS), "benchmark_limit": 6, "benchmark_fewshot": 0})
    assert view.start()
    qtbot.waitUntil(lambda: not view.running(), timeout=300000)
    assert not window.ctx.errors, window.ctx.errors
    assert view.table.rowCount() == 1 and "azr_tiny_mc acc" in _headers(view)
    value, stderr = (float(x) for x in _cell(view, 0, "azr_tiny_mc acc").split(" ± "))
    assert 0.0 <= value <= 1.0 and stderr >= 0.0  # a tiny model may score 0 of 6: a standard error of 0
    assert "6 items" in view.table.item(0, _headers(view).index("azr_tiny_mc acc")).toolTip()
    lib.evaluate_dialog.close()
    again = lib.open_evaluate().view  # later: shown from the run's evaluations file, nothing run
    assert _cell(again, 0, "azr_tiny_mc acc") == f"{value:.3f} ± {stderr:.3f}" and not again.running()
    qtbot.waitUntil(lambda: not window.ctx.runner.running_kinds(), timeout=60000)
    lib.evaluate_dialog.close()
