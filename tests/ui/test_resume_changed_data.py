"""Resuming a fine-tune in the window after its data file was edited: the window asks first, naming the file. No
starts nothing and leaves the run as it was; Yes continues on the new data (the engine's warning in the log) and
records the new file, so the next resume asks nothing."""

from __future__ import annotations

import json

from desktop_app.engine import run_folder as rf
from desktop_app.engine.specs import RunConfig, TrainSpec
from desktop_app.engine.train.data_files import DATA_FILES
from desktop_app.engine.train.loop import train

WORDS = ["red", "blue", "cat", "dog", "sun", "moon"]
CHATS = [{"messages": [{"role": "user", "content": f"say {a}"}, {"role": "assistant", "content": f"{a} {b}"}]}
         for a in WORDS for b in WORDS]


def _stopped_run(trained, tmp_path):
    """An SFT run of the tiny pretrained model stopped after its checkpoint at step 2 (of 4)."""
    data = tmp_path / "chats.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in CHATS), encoding="utf-8")
    spec = TrainSpec(steps=4, batch_size=4, save_every=2, eval_every=0, warmup_steps=0, sample_tokens=0, log_every=1)
    config = RunConfig(objective="sft", base_model=str(trained[1]), data=[str(data)], train=spec.to_dict())
    run = tmp_path / "sft-run"
    events = train(config, run)
    for event in events:
        if event.type == "checkpoint":
            events.close()
    return run, data


def test_resume_over_edited_data_asks_and_no_keeps_the_run(window, qtbot, trained, tmp_path):
    run, data = _stopped_run(trained, tmp_path)
    data.write_text(data.read_text(encoding="utf-8") + json.dumps(CHATS[0]) + "\n", encoding="utf-8")
    before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
    asked = []
    window.ctx.confirm = lambda title, text, parent=None: asked.append(text) or False
    tab = window.train_tab
    assert not tab.resume_run(run) and not tab.running
    assert len(asked) == 1 and "chats.jsonl changed since this run started" in asked[0]
    assert {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before
    assert [rf.step_of(p) for p in rf.list_committed(run)] == [2]


def test_resume_over_edited_data_yes_continues_on_it(window, qtbot, trained, tmp_path):
    run, data = _stopped_run(trained, tmp_path)
    data.write_text(data.read_text(encoding="utf-8") + json.dumps(CHATS[0]) + "\n", encoding="utf-8")
    asked = []
    window.ctx.confirm = lambda title, text, parent=None: asked.append(text) or True
    tab = window.train_tab
    assert tab.resume_run(run)
    qtbot.waitUntil(lambda: not tab.running, timeout=60000)
    assert len(asked) == 1 and tab.run_view.last_finished.reason == "completed", window.ctx.errors
    assert "continuing on changed data" in tab.run_view.log_view.toPlainText()
    files = json.loads((run / DATA_FILES).read_text(encoding="utf-8"))["files"]
    assert files[str(data)]["size"] == data.stat().st_size  # the new file is the run's now
    asked.clear()
    tab.resume_run(run)  # nothing changed since: no question
    qtbot.waitUntil(lambda: not tab.running, timeout=60000)
    assert asked == []
