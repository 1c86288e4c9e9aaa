"""The measurements one by one: question files and answer matching, pass@k and intervals from scripted answers
(perplexity and bits per byte: test_perplexity.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from desktop_app.engine.data.tokenization import hf_tokenizer, train_tokenizer
from desktop_app.engine.errors import UserError
from desktop_app.engine.evaluate import heldout
from desktop_app.engine.evaluate.heldout import TypeResult, drain, solve_heldout, wilson
from desktop_app.engine.evaluate.qa import matches, read_questions
from desktop_app.engine.model.architecture import build_model
from desktop_app.engine.selfplay.prompting import make_prompter
from desktop_app.engine.specs import ModelSpec
from desktop_app.engine.tasks.mini_world import MiniWorld

TEXT = "the cat sat on the mat. a dog ran in the park. " * 6


@pytest.fixture(scope="module")
def model_and_tokenizer():
    tokenizer = hf_tokenizer(train_tokenizer([TEXT] * 4, "byte-bpe", 300, min_frequency=1))
    model = build_model(ModelSpec("llama", len(tokenizer), 32, 1, 2, 2, 64, 512), seed=0).eval()
    return model, tokenizer


def test_question_files_are_read_or_refused_by_line(tmp_path: Path) -> None:
    good = tmp_path / "qa.jsonl"
    good.write_text('{"question": "2+2?", "answer": 4}\n\n{"prompt": "Capital of France?", "answers": ["Paris"]}\n')
    assert read_questions(good) == [{"question": "2+2?", "answers": ["4"]},
                                    {"question": "Capital of France?", "answers": ["Paris"]}]
    for text, needle in (('{"question": "q"}\n', "line 1"), ("not json\n", "not JSON"), ("", "no questions"),
                         ('{"question": "", "answer": "a"}\n', "non-empty"), ('[1]\n', "an object")):
        bad = tmp_path / "bad.jsonl"
        bad.write_text(text)
        with pytest.raises(UserError, match=needle):
            read_questions(bad)


@pytest.mark.parametrize(("reply", "answers", "exact", "contains"), [
    ("Paris", ["Paris"], True, True),
    ("  paris.  \nIt is in France.", ["Paris"], True, True),
    ("The capital is Paris.", ["Paris"], False, True),
    ("I think <answer>**Paris**</answer>", ["paris"], True, True),
    ("Rome", ["Paris", "Rome"], True, True),
    ("Lyon", ["Paris"], False, False),
])
def test_answer_matching(reply: str, answers: list[str], exact: bool, contains: bool) -> None:
    assert matches(reply, answers) == (exact, contains)


def test_pass_at_k_and_intervals_from_scripted_answers(monkeypatch, model_and_tokenizer) -> None:
    _, tokenizer = model_and_tokenizer
    world = MiniWorld()
    tasks = world.generate("deduction", 10, 3)
    right = {t.program: world.reference_answer(t) for t in tasks}

    def scripted(model, prompter, world, part, rollout):
        # greedy: the first 4 tasks right; sampled: the first 7 tasks right in one sample of each
        samples = rollout.samples
        out = []
        for task in part:
            index = tasks.index(task)
            for s in range(samples):
                good = index < 4 if samples == 1 else (index < 7 and s == samples - 1)
                out.append(right[task.program] if good else "0)")
        return out

    monkeypatch.setattr(heldout, "_replies", scripted)
    results = drain(solve_heldout(None, make_prompter(tokenizer, "plain"), world, {"deduction": tasks}, max_len=64,
                                  max_new_tokens=8, samples=3, batch=4))
    r = results["deduction"]
    assert (r.n, r.solved, r.k, r.solved_at_k) == (10, 4, 3, 7)
    metrics = r.metrics()
    assert metrics["solve_rate/deduction"] == 0.4 and metrics["pass@3/deduction"] == 0.7
    low, high = metrics["solve_rate/deduction/ci95"]
    assert (round(low, 3), round(high, 3)) == (round(wilson(4, 10)[0], 3), round(wilson(4, 10)[1], 3))
    assert 0.15 < low < 0.4 < high < 0.7  # Wilson at 4/10: about 0.17-0.69
    assert wilson(0, 400)[0] == 0.0 and wilson(400, 400)[1] == 1.0
    assert TypeResult("x", 400, 120).metrics()["solve_rate/x/ci95"][1] - 0.3 < 0.05  # 400 tasks: within 0.05


def test_task_types_share_batches_and_each_type_is_counted_apart(monkeypatch, model_and_tokenizer) -> None:
    """Types whose answers are cut alike share batches (sorted by prompt length): fewer, fuller batches; each
    type's solves still land on its own row of the table."""
    _, tokenizer = model_and_tokenizer
    world = MiniWorld()
    sets = {t: world.generate(t, n, 5) for t, n in (("deduction", 7), ("abduction", 5), ("induction", 6))}
    right = {(t.type, t.program): world.reference_answer(t) for tasks in sets.values() for t in tasks}
    seen: list[list[str]] = []

    def scripted(model, prompter, world, part, rollout):
        seen.append([t.type for t in part])
        return [right[t.type, t.program] if t.type != "abduction" else "nonsense" for t in part]

    monkeypatch.setattr(heldout, "_replies", scripted)
    prompter = make_prompter(tokenizer, "plain")
    lines = {t: prompter.answer_lines(world, t) for t in sets}
    results = drain(solve_heldout(None, prompter, world, sets, max_len=64, max_new_tokens=8, batch=8))
    assert [(r.n, r.solved) for r in results.values()] == [(7, 7), (5, 0), (6, 6)]
    assert sorted(t for part in seen for t in part) == sorted(t for t, tasks in sets.items() for _ in tasks)
    assert all(len(part) <= 8 and len({lines[t] for t in part}) == 1 for part in seen)  # cut alike, together
    if len(set(lines.values())) == 1:
        assert len(seen) == 3 and any(len(set(part)) > 1 for part in seen)  # 18 tasks: 8 + 8 + 2, types mixed


def test_the_automatic_batch_evens_out_about_a_hundred_prompts_on_a_cpu() -> None:
    from desktop_app.engine.evaluate.runner import batch_size

    assert batch_size(0, 300, "cpu") == 100 and batch_size(0, 210, "cpu") == 70 and batch_size(0, 30, "cpu") == 30
    assert batch_size(0, 300, "cuda") == 150 and batch_size(0, 1200, "cuda") == 240
    assert batch_size(17, 300, "cpu") == 17  # as asked


def test_an_evaluation_takes_the_cores_other_programs_leave_idle(monkeypatch) -> None:
    from desktop_app.engine import devices
    from desktop_app.engine.evaluate import runner
    from desktop_app.engine.evaluate.runner import eval_threads

    busy = devices.busy_cores(0.05)
    assert busy is None or 0.0 <= busy <= (os.cpu_count() or 1)
    monkeypatch.setattr(runner, "cpu_cores", lambda: 4)
    for others, threads in [(0.2, None), (1.1, 3), (2.6, 1), (7.0, 1)]:
        monkeypatch.setattr(runner, "busy_cores", lambda seconds=0.25, others=others: others)
        got, why = eval_threads(0)
        assert got == threads, (others, why)
        assert (why == "4 CPU threads") if threads is None else ("of 4 cores busy" in why)
    assert eval_threads(3) == (3, "3 CPU thread(s) as asked")
    monkeypatch.setattr(runner, "busy_cores", lambda seconds=0.25: None)  # no counters: the load average
    monkeypatch.setattr("os.getloadavg", lambda: (6.0, 6.0, 6.0))
    assert eval_threads(0)[0] == 1
