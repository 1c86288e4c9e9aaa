"""Train tab → Search settings…: the settings a method may vary with its usual ranges, a bad range refused in words
with nothing started, a real tiny search run from the window (its table, history plot, Use the best settings, Open the
best run, the Library's grouping and Compare…), Stop mid-search, and a time budget (ui/sweep_jobs.py)."""

from __future__ import annotations

import math

import pytest
from ui_helpers import TINY

from desktop_app.engine.events import Controls, Finished
from desktop_app.engine.specs import RunConfig
from desktop_app.engine.sweep.events import TrialFinished, TrialStarted
from desktop_app.ui.sweep_jobs import sweep_job
from desktop_app.ui.sweep_rows import setting_rows
from desktop_app.ui.tabs.library_tab import KIND_ROLE, PATH_ROLE

pytest.importorskip("optuna")


def _tiny_search_form(window, workspace, steps=12, eval_every=4):
    """The Train tab set for a tiny pretraining run on the tiny dataset (each trial a second or two)."""
    tab = window.train_tab
    window.ctx.workspace_items_changed.emit()
    tab.setup.select_dataset(str(workspace.folder("datasets") / "tiny-data"))
    window.model_tab.set_spec(TINY)
    spec = tab.setup.form.spec().replace(steps=steps, batch_size=4, eval_every=eval_every, eval_batches=1,
                                         save_every=0, warmup_steps=1, sample_tokens=0, log_every=1, trackers=[],
                                         threads=1)
    tab.setup.form.set_spec(spec)
    return tab


def _only(dialog, *names):
    """Tick `names` alone."""
    for row, fields in zip(dialog.setup.rows, dialog.setup.fields, strict=True):
        fields.tick.setChecked(row.setting.name in names)


def test_the_dialog_lists_the_methods_settings_with_their_usual_ranges(window, populated_workspace, qtbot):
    tab = _tiny_search_form(window, populated_workspace, steps=50)
    tab.sweeps.button.click()
    dialog = tab.sweeps.dialog
    assert dialog is not None and dialog.isVisible()
    setup = dialog.setup
    names = [r.setting.name for r in setup.rows]
    # the method's usual ones first, ticked: pretraining's lr around its own default, warm-up up to a fifth of the
    # steps, weight decay, and the dropout of a model trained from scratch
    assert setup.ticked() == ["lr", "warmup_steps", "weight_decay", "dropout"] == names[:4]
    assert {"batch_size", "schedule", "beta2", "model.n_layers"} <= set(names) and "seed" not in names
    lr = setup.fields[0]
    assert (lr.low.text(), lr.high.text(), lr.log.isChecked()) == ("0.0001", "0.01", True)
    warmup = setup.fields[1]
    assert (warmup.low.text(), warmup.high.text(), warmup.log.isChecked()) == ("0", "10", False)
    rows = {r.setting.name: (r, f) for r, f in zip(setup.rows, setup.fields, strict=True)}
    schedule = rows["schedule"][1]
    assert schedule.choices.text() == "cosine, linear, constant" and not schedule.tick.isChecked()
    assert not schedule.choices.isEnabled()  # an unticked row's fields wait for its tick
    assert rows["lr"][0].label == "Learning rate" and rows["warmup_steps"][0].label == "Warm-up (steps)"
    assert setup.table.item(names.index("batch_size"), 1).text() == "4"  # what the Train tab's run has now
    metrics = [setup.metric_box.itemData(i)[0] for i in range(setup.metric_box.count())]
    assert metrics == ["val_loss", "val_ppl", "val_bpb"] and setup.better_label.text() == "val_loss, lower is better"
    tab.sweeps.open_dialog()  # the same window again, not a second one
    assert tab.sweeps.dialog is dialog
    dialog.close()


def test_rows_of_fine_tuning_methods():
    lora = RunConfig(base_model="/models/base", objective="sft", data=["chat.jsonl"], adapter={"kind": "lora"})
    rows = {r.setting.name: r for r in setting_rows(lora)}
    assert rows["lora_rank"].ticked and rows["lora_rank"].choices == "4, 8, 16, 32"
    assert rows["lora_alpha"].ticked and "dropout" not in rows  # no model spec: its base's
    dpo = RunConfig(base_model="/models/base", objective="dpo", data=["pairs.jsonl"])
    beta = {r.setting.name: r for r in setting_rows(dpo)}["beta"]
    assert beta.ticked and beta.log and beta.label


def test_a_bad_range_is_shown_in_words_and_nothing_starts(window, populated_workspace, qtbot):
    tab = _tiny_search_form(window, populated_workspace)
    dialog = tab.sweeps.open_dialog()
    _only(dialog, "lr")
    dialog.setup.set_range("lr", "0.01", "0.0001")
    assert not dialog.start()
    text = dialog.error.text()
    assert "Learning rate" in text and "empty" in text and "--vary" not in text
    assert "border" in dialog.setup.fields[0].low.styleSheet()  # the row at fault is outlined
    dialog.setup.set_range("lr", "0", "0.01", log=True)
    assert not dialog.start() and "log scale" in dialog.error.text()
    _only(dialog)
    assert not dialog.start() and "Tick at least one setting" in dialog.error.text()
    assert not window.ctx.runner.is_running("sweep") and dialog.view is None
    assert list(populated_workspace.folder("sweeps").iterdir()) == []  # nothing written
    dialog.close()


def test_a_tiny_search_runs_from_the_window(window, populated_workspace, qtbot):
    tab = _tiny_search_form(window, populated_workspace)
    dialog = tab.sweeps.open_dialog()
    _only(dialog, "lr", "dropout")
    dialog.setup.set_range("lr", "0.001", "0.1", log=True)
    dialog.setup.trials_box.setValue(3)
    dialog.setup.form.set_values({"sampler": "random"})
    assert dialog.start()
    view = dialog.view
    qtbot.waitUntil(lambda: not dialog.running, timeout=60000)
    assert view.finished is not None and view.finished.reason == "completed", view.result.text()
    assert view.table.rowCount() == 3
    states = [view.table.item(row, 4).text() for row in range(3)]
    assert set(states) <= {"complete", "pruned"} and "complete" in states
    assert all(view.table.item(row, 5).text() for row in range(3))  # each with its reason
    valued = sorted((t.number, t.value) for t in view.trials.values())
    assert sorted(view.plots.history_points()) == valued  # every trial's value on the optimisation history
    best = view.best
    assert best is not None and best["params"].keys() == {"train.lr", "model.dropout"}
    assert view.use_btn.isEnabled() and view.open_btn.isEnabled()
    # Use the best settings: the learning rate into the Train form, the dropout into the Model tab
    view.use_btn.click()
    assert math.isclose(tab.setup.form.spec().lr, best["params"]["train.lr"], rel_tol=1e-6)
    assert math.isclose(window.model_tab.form.spec().dropout, best["params"]["model.dropout"], rel_tol=1e-6)
    assert "Learning rate" in view.result.text() and "Model tab" in view.result.text()
    tab.setup.form.set_values({"steps": 13})  # the method's defaults no longer replace the chosen learning rate
    assert math.isclose(tab.setup.form.spec().lr, best["params"]["train.lr"], rel_tol=1e-6)
    # Open the best run: the Library, its trial runs under the sweep, the best one selected
    view.open_btn.click()
    lib = window.library_tab
    assert window.tabs.currentWidget() is lib and lib.selected_path() == best["run_dir"]
    sweep_item = lib.tree.currentItem().parent()
    assert sweep_item.data(0, KIND_ROLE) == "sweeps" and sweep_item.childCount() == 3
    assert sweep_item.parent().text(0) == "Sweeps (1)"
    assert "(best)" in lib.tree.currentItem().text(0)
    assert lib.select(sweep_item.data(0, PATH_ROLE)) and "Best trial" in lib.details.toPlainText()
    # Compare… takes trial runs selected together
    trials = [sweep_item.child(i) for i in range(2)]
    lib.tree.setCurrentItem(trials[0])
    trials[1].setSelected(True)
    assert lib.selected_runs() == [t.data(0, PATH_ROLE) for t in trials] and lib.compare_btn.isEnabled()
    lib.compare_btn.click()
    qtbot.waitUntil(lambda: lib.compare_dialog is not None, timeout=10000)
    qtbot.waitUntil(lambda: lib.compare_btn.isEnabled(), timeout=5000)
    assert not window.ctx.errors, window.ctx.errors
    dialog.close()


def test_stop_mid_search(window, populated_workspace, qtbot):
    tab = _tiny_search_form(window, populated_workspace, steps=400, eval_every=20)
    dialog = tab.sweeps.open_dialog()
    _only(dialog, "lr")
    dialog.setup.trials_box.setValue(20)
    assert dialog.start()
    view = dialog.view
    qtbot.waitUntil(lambda: "step" in view.progress.format(), timeout=60000)  # a trial is training
    assert not tab.start()  # no run of the Train tab beside the search
    assert [p.name for p in populated_workspace.folder("runs").iterdir()] == ["tiny-run"]
    dialog.close()  # the search goes on; Search settings… shows it again
    assert dialog.running and tab.sweeps.open_dialog() is dialog and dialog.isVisible()
    view.stop_btn.click()
    assert not view.stop_btn.isEnabled()
    qtbot.waitUntil(lambda: not dialog.running, timeout=60000)
    assert view.finished is not None and view.finished.reason == "stopped"
    assert view.table.item(0, 3).text() == "interrupted"  # it continues when the search is resumed
    assert not view.use_btn.isEnabled()  # no trial completed
    dialog.close()


class _FakeSweep:
    """Trials of a second each on a fake clock; stops between trials as the engine's sweep does."""

    def __init__(self, clock):
        self.clock = clock

    def events(self, controls, *, interactive):
        for number in range(10):
            if controls.stop.is_set():
                break
            yield TrialStarted(number)
            self.clock.now += 60
            yield TrialFinished(number, "complete", 1.0 / (number + 1))
        yield Finished("stopped" if controls.stop.is_set() else "completed", 0, "",
                       {"complete": number, "pruned": 0, "failed": 0, "steps": 0,
                        "best": {"number": number, "value": 0.5, "metric": "val_loss"}})


def test_a_time_budget_ends_the_search_after_the_running_trial():
    clock = type("Clock", (), {"now": 0.0})()
    events = list(sweep_job(_FakeSweep(clock), Controls(), budget_s=150, clock=lambda: clock.now))
    ended = [e.number for e in events if isinstance(e, TrialFinished)]
    assert ended == [0, 1, 2]  # the budget ran out during trial 2: it finished, no trial started after it
    assert events[-1].reason == "completed" and "time budget of 2.5 min" in events[-1].message
