"""The one door to a run (engine/session.py): a new run, a resumed one and a pipeline are opened once (planned,
checked, preflighted) and run through the same session; pipeline stages are requests like any new run, so a stage
without a learning rate trains at its method's default."""

from __future__ import annotations

import json

import pytest
from ft_helpers import newest, repeat_chats, write_jsonl
from train_helpers import make_dataset, tiny_model

from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Controls
from desktop_app.engine.methods import default_lr
from desktop_app.engine.session import PipelineRun, ResumeRun, open_session, start
from desktop_app.engine.train.request import RunRequest

TRAIN = {"batch_size": 4, "warmup_steps": 0, "eval_every": 0, "save_every": 2, "sample_tokens": 0, "threads": 1,
         "precision": "fp32"}


def _two_stages(tmp_path) -> dict:
    from desktop_app.engine.data.token_store import TokenStore

    dataset = make_dataset(tmp_path / "ds", context=64)
    spec = tiny_model(TokenStore(dataset).vocab_size, 64)
    write_jsonl(tmp_path / "chats.jsonl", repeat_chats(16))
    return {"stages": [
        {"name": "pretrain", "config": {"model": spec.to_dict(), "dataset": str(dataset),
                                        "train": {**TRAIN, "steps": 2, "lr": 3e-3}}},
        {"name": "sft", "config": {"objective": "sft", "data": [str(tmp_path / "chats.jsonl")],
                                   "method_options": {"max_len": 64}, "train": {**TRAIN, "steps": 2}}},  # no lr
    ]}


def test_a_pipeline_stage_without_a_learning_rate_trains_at_its_methods_default_checked_once(tmp_path, monkeypatch):
    from desktop_app.engine.train import request

    checked: list[str] = []
    real = request.preflight
    monkeypatch.setattr(request, "preflight", lambda config, *a, **k: checked.append(config.objective) or
                        real(config, *a, **k))
    out = tmp_path / "pipe"
    events = list(start(PipelineRun(_two_stages(tmp_path)), out, Controls()))
    assert events[-1].reason == "completed", events[-1]
    runs = sorted((out / "stages").iterdir())
    recorded = [json.loads((run / "run.json").read_text()) for run in runs]
    assert recorded[0]["train"]["lr"] == 3e-3  # given: kept
    assert recorded[1]["train"]["lr"] == default_lr("sft") == 5e-5  # full SFT on a trained model: its own default
    assert recorded[1]["base_model"].startswith(str(runs[0]))  # the previous stage (its newest checkpoint)
    stage_starts = [e for e in events if e.type == "stage"]
    assert [s.index for s in stage_starts] == [0, 1]
    assert checked == ["causal_lm", "sft"]  # each stage planned, checked and preflighted once


def test_a_new_run_is_opened_once_and_runs_as_prepared(tmp_path):
    from desktop_app.engine.data.token_store import TokenStore

    dataset = make_dataset(tmp_path / "ds", context=64)
    spec = tiny_model(TokenStore(dataset).vocab_size, 32)  # a context the dataset's windows replace
    session = open_session(RunRequest(model=spec.to_dict(), dataset=str(dataset), train={**TRAIN, "steps": 2}),
                           tmp_path / "run")
    assert session.processes == 1 and session.prepared is not None
    assert session.prepared.config.model_spec().context_length == 64 and session.notes  # fitted, said once
    events = list(session.events(Controls()))
    assert events[-1].reason == "completed"
    assert json.loads((tmp_path / "run" / "run.json").read_text()) == session.prepared.config.to_dict()

    resumed = open_session(ResumeRun(tmp_path / "run"))
    assert resumed.config is not None and resumed.processes == 1
    assert list(resumed.events(Controls()))[-1].type == "finished"
    assert newest(tmp_path / "run").is_dir()


def test_what_cannot_start_is_said_in_one_line_and_nothing_is_written(tmp_path):
    with pytest.raises(UserError, match=r"no run\.json"):
        open_session(ResumeRun(tmp_path / "nothing-here"))
    with pytest.raises(UserError, match="output folder"):
        next(open_session(PipelineRun({"stages": []})).events(Controls()))
    with pytest.raises(UserError, match=r"data file .* does not exist"):
        open_session(RunRequest(objective="sft", base_model=str(tmp_path), data=[str(tmp_path / "missing.jsonl")]),
                     tmp_path / "run")
    assert not (tmp_path / "run").exists()
    with pytest.raises(UserError, match="own folder"):
        open_session(ResumeRun(tmp_path / "a"), tmp_path / "b")
