"""The one run display: a record shows the same whether it arrives live, replayed (History) or watched
(History(live=True)); a replayed history shows curves and samples only; a watched run's Reset starts its curves
again."""

from __future__ import annotations

from PySide6.QtWidgets import QWidget

from desktop_app.engine.events import (
    CheckpointSaved,
    EvalResult,
    Finished,
    History,
    Log,
    RunFolder,
    Sample,
    StepMetrics,
)
from desktop_app.ui.widgets.run_view import RunView

EVENTS = [
    *(StepMetrics(step=s, total_steps=4, metrics={"loss": 3.0 / s, "lr": 1e-3 * s, "reward/answer": 0.25 * s},
                  elapsed_s=float(s), eta_s=4.0 - s) for s in range(1, 5)),
    EvalResult(step=4, metrics={"val_loss": 1.25, "val_ppl": 3.5}),
    Sample(step=4, prompt="Once", text="upon a time"),
]


def _view(qtbot) -> RunView:
    view = RunView(QWidget())
    qtbot.addWidget(view)
    return view


def _curves(view: RunView) -> dict[str, tuple[list[float], list[float]]]:
    view.plots.flush()
    out = {}
    for name, series in view.plots.series.items():
        x, y = series.data()
        out[name] = (x.tolist(), y.tolist())
    for name, series in view.plots.smoothed.items():
        x, y = series.data()
        out[f"{name}~smoothed"] = (x.tolist(), y.tolist())
    return out


def test_a_live_record_and_the_same_record_replayed_are_drawn_the_same(qtbot):
    live, replayed = _view(qtbot), _view(qtbot)
    live.begin(training=True, progress="starting…")
    live.show(RunFolder("/runs/a", "pretraining"))
    for event in EVENTS:
        live.show(event)
    replayed.begin(training=False)
    replayed.show(RunFolder("/runs/a", "pretraining"))
    replayed.show(History("/runs/a", [e.to_dict() for e in EVENTS]))  # as metrics.jsonl holds them

    curves = _curves(live)
    assert {"loss", "lr", "reward/answer", "val_loss", "val_ppl", "loss~smoothed"} <= set(curves)
    assert curves == _curves(replayed)
    assert curves["loss"] == ([1.0, 2.0, 3.0, 4.0], [3.0, 1.5, 1.0, 0.75])
    assert live.plots.panel_keys() == replayed.plots.panel_keys()
    assert live.samples_view.toHtml() == replayed.samples_view.toHtml()  # the prompt shown in both
    assert "upon a time" in replayed.samples_view.toPlainText()
    assert live.progress.format().startswith("step 4/4 · 100%")
    assert replayed.progress.format() == "history: step 4/4 · 100%"
    live.stop_timers()
    replayed.stop_timers()


def test_a_replayed_history_shows_no_old_news(qtbot):
    """Log lines, checkpoints and the end (even a failure) of a run shown again are not news: curves only."""
    view = _view(qtbot)
    view.begin(training=False)
    records = [e.to_dict() for e in EVENTS] + [
        Log("error", "out of memory").to_dict(), CheckpointSaved(step=4, path="/runs/a/checkpoints/step-4").to_dict(),
        Finished("failed", step=4, message="out of memory").to_dict()]
    view.show(History("/runs/a", records))
    assert view.plots.point_count("loss") == 4
    assert view.log_view.toPlainText() == ""
    assert view.last_finished is None and view.progress.format() == "history: step 4/4 · 100%"
    view.stop_timers()


def test_a_watched_run_is_news_and_its_reset_clears_the_curves(qtbot):
    view = _view(qtbot)
    view.begin(training=False, progress="watching run: waiting for its metrics…")
    view.show(History("/runs/b", [e.to_dict() for e in EVENTS[:3]] + [Log("info", "hello").to_dict()], live=True))
    assert view.plots.point_count("loss") == 3
    assert "hello" in view.log_view.toPlainText()
    assert view.progress.format() == "watching: step 3/4 · 75% · loss 1.000"
    # the other process resumed from step 1's checkpoint: its file was cut back, and grows again
    view.show(History("/runs/b", [{"type": "reset"}, EVENTS[0].to_dict()], live=True))
    assert view.plots.point_count("loss") == 1 and view.plots.point_count("reward/answer") == 1
    assert view.samples_view.toPlainText() == ""
    assert "cut back" in view.log_view.toPlainText()
    view.show(History("/runs/b", [Finished("completed", step=1).to_dict()], live=True))
    assert view.last_finished.reason == "completed"
    assert view.progress.format() == "watched run completed at step 1" and view.progress.value() == 1000
    view.stop_timers()
