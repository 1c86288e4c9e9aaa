"""The Evaluate view (Library → Evaluate…): pick models and evaluations, run in the background with a progress bar,
read one table and a bar plot; results kept in the run folder and shown again when the view opens later."""

from __future__ import annotations

import json

from PySide6.QtCore import Qt

from desktop_app.engine.evaluate.results import RESULTS_FILE


def _ready(window, populated_workspace):
    window.ctx.workspace_items_changed.emit()
    return populated_workspace.folder("runs") / "tiny-run"


def _cell(view, row: int, header: str) -> str:
    return view.table.item(row, _keys(view).index(header)).text()


def _keys(view) -> list[str]:
    """The columns' figures by the name results files use (each header's tooltip; its text is in words)."""
    return ["model"] + [view.table.horizontalHeaderItem(c).toolTip() for c in range(1, view.table.columnCount())]


def test_evaluate_a_library_run_and_see_it_again_later(window, populated_workspace, qtbot):
    run = _ready(window, populated_workspace)
    lib = window.library_tab
    assert lib.select(str(run)) and lib.evaluate_btn.isEnabled()
    dialog = lib.open_evaluate()
    view = dialog.view
    assert view.checked_models() == [str(run)] and view.table.rowCount() == 0  # never measured yet
    view.form.set_values({"world": "mini", "per_type": 4, "task_types": ["deduction", "abduction"],
                          "text": [str(populated_workspace.folder("datasets") / "tiny-data")],
                          "max_text_bytes": 800})
    assert view.start()
    assert not view.run_btn.isEnabled() and view.stop_btn.isEnabled()
    qtbot.waitUntil(lambda: not view.running(), timeout=120000)
    assert not window.ctx.errors, window.ctx.errors
    assert view.table.rowCount() == 1 and view.progress.value() == 1000
    rate = float(_cell(view, 0, "solve_rate/deduction").split()[0])
    assert 0.0 <= rate <= 1.0 and "(" in _cell(view, 0, "solve_rate/deduction")  # with its 95% interval
    assert float(_cell(view, 0, "bits_per_byte")) > 0
    assert view.plotted(["solve_rate/deduction", "solve_rate/abduction", "bits_per_byte"]) == [
        "solve_rate/deduction", "solve_rate/abduction"]
    saved = json.loads((run / RESULTS_FILE).read_text(encoding="utf-8"))["results"]
    assert saved[-1]["metrics"]["solve_rate/deduction"] == rate
    dialog.close()
    # later: the view shows what was measured, without running anything
    again = lib.open_evaluate().view
    assert again.table.rowCount() == 1 and float(_cell(again, 0, "solve_rate/deduction").split()[0]) == rate
    # unticking the model empties the table; evaluating nothing is refused with a message
    again.model_list.item(next(i for i in range(again.model_list.count())
                               if again.model_list.item(i).data(Qt.ItemDataRole.UserRole) == str(run))
                          ).setCheckState(Qt.CheckState.Unchecked)
    assert again.table.rowCount() == 0
    assert not again.start() and "at least one model" in window.ctx.errors[-1][0]
    lib.evaluate_dialog.close()


def test_bad_evaluation_settings_are_shown_and_nothing_runs(window, populated_workspace, qtbot):
    run = _ready(window, populated_workspace)
    view = window.library_tab.open_evaluate().view if window.library_tab.select(str(run)) else None
    view.form.set_values({"world": "none", "qa": "", "text": []})
    assert not view.start()
    assert "nothing to evaluate" in view.form.problems.text() and not view.running()
    assert not (run / RESULTS_FILE).exists()
    window.library_tab.evaluate_dialog.close()


OWN_TEMPLATE = ("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}<|end|>{% endfor %}"
                "{% if add_generation_prompt %}[assistant] {% endif %}")


def _bars(view) -> list:
    from desktop_app.ui.widgets.live_plot import pg

    return [i for i in view.plot.getPlotItem().items if isinstance(i, pg().BarGraphItem)]


def _tick(view, path, on: bool) -> None:
    for i in range(view.model_list.count()):
        item = view.model_list.item(i)
        if item.data(Qt.ItemDataRole.UserRole) == str(path):
            item.setCheckState(Qt.CheckState.Checked if on else Qt.CheckState.Unchecked)
            return
    view.add_model(str(path), checked=False)  # not in the Library: as "Add folder…" adds it, then ticked
    _tick(view, path, on)


def _chat_base(folder):
    """A base with a chat template of its own: its tokenizer files (the defaults read no weights)."""
    from desktop_app.engine.data.tokenization import hf_tokenizer, train_tokenizer

    tok = hf_tokenizer(train_tokenizer(["the cat sat on the mat. hello there"] * 20, "byte-bpe", 300))
    tok.chat_template = OWN_TEMPLATE
    tok.save_pretrained(folder)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    return folder


def test_a_pretraining_run_is_offered_and_measured_by_perplexity_on_its_validation_split(
        window, populated_workspace, qtbot):
    run = _ready(window, populated_workspace)
    lib = window.library_tab
    assert lib.select(str(run))
    view = lib.open_evaluate().view
    dataset = json.loads((run / "run.json").read_text(encoding="utf-8"))["dataset"]
    shown = view.form.values()
    assert shown["world"] == "none" and shown["text"] == [dataset]  # no task world for a text model
    assert "language model" in view.note.text() and "validation split" in view.note.text()
    view.form.set_values({"max_text_bytes": 3000})
    assert view.start()
    qtbot.waitUntil(lambda: not view.running(), timeout=120000)
    assert not window.ctx.errors, window.ctx.errors
    headers = _keys(view)
    assert "bits_per_byte" in headers and "perplexity" in headers
    words = [view.table.horizontalHeaderItem(c).text() for c in range(view.table.columnCount())]
    assert "bits per byte" in words and "bits_per_byte" not in words  # words a person reads
    assert not any(h.startswith(("solve_rate", "pass@", "qa_")) for h in headers)
    bpb = float(_cell(view, 0, "bits_per_byte"))
    bars = _bars(view)  # one bar: the measured bits per byte; no task-world bars of height 0
    assert bpb > 0 and len(bars) == 1 and [round(float(h), 3) for h in bars[0].opts["height"]] == [round(bpb, 3)]
    saved = json.loads((run / RESULTS_FILE).read_text(encoding="utf-8"))["results"][-1]
    assert saved["spec"]["text"] == [dataset] and saved["metrics"]["text_documents"] >= 1
    lib.evaluate_dialog.close()


def test_the_defaults_follow_the_ticked_model_and_keep_what_the_person_changed(
        window, populated_workspace, qtbot, tmp_path):
    from desktop_app.engine.specs import RunConfig

    run = _ready(window, populated_workspace)
    dataset = json.loads((run / "run.json").read_text(encoding="utf-8"))["dataset"]
    selfplay = tmp_path / "selfplay-run"
    selfplay.mkdir()
    RunConfig(objective="selfplay", base_model=str(run),
              method_options={"world": "python", "task_types": ["deduction"]}).save(selfplay / "run.json")
    assert window.library_tab.select(str(run))
    view = window.library_tab.open_evaluate().view
    assert view.form.values()["text"] == [dataset]
    _tick(view, selfplay, True)
    _tick(view, run, False)  # the self-play run alone: its task world and types, no text
    shown = view.form.values()
    assert (shown["world"], shown["task_types"], shown["text"]) == ("python", ["deduction"], [])
    assert "self-play model" in view.note.text()
    view.form.editors["world"].setCurrentText("mini")  # the person's choice
    _tick(view, selfplay, False)
    _tick(view, run, True)  # back to the pretraining run: its text again, the chosen world kept
    shown = view.form.values()
    assert shown["world"] == "mini" and shown["text"] == [dataset] and len(shown["task_types"]) == 3
    window.library_tab.evaluate_dialog.close()


def test_a_chat_model_given_a_question_file_is_asked_its_questions_by_contains(window, workspace, tmp_path):
    from desktop_app.ui.widgets.evaluate_view import EvaluateView

    chat = _chat_base(workspace.folder("models") / "instruct")
    view = EvaluateView(window.ctx, [str(chat)])
    shown = view.form.values()
    assert shown["world"] == "auto" and shown["qa_match"] == "contains" and "chat model" in view.note.text()
    questions = tmp_path / "qa.jsonl"
    questions.write_text('{"question": "Capital of France?", "answer": "Paris"}\n')
    view.form.set_values({"qa": str(questions)})  # a question file given: its questions instead of a task world
    shown = view.form.values()
    assert shown["world"] == "none" and shown["qa"] == str(questions) and shown["qa_match"] == "contains"
    assert not view.form.validate()
    view.deleteLater()


def test_a_measure_a_model_was_not_given_draws_no_bar(window):
    from desktop_app.ui.widgets.evaluate_view import EvaluateView

    view = EvaluateView(window.ctx, [])
    view.rows = {"a": {"solve_rate/deduction": 0.25, "solve_rate/abduction": 0.5, "qa_accuracy": 1.0,
                       "qa_match": "contains"},
                 "b": {"bits_per_byte": 1.5},  # measured on text only
                 "c": {"solve_rate/deduction": 0.75}}  # one type only
    view.names = {"a": "a", "b": "b", "c": "c"}
    view.render()
    bars = {b.opts["name"]: [float(h) for h in b.opts["height"]] for b in _bars(view)}
    assert bars == {"a": [0.25, 0.5], "c": [0.75]}  # b has no solve rates: no bars of height 0 for it
    headers = [view.table.horizontalHeaderItem(c).text() for c in range(view.table.columnCount())]
    assert "questions right (contains)" in headers and "deduction solved" in headers  # which match counted them
    view.deleteLater()


def _tree_items(lib) -> list:
    from PySide6.QtWidgets import QTreeWidgetItemIterator

    found, walker = [], QTreeWidgetItemIterator(lib.tree)
    while walker.value() is not None:
        found.append(walker.value())
        walker += 1
    return found


def test_evaluate_takes_every_selected_model_and_offers_the_cached_hub_models(window, populated_workspace, hub_server,
                                                                                capsys):
    """A run and a model pulled from the Hub, both selected in the Library: Evaluate ticks both; every model the
    Library shows is offered (the Hub's cached ones too), unticked unless selected."""
    from desktop_app.cli import main

    assert main(["models", "pull", "tiny-org/tiny-chat"]) == 0, capsys.readouterr().err
    snapshot = capsys.readouterr().out.strip().splitlines()[-1]
    run = _ready(window, populated_workspace)
    lib = window.library_tab
    lib.refresh()
    wanted = {str(run), snapshot}
    items = [i for i in _tree_items(lib) if i.data(0, Qt.ItemDataRole.UserRole) in wanted]
    assert len(items) == 2, [i.text(0) for i in _tree_items(lib)]
    lib.tree.setCurrentItem(items[0])
    for item in items:
        item.setSelected(True)
    view = lib.open_evaluate().view
    assert sorted(view.checked_models()) == sorted(wanted)
    offered = [view.model_list.item(i).data(Qt.ItemDataRole.UserRole) for i in range(view.model_list.count())]
    assert snapshot in offered and len(offered) == len(set(offered))
    lib.tree.clearSelection()
    lib.tree.setCurrentItem(items[0])
    items[0].setSelected(True)
    lib.evaluate_dialog.close()
    alone = lib.open_evaluate().view
    assert alone.checked_models() == [str(run)] and snapshot in [
        alone.model_list.item(i).data(Qt.ItemDataRole.UserRole) for i in range(alone.model_list.count())]
    lib.evaluate_dialog.close()
