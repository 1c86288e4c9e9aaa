"""`eval` with no evaluation named measures what fits the model, and says so: a pretraining run's perplexity and
bits per byte on its own validation split, a self-play run's task world; a chat model's answers count when the
reply contains them (exact on request), and the output says which match counted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from train_helpers import corpus, make_dataset, tiny_config

from desktop_app.engine.data.tokenization import hf_tokenizer, train_tokenizer
from desktop_app.engine.evaluate import qa as qa_module
from desktop_app.engine.evaluate.results import RESULTS_FILE
from desktop_app.engine.model.architecture import build_model
from desktop_app.engine.specs import ModelSpec
from desktop_app.engine.train.loop import train

OWN_TEMPLATE = ("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}<|end|>{% endfor %}"
                "{% if add_generation_prompt %}[assistant] {% endif %}")
REPLY = "The capital of France is Paris."


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """A pretraining run, the same weights as a self-play run of the mini world, a chat model and a base."""
    root = tmp_path_factory.mktemp("evaldefaults")
    dataset = make_dataset(root / "ds", context=64)
    run = root / "pretrain"
    list(train(tiny_config(dataset, steps=2, save_every=2), run))
    selfplay = root / "selfplay"
    list(train(tiny_config(dataset, steps=2, save_every=2), selfplay))
    config = json.loads((selfplay / "run.json").read_text())
    config.update(objective="selfplay", model={}, base_model=str(run), dataset="",
                  method_options={"world": "mini", "task_types": ["deduction"]})
    (selfplay / "run.json").write_text(json.dumps(config))  # the run's own record of its method
    found = {"dataset": dataset, "run": run, "selfplay": selfplay}
    for name, template in (("chat", OWN_TEMPLATE), ("base", None)):
        folder = root / name
        tok = hf_tokenizer(train_tokenizer([REPLY, "[user] [assistant] Capital of France?"] * 10, "byte-bpe", 300))
        if template:
            tok.chat_template = template
        build_model(ModelSpec("llama", len(tok), 32, 1, 2, 2, 64, 128), seed=0).save_pretrained(folder)
        tok.save_pretrained(folder)
        found[name] = folder
    return found


def test_a_pretraining_run_gets_perplexity_on_its_validation_split(models, run_cli) -> None:
    code, out, err = run_cli(models["run"], "--max-text-bytes", "1000000", "--json", "--no-save")
    assert code == 0, err
    row = json.loads(out)
    val = corpus(60)[:12]  # make_dataset's validation documents
    assert row["bits_per_byte"] > 0 and row["perplexity"] > 1 and row["text_documents"] == len(val)
    assert row["text_bytes"] == sum(len(d.encode()) for d in val)
    assert not any(k.startswith(("solve_rate", "qa_")) for k in row)  # no task world for a text model
    assert "no evaluation named" in err and "language model" in err and "validation split" in err


def test_a_self_play_run_gets_its_task_world(models, run_cli) -> None:
    code, out, err = run_cli(models["selfplay"], "--per-type", "3", "--json", "--no-save")
    assert code == 0, err
    row = json.loads(out)
    assert row["world"] == "mini" and 0.0 <= row["solve_rate/deduction"] <= 1.0
    assert "solve_rate/abduction" not in row and "bits_per_byte" not in row  # the types it played, no text
    assert "self-play model" in err


def test_a_chat_models_answers_count_when_the_reply_contains_them(models, run_cli, monkeypatch, tmp_path) -> None:
    questions = tmp_path / "qa.jsonl"
    questions.write_text('{"question": "Capital of France?", "answer": "Paris"}\n')
    from desktop_app.engine.model.loading import load_tokenizer

    reply = load_tokenizer(models["chat"]).encode(REPLY, add_special_tokens=False)
    monkeypatch.setattr(qa_module, "sample_completions", lambda model, prompts, options: [reply for _ in prompts])
    code, out, err = run_cli(models["chat"], "--qa", questions, "--json")
    assert code == 0, err
    row = json.loads(out)
    assert (row["qa_match"], row["qa_accuracy"], row["qa_exact"], row["qa_contains"]) == ("contains", 1.0, 0.0, 1.0)
    assert "solve_rate/deduction" not in row  # a question file given: the questions, no task world
    code, out, err = run_cli(models["chat"], "--qa", questions)
    assert code == 0, err
    assert "qa_accuracy: contains match (the reply contains an expected answer)" in out
    code, out, err = run_cli(models["chat"], "--qa", questions, "--qa-match", "exact")
    assert code == 0, err
    header, line, said = out.strip().splitlines()
    assert line.split()[header.split().index("qa_accuracy")] == "0.000" and said.startswith("qa_accuracy: exact")


def test_a_base_with_no_text_of_its_own_is_told_what_to_give(models, run_cli) -> None:
    before = sorted(p.name for p in models["base"].iterdir())
    code, out, err = run_cli(models["base"])
    assert code == 2 and not out and err.count("\n") == 1, err
    assert "nothing to evaluate" in err and "language model" in err and "--text" in err
    assert sorted(p.name for p in models["base"].iterdir()) == before and not (models["base"] / RESULTS_FILE).exists()
