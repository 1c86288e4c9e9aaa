"""Train tab: plots (any scalar, NaN, 100k points, exports), start/pause/stop/save-now/resume, history,
the first-launch path, closing during training, and a generous responsiveness guard."""

from __future__ import annotations

import csv
import json
import math
import time

import pytest
from PySide6.QtCore import QTimer
from ui_helpers import TINY

from desktop_app.ui.widgets.live_plot import LivePlots


def _tiny_train_settings(tab, steps=400, **kw):
    spec = tab.setup.form.spec().replace(steps=steps, batch_size=4, eval_every=5, eval_batches=1, save_every=0,
                                   warmup_steps=2, sample_tokens=4, log_every=1, **kw)
    tab.setup.form.set_spec(spec)


def test_live_plots_any_scalar_nan_and_exports(qtbot, tmp_path):
    plots = LivePlots()
    qtbot.addWidget(plots)
    for step in range(1, 101):
        plots.add_metrics(step, {"loss": 5.0 / step, "lr": 1e-3, "reward": step * 0.1, "flag": True})
    plots.add_metrics(101, {"loss": float("nan")})
    plots.add_metrics(102, {"loss": float("inf")})
    plots.flush()
    assert "reward" in plots.panels  # a metric nobody planned for gets its own panel
    assert "flag" not in plots.series  # booleans are not curves
    x, y = plots.curves["loss"].getData()
    assert len(x) == 102 and math.isnan(y[-1]) and math.isnan(y[-2])
    sx, sy = plots.curves["loss~smoothed"].getData()
    assert len(sx) == 102 and sy[0] == 5.0 and 0 < sy[50] < 5
    plots.set_log_y(True)
    assert plots.panels["loss"].getPlotItem().ctrl.logYCheck.isChecked()
    orig = plots.curves["loss"].getOriginalDataset()
    assert orig[1][0] == 5.0  # originals kept; log10 only for display
    plots.set_smoothing(0.0)
    _, sy = plots.curves["loss~smoothed"].getOriginalDataset()
    assert sy[1] == 2.5
    png = tmp_path / "p.png"
    plots.export_png(png)
    assert png.stat().st_size > 1000
    out = tmp_path / "m.csv"
    plots.export_csv(out)
    rows = list(csv.reader(out.open()))
    assert rows[0] == ["step", "loss", "lr", "reward"]
    assert rows[1][:2] == ["1", "5.0"] and len(rows) == 103
    plots.stop_timers()


def test_live_plots_take_100k_points(qtbot):
    plots = LivePlots()
    qtbot.addWidget(plots)
    plots.resize(800, 500)
    plots.show()
    for step in range(100_000):
        plots.add_point("loss", step, 3 + math.sin(step / 50))
    plots.flush()
    assert plots.point_count("loss") == 100_000
    assert plots.series["loss"].x.shape[0] >= 100_000  # grown by doubling
    plots.stop_timers()


def test_invalid_hyperparameters_are_refused(window):
    tab = window.train_tab
    tab.setup.form.editors["micro_batch_size"].setValue(5)  # batch 16 is not a multiple of 5
    assert not tab.start()
    assert "micro_batch_size" in window.ctx.errors[-1][0] or "multiple" in window.ctx.errors[-1][0]
    assert not tab.running


def test_history_replay_from_metrics_jsonl(window, populated_workspace, qtbot):
    run = populated_workspace.folder("runs") / "tiny-run"
    window.train_tab.show_run_history(str(run))
    qtbot.waitUntil(lambda: window.train_tab.run_view.plots.point_count("loss") == 6, timeout=10000)
    assert window.train_tab.run_view.plots.point_count("val_loss") >= 1
    assert "history" in window.train_tab.run_view.progress.format()
    qtbot.waitUntil(lambda: not window.ctx.runner.is_running("history"), timeout=5000)


def test_train_pause_save_now_stop_resume(window, populated_workspace, qtbot):
    tab = window.train_tab
    window.ctx.workspace_items_changed.emit()
    tab.setup.select_dataset(str(populated_workspace.folder("datasets") / "tiny-data"))
    window.model_tab.set_spec(TINY)
    _tiny_train_settings(tab)
    assert tab.start()
    assert window.act_pause.isEnabled() and not tab.start_btn.isEnabled()
    qtbot.waitUntil(lambda: tab.steps_seen >= 3, timeout=60000)
    tab.toggle_pause()
    assert tab.pause_btn.text() == "Resume"
    time.sleep(0.3)
    qtbot.wait(300)  # queued events drain
    paused_at = tab.steps_seen
    qtbot.wait(600)
    assert tab.steps_seen <= paused_at + 1  # at most the step in flight
    tab.save_now()
    tab.toggle_pause()
    with qtbot.waitSignal(tab.checkpoint_saved, timeout=30000):
        pass
    tab.stop()
    qtbot.waitUntil(lambda: not tab.running, timeout=60000)
    assert tab.run_view.last_finished.reason == "stopped"
    assert tab.run_view.next_bar.isVisibleTo(tab)  # the job is over: chat with it, export it, fine-tune it
    run = tab.run_dir
    stopped_step = tab.run_view.last_finished.step
    assert (run / "run.json").exists()
    assert "--config" in tab.cli_command() and str(run) in tab.cli_command()
    # resume continues from the checkpoint saved at stop
    assert tab.resume_run(run)
    qtbot.waitUntil(lambda: tab.steps_seen >= 2, timeout=60000)
    tab.stop()
    qtbot.waitUntil(lambda: not tab.running, timeout=60000)
    assert tab.run_view.last_finished.step > stopped_step
    assert not window.ctx.errors, window.ctx.errors


def test_first_launch_quick_start_uses_the_sample_corpus(window, qtbot):
    tab = window.train_tab
    assert tab.setup.dataset_box.currentData() == ""  # empty workspace: sample corpus, prepared automatically
    window.quick_start()
    assert window.tabs.currentWidget() is tab
    assert tab.setup.form.spec().eval_every == 25
    qtbot.waitUntil(lambda: tab.run_view.plots.point_count("loss") >= 2, timeout=120000)
    tab.stop()
    qtbot.waitUntil(lambda: not tab.running, timeout=60000)
    datasets = window.ctx.workspace.items("datasets")
    assert datasets and (datasets[0] / "manifest.json").exists()
    assert tab.setup.dataset_box.currentData() == str(datasets[0])
    assert not window.ctx.errors, window.ctx.errors


def test_a_run_that_cannot_start_is_refused_before_anything_starts(window, qtbot, tmp_path):
    """The engine's session opens the run (plans it, fits the model to its dataset) when Start is pressed: a folder
    that is no dataset is said at once, and no run starts or is created."""
    tab = window.train_tab
    bogus = tmp_path / "not-a-dataset"
    bogus.mkdir()
    tab.setup.select_dataset(str(bogus))
    window.model_tab.set_spec(TINY)
    runs_before = set(window.ctx.workspace.folder("runs").iterdir())
    assert not tab.start() and not tab.running
    assert window.ctx.errors
    message, _details = window.ctx.errors[-1]
    assert "not-a-dataset" in message or "manifest" in message
    assert set(window.ctx.workspace.folder("runs").iterdir()) == runs_before


def test_close_during_training_asks_then_stops_saves_and_closes(window, populated_workspace, qtbot):
    tab = window.train_tab
    window.ctx.workspace_items_changed.emit()
    tab.setup.select_dataset(str(populated_workspace.folder("datasets") / "tiny-data"))
    window.model_tab.set_spec(TINY)
    _tiny_train_settings(tab, steps=5000)
    assert tab.start()
    qtbot.waitUntil(lambda: tab.steps_seen >= 2, timeout=60000)
    answers = [False]
    window.ctx.confirm = lambda *a, **k: answers.pop(0) if answers else True
    window.close()  # the user says "no": keep training
    assert window.isVisible() and tab.running
    window.close()  # now "yes"
    qtbot.waitUntil(lambda: not window.isVisible(), timeout=60000)
    assert not tab.running
    assert tab.run_view.last_finished.reason == "stopped"
    assert list((tab.run_dir / "checkpoints").glob("step-*/manifest.json"))


def test_gui_stays_responsive_during_training(window, populated_workspace, qtbot):
    """A probe timer measures event-loop stalls during a real training run (generous bound, noisy CI)."""
    tab = window.train_tab
    window.ctx.workspace_items_changed.emit()
    tab.setup.select_dataset(str(populated_workspace.folder("datasets") / "tiny-data"))
    window.model_tab.set_spec(TINY)
    _tiny_train_settings(tab, steps=5000)
    gaps: list[float] = []
    last = [time.perf_counter()]

    def probe():
        now = time.perf_counter()
        gaps.append(now - last[0])
        last[0] = now

    timer = QTimer()
    timer.setInterval(10)
    timer.timeout.connect(probe)
    assert tab.start()
    qtbot.waitUntil(lambda: tab.steps_seen >= 3, timeout=60000)  # model built, loop running
    last[0] = time.perf_counter()
    timer.start()
    qtbot.wait(2500)
    timer.stop()
    tab.stop()
    qtbot.waitUntil(lambda: not tab.running, timeout=60000)
    assert len(gaps) > 20
    assert max(gaps) < 0.5, f"event loop stalled {max(gaps) * 1000:.0f} ms"


@pytest.mark.parametrize("records", [[{"type": "step", "step": 1, "loss": 2.0, "reward": 0.5}]])
def test_replay_plots_unknown_scalars(window, tmp_path, records, qtbot):
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("\n".join(json.dumps(r) for r in records) + "\n{torn")
    window.train_tab.show_run_history(str(run))
    qtbot.waitUntil(lambda: window.train_tab.run_view.plots.point_count("reward") == 1, timeout=10000)
    qtbot.waitUntil(lambda: not window.ctx.runner.is_running("history"), timeout=5000)
