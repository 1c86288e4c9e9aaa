"""The Evaluate view's errors (issue 51): a benchmark whose data is not here is told before any model loads, the
progress line stops saying a model is loading, and the red text (the evaluation's, or a failed fetch's) goes when
the person unticks the benchmark or a later evaluation starts and succeeds.

Runs without lm-evaluation-harness: its catalog (the names, their data state, each task's datasets) and its scoring
are stood in for; the view, the section, the picker and the engine's checks and runner are the app's own."""

from __future__ import annotations

import pytest
from patching import patch_everywhere
from PySide6.QtCore import Qt

from desktop_app.engine.errors import UserError
from desktop_app.engine.evaluate import benchmark_catalog, benchmark_data, benchmarks, runner
from desktop_app.engine.evaluate.benchmark_catalog import DatasetRef
from desktop_app.engine.events import Progress
from desktop_app.ui.widgets import benchmark_section
from desktop_app.ui.widgets.evaluate_view import CHECKING, IDLE, EvaluateView

HUB_DATASETS = {"hellaswag": "Rowan/hellaswag", "arc_easy": "allenai/ai2_arc"}
FETCH_FAILED = "the data of hellaswag cannot be fetched: the Hub does not offer Rowan/hellaswag"


@pytest.fixture
def harness(monkeypatch):
    """A stand-in harness: its tasks, the cache's state (`here`: the names whose data is fetched, none at first),
    a fetch that fails, and scoring that gives hellaswag a figure. Returns (here, the models the runner loaded)."""
    here: set[str] = set()
    loads: list[str] = []
    monkeypatch.setattr(benchmark_section, "harness_sentence", lambda: "")
    patch_everywhere(monkeypatch, benchmarks, "harness_missing", lambda: None)
    monkeypatch.setattr(benchmark_section, "task_names", lambda _dir="": sorted(HUB_DATASETS))
    monkeypatch.setattr(benchmark_section, "data_state",
                        lambda names, _dir="": {n: "ready" if n in here else "missing" for n in names})
    patch_everywhere(monkeypatch, benchmark_catalog, "check_names", lambda names, _dir="": list(names))
    patch_everywhere(monkeypatch, benchmark_catalog, "task_datasets",
                     lambda names, _dir="": [DatasetRef(HUB_DATASETS[n], None, [n]) for n in names])
    monkeypatch.setattr(benchmark_data, "dataset_ready", lambda ref: any(HUB_DATASETS[n] == ref.path for n in here))

    def fetch(_names, _dir="", _controls=None):
        raise UserError(FETCH_FAILED)
        yield  # a generator, as the engine's

    def score(_loaded, _spec, _controls=None, *, generation_batch=0):
        yield Progress("benchmarks", 1, 1, "requests", "")
        return {"bench/hellaswag/acc": 0.25, "bench/hellaswag/acc/stderr": 0.05}

    monkeypatch.setattr(benchmark_section, "fetch_benchmark_data", fetch)
    monkeypatch.setattr(runner, "run_benchmarks", score)
    load = runner.load_model
    monkeypatch.setattr(runner, "load_model", lambda path, **kw: (loads.append(path), load(path, **kw))[1])
    return here, loads


def _view(window, populated_workspace, qtbot) -> EvaluateView:
    """The view on the tiny run, hellaswag ticked (its data missing), nothing else to evaluate."""
    window.ctx.workspace_items_changed.emit()
    view = EvaluateView(window.ctx, [str(populated_workspace.folder("runs") / "tiny-run")])
    view.form.set_values({"world": "none", "text": [], "qa": "", "benchmarks": ["hellaswag"]})
    picker = view.form.editors["benchmarks"]
    qtbot.waitUntil(lambda: picker.states.get("hellaswag") == "missing", timeout=60000)
    qtbot.waitUntil(lambda: not window.ctx.runner.running_kinds(), timeout=60000)
    return view


def _set_ticked(view: EvaluateView, name: str, on: bool) -> None:
    picker = view.form.editors["benchmarks"]
    item = next(picker.list.item(i) for i in range(picker.list.count())
                if picker.list.item(i).data(Qt.ItemDataRole.UserRole) == name)
    item.setCheckState(Qt.CheckState.Checked if on else Qt.CheckState.Unchecked)


def _evaluate(view: EvaluateView, qtbot) -> None:
    assert view.start()
    assert view.progress.format() == CHECKING  # the data is checked first: no model is said to load yet
    qtbot.waitUntil(lambda: not view.running(), timeout=120000)


def test_missing_data_is_told_before_a_model_loads_and_the_red_line_goes_on_untick_and_success(
        window, populated_workspace, qtbot, harness):
    here, loads = harness
    view = _view(window, populated_workspace, qtbot)
    _evaluate(view, qtbot)
    message = window.ctx.errors[-1][0]
    assert message.startswith("the data of hellaswag is not on this computer yet: fetch it first with Fetch data")
    assert loads == []  # nothing loaded for an evaluation that cannot run
    assert "loading" not in view.progress.format() and view.progress.format().startswith("not evaluated")
    assert view.error.text() == message and not view.error.isHidden()
    _set_ticked(view, "hellaswag", False)  # the person changes the selection: the error is about nothing now
    assert view.error.text() == "" and view.error.isHidden() and view.progress.format() == IDLE
    _set_ticked(view, "hellaswag", True)
    qtbot.waitUntil(lambda: not window.ctx.runner.running_kinds(), timeout=60000)
    _evaluate(view, qtbot)
    assert view.error.text() == message and loads == []
    here.add("hellaswag")  # fetched meanwhile (elsewhere): the same selection evaluates now
    assert view.start()
    assert view.error.isHidden() and view.error.text() == ""  # gone as the new evaluation starts
    qtbot.waitUntil(lambda: not view.running(), timeout=120000)
    assert len(window.ctx.errors) == 2 and view.error.isHidden()
    assert loads == [str(populated_workspace.folder("runs") / "tiny-run")] and view.progress.value() == 1000
    assert view.table.rowCount() == 1
    view.deleteLater()


def test_a_failed_fetch_s_red_line_goes_when_unticked_and_when_a_later_evaluation_succeeds(
        window, populated_workspace, qtbot, harness):
    here, _ = harness
    view = _view(window, populated_workspace, qtbot)
    picker = view.form.editors["benchmarks"]

    def fetch_fails() -> None:
        assert picker.fetch_btn.isEnabled()
        picker.fetch_btn.click()
        qtbot.waitUntil(lambda: not view.benchmarks.fetching(), timeout=60000)
        qtbot.waitUntil(lambda: not window.ctx.runner.running_kinds(), timeout=60000)
        assert picker.fetch_note.text() == FETCH_FAILED and picker.fetch_note.property("role") == "error"

    fetch_fails()
    _set_ticked(view, "hellaswag", False)
    assert picker.fetch_note.text() == "" and picker.fetch_note.property("role") != "error"
    _set_ticked(view, "hellaswag", True)
    qtbot.waitUntil(lambda: not window.ctx.runner.running_kinds(), timeout=60000)
    fetch_fails()
    here.add("hellaswag")
    _evaluate(view, qtbot)
    assert picker.fetch_note.text() == "" and view.progress.value() == 1000
    assert [m for m, _ in window.ctx.errors] == [FETCH_FAILED, FETCH_FAILED]
    view.deleteLater()
