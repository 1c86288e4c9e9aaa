"""The Train tab's state without a window: what runs, what is shown, what can be resumed, driven by plain events."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from desktop_app.engine.events import RunFolder, StageStarted, StepMetrics
from desktop_app.engine.methods import METHOD_BY_KEY, PIPELINE
from desktop_app.engine.specs import RunConfig
from desktop_app.ui.train_state import DEMO, PIPELINE_JOB, RUN, TrainState, folder_to_watch, start_hint


def test_a_run_counts_its_steps_and_remembers_its_folder() -> None:
    state, config = TrainState(), RunConfig(objective="sft", base_model="/b", data=["/d.jsonl"])
    state.begin(RUN, Path("/runs/a"), config)
    assert state.job == RUN and state.config is config and not state.pipeline_running
    for step in (1, 2, 3):
        state.record(StepMetrics(step=step, total_steps=3, metrics={"loss": 1.0}))
    state.record(RunFolder(path="/runs/a-moved"))
    assert state.steps_seen == 3 and state.run_dir == Path("/runs/a-moved")  # what a window closed mid-run resumes
    state.end()
    assert state.job == "" and state.run_dir == Path("/runs/a-moved") and state.config is config
    state.begin(DEMO, Path("/runs/demo"))
    assert state.steps_seen == 0 and state.config is None  # a new job starts from nothing


def test_a_pipeline_follows_its_stages_and_their_states() -> None:
    state = TrainState()
    state.begin(PIPELINE_JOB, Path("/runs/p"), stages=3)
    assert state.pipeline_running and state.pipeline_dir == Path("/runs/p") and state.stage_index == -1
    state.record(StageStarted(1, "sft", "/runs/p/stages/01-sft", "sft"))
    assert state.stage_index == 1 and state.run_dir == Path("/runs/p/stages/01-sft")
    before = [("done", "skipped"), ("waiting", ""), ("waiting", "")]
    assert state.stage_states(before, 3) == [("done", "skipped"), ("running", ""), ("waiting", "")]
    assert state.stage_states([], 3) == [("done", ""), ("running", ""), ("waiting", "")]
    assert state.stage_progress(1200, 5000) == "step 1,200/5,000"
    state.end()
    assert not state.pipeline_running and state.pipeline_dir == Path("/runs/p")  # shown and resumable after


def test_watch_follows_a_pipelines_current_stage(tmp_path) -> None:
    from desktop_app.engine.pipeline_folder import write_state

    run = tmp_path / "run"
    run.mkdir()
    assert folder_to_watch(run) == (run, "")
    pipeline = tmp_path / "pipe"
    pipeline.mkdir()
    (pipeline / "pipeline.json").write_text('{"stages": []}', encoding="utf-8")
    write_state(pipeline, [{"name": "pre", "run_dir": str(tmp_path / "s0")}], 0)
    folder, note = folder_to_watch(pipeline)
    assert folder == tmp_path / "s0" and "stage 1 'pre'" in note
    write_state(pipeline, [], 0)
    try:
        folder_to_watch(pipeline)
    except ValueError as exc:
        assert "No stage of the pipeline pipe has started yet" in str(exc)
    else:
        raise AssertionError("a pipeline with no stage started cannot be watched")
    state = TrainState()
    state.watch(folder)
    assert state.watched_dir == state.run_dir == folder


def test_start_hints_speak_of_the_method() -> None:
    assert "sample corpus" in start_hint(METHOD_BY_KEY["pretraining"])
    assert "Pipeline" in start_hint(PIPELINE)
    assert "base model and the data files" in start_hint(METHOD_BY_KEY["sft"])
    assert "data files" not in start_hint(METHOD_BY_KEY["selfplay"])


def test_the_state_needs_no_qt() -> None:
    code = ("import sys\nimport desktop_app.ui.train_state\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('PySide6', 'pyqtgraph', 'shiboken6')))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "[]", result.stderr[-2000:]
