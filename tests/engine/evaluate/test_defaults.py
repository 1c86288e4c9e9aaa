"""What is measured when nobody says: the measure that fits the model. A pretraining run: perplexity and bits per
byte on its own dataset's validation split (and measured there, not on its training text); a self-play run (or
GRPO on a task world's tasks): that world's held-out tasks; a chat model with a question file: its questions,
matched by contains. Answers of a chat model count when the reply contains them, and the figures say which match."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from train_helpers import corpus, make_dataset, tiny_config

from desktop_app.engine.data.tokenization import CHAT_TEMPLATE, hf_tokenizer, train_tokenizer
from desktop_app.engine.errors import UserError
from desktop_app.engine.evaluate import qa as qa_module
from desktop_app.engine.evaluate.defaults import default_measures, fields_to_refill, model_measures
from desktop_app.engine.evaluate.heldout import drain
from desktop_app.engine.evaluate.qa import QASettings, ask_questions, resolve_match
from desktop_app.engine.evaluate.runner import evaluate_models
from desktop_app.engine.evaluate.spec import EvalSpec
from desktop_app.engine.selfplay.prompting import make_prompter
from desktop_app.engine.specs import RunConfig
from desktop_app.engine.train.loop import train

OWN_TEMPLATE = ("{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}<|end|>{% endfor %}"
                "{% if add_generation_prompt %}[assistant] {% endif %}")
REPLY = "The capital of France is Paris."


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory) -> tuple[Path, Path]:
    """(dataset, run) of a tiny pretraining run: 60 documents, the first 12 its validation split."""
    root = tmp_path_factory.mktemp("defaults")
    dataset = make_dataset(root / "ds", context=64)
    run = root / "pretrain"
    list(train(tiny_config(dataset, steps=2, save_every=2), run))
    return dataset, run


def run_json(folder: Path, **config) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    RunConfig(**config).save(folder / "run.json")
    return folder


def hf_folder(folder: Path, template: str | None) -> Path:
    """A base's tokenizer files (what the decision reads; no weights needed to decide)."""
    tok = hf_tokenizer(train_tokenizer(["the cat sat on the mat. hello there"] * 20, "byte-bpe", 300))
    tok.chat_template = template
    tok.save_pretrained(folder)
    (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
    return folder


def test_a_pretraining_run_is_measured_on_its_own_validation_split(pretrained) -> None:
    dataset, run = pretrained
    chosen = model_measures(run)
    assert chosen.kind == "language" and chosen.fields["text"] == [str(dataset)] and "validation" in chosen.note
    fields = default_measures([str(run)]).fields
    assert fields["world"] == "none" and fields["text"] == [str(dataset)]  # no task world for a text model
    # one of its checkpoints is the same model
    checkpoint = sorted((run / "checkpoints").iterdir())[-1]
    assert model_measures(checkpoint).fields["text"] == [str(dataset)]
    # measured: the 12 validation documents, decoded, every byte of them; not the 48 training documents
    spec = EvalSpec.from_dict({**fields, "max_text_bytes": 1_000_000})
    events = list(evaluate_models([str(run)], spec, save=False))
    metrics = events[-1].result["models"][0]
    val = corpus(60)[:12]
    assert metrics["text_documents"] == len(val) and metrics["text_bytes"] == sum(len(d.encode()) for d in val)
    assert metrics["bits_per_byte"] > 0 and metrics["perplexity"] > 1
    assert not any(k.startswith("solve_rate") for k in metrics)


def test_a_pretraining_run_without_validation_text_says_why(pretrained, tmp_path: Path) -> None:
    dataset, _ = pretrained
    gone = run_json(tmp_path / "gone", model={"family": "llama"}, dataset=str(tmp_path / "moved-away"))
    assert model_measures(gone).fields["text"] == [] and "no longer there" in model_measures(gone).note
    no_val = tmp_path / "no-val"
    shutil.copytree(dataset, no_val)
    manifest = json.loads((no_val / "manifest.json").read_text())
    manifest["splits"]["val"] = {"documents": 0, "tokens": 0, "bytes": 0}
    (no_val / "manifest.json").write_text(json.dumps(manifest))
    (no_val / "val.bin").write_bytes(b"")
    run = run_json(tmp_path / "run-no-val", model={"family": "llama"}, dataset=str(no_val))
    chosen = default_measures([str(run)])
    assert chosen.fields["text"] == [] and chosen.fields["world"] == "none"
    assert "no validation split" in chosen.note  # its training text would flatter it: not used


def test_a_self_play_run_is_measured_on_its_task_world(tmp_path: Path) -> None:
    run = run_json(tmp_path / "sp", objective="selfplay", base_model="/base",
                   method_options={"world": "python", "task_types": ["deduction", "induction"]})
    chosen = model_measures(run)
    assert chosen.kind == "selfplay" and chosen.fields == {"world": "python", "task_types": ["deduction", "induction"]}
    fields = default_measures([str(run)]).fields
    assert (fields["world"], fields["task_types"], fields["text"]) == ("python", ["deduction", "induction"], [])
    checkpoint = run_json(run / "checkpoints" / "step-00000004", objective="selfplay", base_model="/base")
    assert model_measures(checkpoint).fields["world"] == "auto" and "sp step-00000004" in model_measures(
        checkpoint).note
    # GRPO on a task world's tasks (as the `tasks` verb writes them) is self-play's kind; on other prompts, chat
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"world": "mini", "type": "deduction", "program": "f = lambda x: x",
                                 "inputs": ["1"], "outputs": ["1"], "prompt": "p", "answer": "1"}) + "\n")
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text(json.dumps({"prompt": "2+2?", "answer": "4"}) + "\n")
    from_world = run_json(tmp_path / "grpo-world", objective="grpo", base_model="/base", data=[str(tasks)])
    assert model_measures(from_world).kind == "selfplay" and default_measures(
        [str(from_world)]).fields["world"] == "mini"
    plain = run_json(tmp_path / "grpo-plain", objective="grpo", base_model="/base", data=[str(prompts)])
    assert model_measures(plain).kind == "chat"


def test_a_chat_model_with_a_question_file_is_asked_its_questions_by_contains(tmp_path: Path) -> None:
    chat = hf_folder(tmp_path / "instruct", OWN_TEMPLATE)
    assert model_measures(chat).kind == "chat"
    with_qa = default_measures([str(chat)], qa="questions.jsonl")
    assert with_qa.fields["world"] == "none" and with_qa.fields["qa_match"] == "contains"
    assert "contains" in with_qa.note
    without = default_measures([str(chat)])  # no question file: the task world it would play
    assert without.fields["world"] == "auto" and without.fields["qa_match"] == "contains"
    sft = run_json(tmp_path / "sft", objective="sft", base_model=str(chat), data=["chats.jsonl"])
    assert model_measures(sft).kind == "chat"
    # a base without a template of its own (the one every tokenizer trained here gets) is a language model
    base = hf_folder(tmp_path / "base", CHAT_TEMPLATE)
    chosen = default_measures([str(base)])
    assert chosen.kind == "language" and chosen.fields["world"] == "none" and chosen.fields["text"] == []
    assert chosen.fields["qa_match"] == "exact" and "text you give" in chosen.note


def test_models_of_different_kinds_meet_every_measure_that_fits_one_of_them(pretrained, tmp_path: Path) -> None:
    dataset, run = pretrained
    sp = run_json(tmp_path / "sp", objective="selfplay", base_model=str(run), method_options={"world": "mini"})
    chosen = default_measures([str(run), str(sp)])
    assert chosen.kind == "mixed" and chosen.fields["world"] == "mini" and chosen.fields["text"] == [str(dataset)]
    assert default_measures([]).kind == "none"
    with pytest.raises(UserError, match="does not exist"):
        default_measures([str(tmp_path / "no-such-model")])


def test_fields_a_person_changed_are_not_refilled() -> None:
    filled = {"world": "none", "text": ["ds"], "qa_match": "exact"}
    shown = {"world": "mini", "text": ["ds"], "qa_match": "exact"}  # the person chose a world
    fitting = {"world": "python", "text": [], "qa_match": "contains"}
    assert fields_to_refill(shown, filled, fitting) == {"text": [], "qa_match": "contains"}
    assert fields_to_refill(shown, {}, fitting) == fitting  # nothing filled yet: all of them


@pytest.fixture(scope="module")
def chat_tokenizer():
    tok = hf_tokenizer(train_tokenizer([REPLY, "[user] [assistant] Capital of France?"] * 10, "byte-bpe", 300))
    tok.chat_template = OWN_TEMPLATE
    return tok


def test_a_chat_reply_counts_when_it_contains_the_answer(monkeypatch, chat_tokenizer, tmp_path: Path) -> None:
    questions = tmp_path / "qa.jsonl"
    questions.write_text('{"question": "Capital of France?", "answer": "Paris"}\n'
                         '{"question": "Capital of Italy?", "answer": "Rome"}\n')
    reply = chat_tokenizer.encode(REPLY, add_special_tokens=False)
    monkeypatch.setattr(qa_module, "sample_completions", lambda model, prompts, options: [reply for _ in prompts])
    chat = make_prompter(chat_tokenizer, "auto")
    assert chat.chat
    got = drain(ask_questions(None, chat, questions, QASettings(max_len=64, max_new_tokens=8)))
    assert (got["qa_match"], got["qa_accuracy"], got["qa_exact"], got["qa_contains"]) == ("contains", 0.5, 0.0, 0.5)
    exact = drain(ask_questions(None, chat, questions, QASettings(max_len=64, max_new_tokens=8, how="exact")))
    assert (exact["qa_match"], exact["qa_accuracy"]) == ("exact", 0.0)  # still there when asked for
    plain = make_prompter(chat_tokenizer, "plain")
    assert drain(ask_questions(None, plain, questions, QASettings(max_len=64, max_new_tokens=8)))["qa_match"] == "exact"
    assert resolve_match("auto", True) == "contains" and resolve_match("contains", False) == "contains"
    with pytest.raises(UserError, match="unknown answer match"):
        resolve_match("fuzzy", True)
    assert "qa_match must be one of" in " ".join(EvalSpec(qa="q.jsonl", qa_match="fuzzy").validate())
