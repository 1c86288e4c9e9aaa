"""Issue 51 item 8, the small things a new user met, each as the window shows it: a name with "&" in a check box,
a run's end said once, an axis label never cut, whole steps on the step axis."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QKeySequence


def test_weights_and_biases_reads_as_written(window):
    check = window.train_tab.setup.form.editors["trackers"].checks["wandb"]
    assert check.text().replace("&&", "&").startswith("Weights & Biases")
    assert QKeySequence.mnemonic(check.text()).isEmpty()  # no "&" read as a shortcut: not "Weights _Biases"


def test_a_runs_end_is_said_once(window):
    from desktop_app.engine.events import Finished

    view = window.train_tab.run_view
    view.show(Finished("stopped", step=27, message="stopped at step 27"))
    last = view.log_view.toPlainText().splitlines()[-1]
    assert last.endswith("finished: stopped at step 27"), last
    view.show(Finished("stopped", step=3, message="stopped at step 3 without saving it: step 2 was kept"))
    last = view.log_view.toPlainText().splitlines()[-1]
    assert last.endswith("finished: stopped at step 3 — without saving it: step 2 was kept"), last


def test_a_long_axis_label_moves_after_the_title_rather_than_being_cut(qtbot):
    from desktop_app.ui.widgets.live_plot import LivePlots

    plots = LivePlots()
    qtbot.addWidget(plots)
    plots.resize(700, 260)
    plots.show()
    for step in (1, 2, 3):
        plots.add_metrics(step, {"mfu": 0.1 * step, "loss": 3.0 / step})
    plots.flush()
    panel = plots.panels["mfu"]
    panel.resize(300, 105)  # a short panel: the plot is lower than "share of peak" is long
    qtbot.waitUntil(lambda: not panel.getAxis("left").label.isVisible())
    assert panel.getPlotItem().titleLabel.text == "Model FLOPs utilisation · share of peak"
    panel.resize(300, 400)  # tall enough again: beside the axis, the title plain
    qtbot.waitUntil(lambda: panel.getAxis("left").label.isVisible())
    assert panel.getPlotItem().titleLabel.text == "Model FLOPs utilisation"
    plots.stop_timers()


def test_the_step_axis_shows_whole_steps(qtbot):
    from desktop_app.ui.widgets.live_plot import LivePlots

    plots = LivePlots()
    qtbot.addWidget(plots)
    plots.add_metrics(1, {"loss": 2.0})
    plots.add_metrics(2, {"loss": 1.5})
    plots.flush()
    axis = plots.panels["loss"].getAxis("bottom")
    ticks = [v for _spacing, values in axis.tickValues(0.8, 2.2, 400) for v in values]
    assert ticks and all(float(v).is_integer() for v in ticks), ticks
    plots.stop_timers()


def test_watch_live_only_for_a_run_training_now_and_rename_only_for_one_item(window, workspace):
    import json

    live, done = workspace.folder("runs") / "cli-run", workspace.folder("runs") / "ended-run"
    for run in (live, done):
        run.mkdir(parents=True)
        (run / "metrics.jsonl").write_text(json.dumps({"type": "step", "step": 1, "loss": 2.0}) + "\n")
    with open(done / "metrics.jsonl", "a", encoding="utf-8") as fh:
        fh.write(json.dumps({"type": "finished", "reason": "completed", "step": 1}) + "\n")
    library = window.library_tab
    window.ctx.workspace_items_changed.emit()
    assert library.select(str(live)) and library.watch_btn.isEnabled() and library.rename_btn.isEnabled()
    assert library.select(str(done)) and not library.watch_btn.isEnabled()  # it ended: nothing to watch
    flags = Qt.MatchFlag.MatchContains | Qt.MatchFlag.MatchRecursive
    for item in library.tree.findItems("", flags):
        if item.data(0, Qt.ItemDataRole.UserRole) in (str(live), str(done)):
            item.setSelected(True)
    assert not library.rename_btn.isEnabled() and library.delete_btn.isEnabled()  # two rows: no one name for both
    assert library.compare_btn.isEnabled()


def test_the_toolbars_stop_is_enabled_only_while_something_runs(window, qtbot):
    import threading

    from desktop_app.engine.events import Controls

    assert not window.act_stop.isEnabled()  # nothing runs at start
    release = threading.Event()

    def waiting():
        release.wait(10)
        yield "done"

    task = window.ctx.runner.start("generate", waiting, Controls())
    qtbot.waitUntil(window.act_stop.isEnabled, timeout=5000)
    release.set()
    qtbot.waitUntil(lambda: not task.running, timeout=10000)
    qtbot.waitUntil(lambda: not window.act_stop.isEnabled(), timeout=5000)


def test_the_distributed_note_says_what_start_does_with_several_processes(window):
    from PySide6.QtWidgets import QLabel

    notes = [w.text() for w in window.train_tab.setup.dist_group.findChildren(QLabel) if "torchrun" in w.text()]
    assert notes and "uses one process" not in notes[0] and "Start launches the run under torchrun" in notes[0]


def test_the_librarys_size_column_is_filled_without_selecting_anything(window, populated_workspace):
    from desktop_app.ui.tabs.library_tab import SIZE

    window.ctx.workspace_items_changed.emit()
    flags = Qt.MatchFlag.MatchContains | Qt.MatchFlag.MatchRecursive
    ours = [i for i in window.library_tab.tree.findItems("", flags)
            if str(i.data(0, Qt.ItemDataRole.UserRole) or "").startswith(str(populated_workspace.root))]
    assert len(ours) > 1 and all(i.text(SIZE) for i in ours), [(i.text(0), i.text(SIZE)) for i in ours]
