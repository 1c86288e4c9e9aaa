"""What a view learns from the engine alone: a run's folder as it starts, a resumed run's curve so far (read before the
resume cuts metrics.jsonl back), pipeline stages as they start, a finished run replayed, a watched run's growth,
and every record turned back into the event it was written from."""

from __future__ import annotations

import threading
from pathlib import Path

from train_helpers import make_dataset, tiny_config

from desktop_app.engine.events import (
    CheckpointSaved,
    Controls,
    EvalResult,
    Finished,
    History,
    Log,
    Reset,
    RunFolder,
    StepMetrics,
    event_from_dict,
)
from desktop_app.engine.run_folder import read_metrics
from desktop_app.engine.runs import replay_run, watch_run
from desktop_app.engine.train.loop import train


def test_every_recorded_event_comes_back_from_its_record() -> None:
    events = [StepMetrics(3, 10, {"loss": 2.5, "lr": 0.1}, 1.5, 4.0), EvalResult(3, {"val_loss": 2.0}),
              CheckpointSaved(3, "/x", best=True), Log("warning", "w"), Finished("stopped", 3, "m", {"a": 1})]
    assert [event_from_dict(e.to_dict()) for e in events] == events
    assert event_from_dict({"type": "reset"}) == Reset()
    assert event_from_dict({"type": "from-a-newer-version"}) is None
    assert event_from_dict({"type": "checkpoint"}) is None  # damaged: no step, no path
    assert event_from_dict({"type": "log", "level": "info", "message": "m", "new_field": 1}) == Log("info", "m")


def test_a_resumed_run_yields_its_folder_then_its_curve_up_to_the_checkpoint(tmp_path: Path) -> None:
    dataset = make_dataset(tmp_path / "ds")
    config = tiny_config(dataset, steps=6, save_every=3)
    controls = Controls()
    first = []
    for event in train(config, tmp_path / "run", controls):
        first.append(event)
        if isinstance(event, StepMetrics) and event.step == 3:  # stop saves the step-3 checkpoint
            controls.stop.set()
    assert first[0].type == "start"  # the run's first event, as the CLI's --json shows it
    assert first[1] == RunFolder(str(tmp_path / "run"), "pretraining", resumed=False)
    assert not any(isinstance(e, (RunFolder, History)) for e in first[2:])
    kept = read_metrics(tmp_path / "run")
    with open(tmp_path / "run" / "metrics.jsonl", "a", encoding="utf-8") as fh:  # what a killed run leaves behind
        fh.write('{"type": "step", "step": 4, "total_steps": 6, "loss": 1.0}\n{"type": "step", "st')
    events = list(train(config, tmp_path / "run", resume=True))
    assert events[1] == RunFolder(str(tmp_path / "run"), "pretraining", resumed=True)
    history = events[2]
    assert isinstance(history, History) and history.records
    steps = [e.step for e in history.events() if isinstance(e, StepMetrics)]
    assert steps == [1, 2, 3]  # what the step-3 checkpoint had seen, not the lost step 4
    assert history.records == kept[:len(history.records)]
    # neither is written into metrics.jsonl: the file holds the run's own record once
    assert not [r for r in read_metrics(tmp_path / "run") if r.get("type") in ("run_folder", "history")]
    assert [r["step"] for r in read_metrics(tmp_path / "run") if r.get("type") == "step"] == [1, 2, 3, 4, 5, 6]


def test_replay_and_watch_give_the_same_events(tmp_path: Path) -> None:
    dataset = make_dataset(tmp_path / "ds")
    list(train(tiny_config(dataset, steps=3), tmp_path / "run"))
    replayed = list(replay_run(tmp_path / "run"))
    assert isinstance(replayed[0], RunFolder) and replayed[0].method == "pretraining"
    watched = list(watch_run(tmp_path / "run", threading.Event(), poll_s=0.01))
    assert all(h.live for h in watched)
    assert [e for h in watched for e in h.events()] == replayed[1].events()
    assert isinstance(replayed[1].events()[-1], Finished)
