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


def test_the_status_follows_the_engine_from_its_setup_to_the_first_step(qtbot, trained, tmp_path):
    """A LoRA run on a CPU spends most of a minute in its setup and first step: the bar said "starting… (loading the
    engine)" all along, because only a step record moved it. It now follows the engine's setup phases, Started and
    the first step's Progress (a real LoRA run of the window's kind, on the tiny pretrained run as its base)."""
    import json

    from desktop_app.engine.specs import RunConfig, TrainSpec
    from desktop_app.engine.train.loop import train

    data = tmp_path / "chats.jsonl"
    chats = [{"messages": [{"role": "user", "content": f"say {w}"}, {"role": "assistant", "content": w}]}
             for w in ("red", "blue", "cat", "dog", "sun", "moon")]
    data.write_text("".join(json.dumps(c) + "\n" for c in chats), encoding="utf-8")
    spec = TrainSpec(steps=3, batch_size=2, eval_every=0, save_every=0, sample_tokens=0, threads=1)
    config = RunConfig(base_model=str(trained[1]), objective="sft", data=[str(data)],
                       adapter={"kind": "lora", "rank": 4}, train=spec.to_dict())
    view = _view(qtbot)
    view.begin(training=True, progress="starting… (loading the engine)")
    shown = []  # (event type, the bar's text once it was shown)
    for event in train(config, tmp_path / "run", interactive=True):
        view.show(event)
        shown.append((event.type, view.progress.format()))
    texts = [text for _kind, text in shown]
    assert "starting: checking the base model's weights…" in texts
    assert "starting: loading the base model and preparing the data…" in texts
    first = next(i for i, (kind, _text) in enumerate(shown) if kind == "step")
    assert shown[first - 1] == ("progress", "step 1 of 3 running…")  # while step 1 runs
    assert shown[first][1].startswith("step 1/3 · 33% · ETA after a few steps")  # no ETA from one step
    assert not any(text.startswith("starting…") for kind, text in shown if kind != "progress")
    view.stop_timers()


def test_the_eta_shows_once_the_engine_has_one(qtbot):
    view = _view(qtbot)
    view.begin(training=True)
    view.show(StepMetrics(step=2, total_steps=400, metrics={"loss": 2.0}, eta_s=0.0))
    assert view.progress.format() == "step 2/400 · 0% · ETA after a few steps · loss 2.000"
    qtbot.wait(150)  # the bar repaints at most ten times a second
    view.show(StepMetrics(step=3, total_steps=1000, metrics={"loss": 1.5}, eta_s=351.0))
    assert view.progress.format() == "step 3/1,000 · 0% · ETA 5:51 · loss 1.500"
    view.show(StepMetrics(step=400, total_steps=400, metrics={"loss": 1.0}, eta_s=0.0))
    assert view.progress.format() == "step 400/400 · 100% · loss 1.000"  # done: nothing left to estimate
    view.stop_timers()
