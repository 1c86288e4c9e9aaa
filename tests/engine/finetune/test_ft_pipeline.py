"""Multi-stage pipelines: pretrain -> SFT (LoRA) -> DPO (LoRA), each stage's output the next one's base; stop
mid-pipeline and resume; problems in a pipeline file are reported all at once."""

from __future__ import annotations

import json

import pytest
from ft_helpers import newest, preference_pairs, repeat_chats, write_jsonl
from train_helpers import make_dataset, tiny_model

from desktop_app.engine.events import Controls
from desktop_app.engine.pipeline_folder import STATE_FILE, load_pipeline, read_state
from desktop_app.engine.recipes.pipeline import run_pipeline
from desktop_app.engine.specs import SpecError

TRAIN = {"batch_size": 4, "lr": 3e-3, "warmup_steps": 0, "eval_every": 0, "save_every": 2, "sample_tokens": 0,
         "threads": 1, "precision": "fp32"}


def _pipeline(tmp_path) -> dict:
    dataset = make_dataset(tmp_path / "ds", context=64)
    from desktop_app.engine.data.token_store import TokenStore

    spec = tiny_model(TokenStore(dataset).vocab_size, 64)
    write_jsonl(tmp_path / "chats.jsonl", repeat_chats(16))
    write_jsonl(tmp_path / "pairs.jsonl", preference_pairs(16))
    pipeline = {"stages": [
        {"name": "pretrain", "config": {"model": spec.to_dict(), "dataset": "ds", "train": {**TRAIN, "steps": 4}}},
        {"name": "sft", "config": {"objective": "sft", "data": ["chats.jsonl"], "adapter": {"kind": "lora"},
                                   "method_options": {"max_len": 64}, "train": {**TRAIN, "steps": 4}}},
        {"name": "dpo", "config": {"objective": "dpo", "data": ["pairs.jsonl"], "adapter": {"kind": "lora"},
                                   "method_options": {"max_len": 64}, "train": {**TRAIN, "steps": 3}}},
    ]}
    path = tmp_path / "pipeline.json"
    path.write_text(json.dumps(pipeline), encoding="utf-8")
    return {"path": path, "pipeline": pipeline}


def test_pretrain_sft_dpo_pipeline_stops_and_resumes_mid_way(tmp_path):
    p = _pipeline(tmp_path)
    out = tmp_path / "out"
    controls = Controls()
    events = []
    in_sft = False
    for event in run_pipeline(p["path"], out, controls):
        events.append(event)
        if event.type == "log" and "stage 2/3 'sft'" in event.message and "starting" in event.message:
            in_sft = True
        if event.type == "step" and in_sft and event.step == 2:
            controls.stop.set()  # the user presses Stop during the SFT stage
    assert events[-1].type == "finished" and events[-1].reason == "stopped"
    state = read_state(out)
    assert [s["status"] for s in state["stages"]] == ["completed", "stopped", "pending"]

    resumed = list(run_pipeline(None, out, resume=True))
    assert resumed[-1].reason == "completed", resumed[-1]
    logs = [e.message for e in resumed if e.type == "log"]
    assert any("'pretrain': already completed, skipped" in m for m in logs)
    assert any("stage 2/3 'sft'" in m and "resuming" in m for m in logs)
    state = read_state(out)
    assert [s["status"] for s in state["stages"]] == ["completed"] * 3
    stages = [out / "stages" / f"{i + 1:02d}-{n}" for i, n in enumerate(("pretrain", "sft", "dpo"))]
    sft_run = json.loads((stages[1] / "run.json").read_text())
    dpo_run = json.loads((stages[2] / "run.json").read_text())
    assert sft_run["base_model"] == str(newest(stages[0]))  # each stage starts from the previous one's output
    assert dpo_run["base_model"] == str(newest(stages[1]))
    assert (newest(stages[2]) / "adapter_model.safetensors").is_file()
    assert any("the adapter was merged into its base" in e.message for e in resumed if e.type == "log")
    steps = [e for e in resumed if e.type == "step"]
    assert {"rewards_chosen", "preference_accuracy"} <= set(steps[-1].metrics)
    # a view learns each stage's start, then its folder (and, for the resumed stage, its curve so far)
    started = [(e.index, e.name, e.method) for e in resumed if e.type == "stage"]
    assert started == [(1, "sft", "lora"), (2, "dpo", "dpo")]  # the sft stage trains LoRA adapters
    folders = [(e.path, e.resumed) for e in resumed if e.type == "run_folder"]
    assert folders == [(str(stages[1]), True), (str(stages[2]), False)]
    history = next(e for e in resumed if e.type == "history")
    assert history.run_dir == str(stages[1]) and [r["step"] for r in history.records if r["type"] == "step"] == [1, 2]
    assert resumed[-1].result["run_dir"] == str(stages[2])
    assert (out / STATE_FILE).is_file()
    # the final model generates
    from desktop_app.engine.generate.decode import stream_text
    from desktop_app.engine.model.loading import load_model
    from desktop_app.engine.specs import GenerateSpec

    loaded = load_model(stages[2], device="cpu")
    text = [e for e in stream_text(loaded, "hi", GenerateSpec(max_new_tokens=3, chat=True), threads=1)
            if e.type == "generation"]
    assert len(text) == 1


def test_pipeline_problems_are_reported_all_at_once(tmp_path):
    bad = {"stages": [
        {"name": "sft", "config": {"objective": "sft", "data": ["x.jsonl"]}},
        {"name": "sft", "config": {"objective": "dpo", "adapter": {"kind": "nope"}}},
        {"name": "bad name!", "config": 5},
    ], "extra": 1}
    with pytest.raises(SpecError) as info:
        load_pipeline(bad)
    text = " | ".join(info.value.problems)
    assert "unknown pipeline field(s): extra" in text
    assert "stage 1 (sft): the first stage needs a model spec or a base_model" in text
    assert "the name 'sft' is used twice" in text
    assert "data is not set" in text and "adapter: kind must be one of" in text
    assert "stage 3" in text and "must be letters" in text
    with pytest.raises(SpecError, match="non-empty list of stages"):
        load_pipeline({"stages": []})


def test_cli_pipeline_fits_pretraining_stages_as_the_window_does(tmp_path, capsys):
    """A pipeline's pretraining stage has its model fitted to its dataset by the engine, whoever starts it (the
    window used to fit it itself, the CLI's `train --pipeline` did not): the same pipeline.json, the same stages."""
    from desktop_app.cli import main
    from desktop_app.engine.presets import preset

    make_dataset(tmp_path / "ds", context=32)  # the stage names it relative to pipeline.json
    pipeline = {"stages": [{"name": "pretrain", "config": {"model": preset("tiny").to_dict(), "dataset": "ds",
                                                            "train": {**TRAIN, "steps": 1, "save_every": 0}}}]}
    path = tmp_path / "pipeline.json"
    path.write_text(json.dumps(pipeline), encoding="utf-8")
    out = tmp_path / "out"
    assert main(["train", "--pipeline", str(path), "--out", str(out), "--json"]) == 0
    logs = [e["message"] for e in map(json.loads, capsys.readouterr().out.splitlines()) if e["type"] == "log"]
    run = json.loads(next((out / "stages").glob("*/run.json")).read_text())
    assert run["model"]["context_length"] == 32 and run["model"]["vocab_size"] == 320  # 300 tokens padded to 320
    assert load_pipeline(out / "pipeline.json")[0].config["model"] == run["model"]  # what a resume runs
    assert any("stage pretrain: model: vocab_size set to 320" in m for m in logs), logs
