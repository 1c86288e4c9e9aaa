"""Train tab → Pipeline: stages built in the editor (SFT then DPO on a tiny base) run to the end with each stage's
state shown; a stop in stage 2 then Resume continues stage 2 (stage 1 is not run again); pipeline JSON saved,
loaded, refused clearly when bad; the CLI dialog shows `train --pipeline`; the Library offers Resume for it."""

from __future__ import annotations

import json

import pytest

from desktop_app.engine.events import StageStarted, StepMetrics
from desktop_app.engine.methods import default_lr
from desktop_app.engine.pipeline_folder import read_state

WORDS = ["red", "blue", "cat", "dog", "sun", "moon"]
CHATS = [{"messages": [{"role": "user", "content": f"say {a}"}, {"role": "assistant", "content": f"{a} {b}"}]}
         for a in WORDS for b in WORDS]
PAIRS = [{"prompt": f"say {a}", "chosen": f"{a} {b}", "rejected": f"{b} {a}"} for a in WORDS for b in WORDS if a != b]
TINY_TRAIN = {"batch_size": 4, "eval_every": 0, "save_every": 0, "warmup_steps": 0, "sample_tokens": 0,
              "log_every": 1}


def _jsonl(path, records) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return str(path)


@pytest.fixture
def inputs(trained, tmp_path):
    """(base, chats, pairs): the tiny pretrained run as the first stage's base, chats for SFT, pairs for DPO."""
    return str(trained[1]), _jsonl(tmp_path / "chats.jsonl", CHATS), _jsonl(tmp_path / "pairs.jsonl", PAIRS)


def _build(tab, base: str, chats: str, pairs: str, dpo_steps: int) -> None:
    tab.setup.set_method("pipeline")
    editor = tab.setup.pipeline_editor
    assert editor.isVisibleTo(tab) and not tab.setup.method_panel.isVisibleTo(tab)
    assert not tab.setup.hyper_group.isVisibleTo(tab)
    assert editor.add_stage("sft") == 0
    editor.panel.base_picker.set_path(base)
    editor.panel.data_list.set_files([chats])
    editor.form.set_spec(editor.form.spec().replace(steps=3, **TINY_TRAIN))
    assert editor.add_stage("dpo") == 1
    assert editor.follow_check.isChecked() and not editor.panel.base_group.isVisibleTo(tab)  # the previous output
    editor.panel.data_list.set_files([pairs])
    editor.form.set_spec(editor.form.spec().replace(steps=dpo_steps, **TINY_TRAIN))


def _wait_idle(qtbot, window) -> None:
    qtbot.waitUntil(lambda: not window.ctx.runner.running_kinds(), timeout=60000)


def test_a_two_stage_pipeline_runs_to_the_end_with_its_stages_shown(window, qtbot, inputs, tmp_path):
    base, chats, pairs = inputs
    tab = window.train_tab
    _build(tab, base, chats, pairs, dpo_steps=4)
    editor = tab.setup.pipeline_editor
    pipeline = editor.pipeline()
    assert [s["name"] for s in pipeline["stages"]] == ["sft", "dpo"]
    assert pipeline["stages"][0]["config"]["base_model"] == base
    assert "base_model" not in pipeline["stages"][1]["config"]  # follows the SFT stage
    assert pipeline["stages"][1]["config"]["train"]["lr"] == default_lr("dpo", "none")  # each method's own default
    assert editor.problems() == []
    # the CLI dialog: `train --pipeline` and the pipeline JSON to save next to it
    tab.show_cli_command()
    command = tab.cli_dialog.findChild(object, "cliCommand").toPlainText()
    assert command.startswith("python -m desktop_app train --pipeline pipeline.json --out ")
    assert json.loads(tab.cli_dialog.findChild(object, "cliJson").toPlainText()) == pipeline
    tab.cli_dialog.close()

    assert tab.start(), window.ctx.errors
    assert not editor.add_btn.isEnabled() and not editor.stage_group.isEnabled()  # shown, not edited, while it runs
    seen = []
    tab.task.produced.connect(lambda item: seen.append(
        (tab.stage_index, editor.stage_states()[:]) if isinstance(item, StepMetrics) else None))
    qtbot.waitUntil(lambda: not tab.running, timeout=120000)
    _wait_idle(qtbot, window)
    assert not window.ctx.errors, window.ctx.errors
    assert tab.run_view.last_finished.reason == "completed", tab.run_view.last_finished
    assert editor.stage_states() == ["done", "done"]
    assert "✓ done" in editor.stage_list.item(1).text()
    assert (0, ["running", "waiting"]) in seen and (1, ["done", "running"]) in seen  # where the run was
    out = tab.pipeline_dir
    assert [s["status"] for s in read_state(out)["stages"]] == ["completed", "completed"]
    assert tab.run_view.plots.point_count("loss") == 4  # the plots show the current (last) stage: DPO's 4 steps
    assert "preference_accuracy" in tab.run_view.plots.panel_keys()
    assert "pipeline completed" in tab.run_view.progress.format()
    assert f"train --resume {out}" in tab.cli_command()
    assert editor.add_btn.isEnabled()

    # saved and loaded again: the same stages; a bad file is refused with every problem named
    saved = tmp_path / "my pipeline.json"
    assert editor.save_file(saved)
    editor.remove_stage(0)
    assert [s.name for s in editor.stages] == ["dpo"]
    assert editor.load_file(saved)
    assert editor.pipeline() == pipeline
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"stages": [{"name": "x y", "config": {"objective": "sft"}}]}), encoding="utf-8")
    assert not editor.load_file(bad)
    message = window.ctx.errors[-1][0]
    assert "bad.json is not a pipeline" in message and "must be letters" in message and "first stage needs" in message
    assert editor.pipeline() == pipeline  # nothing lost
    broken = tmp_path / "broken.json"
    broken.write_text("{not json", encoding="utf-8")
    assert not editor.load_file(broken) and "not valid JSON" in window.ctx.errors[-1][0]


def test_stop_in_stage_two_then_resume_continues_stage_two(window, qtbot, inputs, monkeypatch):
    from desktop_app.engine.session import ResumeRun
    from desktop_app.ui import train_jobs

    original = train_jobs.session_job
    stops = []

    def stop_in_stage_two(session, controls):
        # In the worker thread, as the engine test does: Stop right after stage 2's third step, deterministically.
        stage = -1
        resume = isinstance(session.what, ResumeRun)
        for item in original(session, controls):
            if isinstance(item, StageStarted):
                stage = item.index
            if not resume and stage == 1 and isinstance(item, StepMetrics) and item.step == 3:
                stops.append(item.step)
                controls.stop.set()
            yield item

    monkeypatch.setattr(train_jobs, "session_job", stop_in_stage_two)
    base, chats, pairs = inputs
    tab = window.train_tab
    _build(tab, base, chats, pairs, dpo_steps=8)
    assert tab.start(), window.ctx.errors
    qtbot.waitUntil(lambda: not tab.running, timeout=120000)
    _wait_idle(qtbot, window)
    assert stops == [3] and tab.run_view.last_finished.reason == "stopped"
    out = tab.pipeline_dir
    assert tab.setup.pipeline_editor.stage_states() == ["done", "stopped"]
    assert tab.run_dir == out / "stages" / "02-dpo"  # what a window closed mid-pipeline remembers, to resume
    assert [(s["status"], s["step"]) for s in read_state(out)["stages"]] == [("completed", 3), ("stopped", 3)]

    # The Library offers Resume for the pipeline folder (it has no run.json of its own)
    window.ctx.workspace_items_changed.emit()
    assert window.library_tab.select(str(out))
    assert window.library_tab.resume_btn.isEnabled()

    tab.setup.set_method("sft")  # the form shows something else: Resume brings the pipeline back
    steps = []
    assert tab.resume_run(tab.run_dir)  # a stage folder resumes its pipeline
    assert tab.setup.current_method().key == "pipeline"
    assert [s.name for s in tab.setup.pipeline_editor.stages] == ["sft", "dpo"]
    tab.task.produced.connect(lambda item: steps.append((tab.stage_index, item.step))
                              if isinstance(item, StepMetrics) else None)
    qtbot.waitUntil(lambda: not tab.running, timeout=120000)
    _wait_idle(qtbot, window)
    assert not window.ctx.errors, window.ctx.errors
    assert tab.run_view.last_finished.reason == "completed"
    assert steps == [(1, s) for s in range(4, 9)]  # stage 2 from its checkpoint on; stage 1 not run again
    log = tab.run_view.log_view.toPlainText()
    assert "'sft': already completed, skipped" in log and "stage 2/2 'dpo'" in log and "resuming" in log
    assert tab.setup.pipeline_editor.stage_states() == ["done", "done"]
    x, _ = tab.run_view.plots.series["loss"].data()
    assert sorted(x.tolist()) == list(range(1, 9))  # the stage's whole curve: its history, then the new steps
    window.ctx.workspace_items_changed.emit()
    assert window.library_tab.select(str(out)) and not window.library_tab.resume_btn.isEnabled()  # all done
    # Show in plots on the pipeline folder: its stages and the last stage's curves
    tab.setup.set_method("sft")
    tab.show_run_history(str(out))
    assert tab.setup.current_method().key == "pipeline" and tab.setup.pipeline_editor.stage_states() == ["done", "done"]
    qtbot.waitUntil(lambda: tab.run_view.plots.point_count("loss") == 8, timeout=10000)
    _wait_idle(qtbot, window)


def test_pipeline_problems_are_named_before_anything_starts(window, qtbot, tmp_path):
    tab = window.train_tab
    tab.setup.set_method("pipeline")
    assert not tab.start()
    assert "add at least one stage" in window.ctx.errors[-1][0]
    editor = tab.setup.pipeline_editor
    editor.add_stage("sft")  # no base, no data: the first stage cannot follow anything
    editor.add_stage("dpo")
    editor.panel.data_list.set_files([_jsonl(tmp_path / "chats.jsonl", CHATS)])  # chats are no preference pairs
    editor.name_edit.setText("sft")  # the same name twice
    editor.name_edit.editingFinished.emit()
    assert not tab.start() and not tab.running
    message = window.ctx.errors[-1][0]
    assert "The pipeline cannot start yet" in message
    assert "stage 1 (sft): choose its base model below" in message  # in the editor's words, not "base_model"
    assert "base_model" not in message and "model spec" not in message
    assert "the name 'sft' is used twice" in message
    assert "DPO needs preference pairs" in message
    # reorder and remove
    editor.name_edit.setText("dpo")
    editor.name_edit.editingFinished.emit()
    editor.move_stage(1, -1)
    assert [s.name for s in editor.stages] == ["dpo", "sft"] and editor.current_index() == 0
    assert editor.stage_list.item(1).text().endswith("← previous")
    editor.remove_stage(0)
    assert [s.name for s in editor.stages] == ["sft"]


def test_a_stage_reading_a_table_gets_its_column_mapping(window, tmp_path, base):
    """A stage's table whose columns nobody guesses: the stage shows its columns, the mapping chosen there goes into
    that stage's config (and the pipeline JSON), another stage keeps its own, and the stage shown again brings it
    back."""
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    qa = tmp_path / "qa.parquet"
    pq.write_table(pa.table({"id": ["1", "2"], "ask": ["Say hello", "Say bye"], "reply": ["Hello", "Bye"]}), qa)
    tab = window.train_tab
    tab.setup.set_method("pipeline")
    editor = tab.setup.pipeline_editor
    assert editor.add_stage("sft") == 0
    editor.panel.base_picker.set_path(base)
    assert not editor.columns_box.isVisibleTo(tab)  # no table yet
    editor.panel.data_list.set_files([str(qa)])
    box = editor.columns_box
    assert box.isVisibleTo(tab) and box.panel.columns == ["id", "ask", "reply"]
    assert any("qa.parquet" in p for p in editor.problems())  # unmapped: Start would refuse it, naming it
    box.panel.set_kind("instruction")
    box.panel.set_role("instruction", "ask")
    box.panel.set_role("output", "reply")
    mapping = {"instruction": "ask", "output": "reply"}
    assert editor.stages[0].config["columns"] == mapping
    assert editor.pipeline()["stages"][0]["config"]["columns"] == mapping
    assert not [p for p in editor.problems() if "qa.parquet" in p]
    assert editor.add_stage("grpo") == 1  # prompts, not records: no mapping, no columns shown
    assert not editor.columns_box.isVisibleTo(tab)
    editor.panel.data_list.set_files([_jsonl(tmp_path / "prompts.jsonl", [{"prompt": "say red"}])])
    assert "columns" not in editor.stages[1].config
    editor.select_stage(0)
    assert editor.panel.data_list.columns == mapping and editor.columns_box.isVisibleTo(tab)
    assert editor.panel.data_list.item(0).text() == "qa.parquet — Alpaca instructions"
    editor.set_pipeline(editor.pipeline())  # through the engine's pipeline JSON and back
    editor.select_stage(0)
    assert editor.stages[0].config["columns"] == mapping and editor.panel.data_list.columns == mapping
