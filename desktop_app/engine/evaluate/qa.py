"""Questions and answers: a JSONL file of {"question": ..., "answer": ...} asked one by one, greedily.

A question goes to a chat model as one user turn through its chat template (to a model without one, as plain text
followed by a line break); the reply ends with the turn (or EOS). Matching ignores case, surrounding spaces and
end punctuation: *exact* compares the expected answer with the reply's answer (its last <answer> block, else its
first non-empty line); *contains* looks for it anywhere in the reply, and is what *auto* means for a model asked
through its chat template (a chat reply wraps its answer in a sentence: "The capital of France is Paris." is no
exact "Paris"). "prompt" is read for "question", and "answers" (a list) gives several accepted answers.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from desktop_app.engine.data.prompt_files import json_lines
from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Progress
from desktop_app.engine.selfplay.prompting import TaskPrompter
from desktop_app.engine.selfplay.rollout import RolloutOptions, sample_completions
from desktop_app.engine.tasks.answers import answer_block

MAX_QUESTIONS = 100_000


def read_questions(path: str | Path) -> list[dict[str, Any]]:
    """The file's records as {"question": str, "answers": [str, ...]}; UserError naming the first bad line."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise UserError(f"question file {file} does not exist")
    records = []
    with closing(json_lines(file, encoding="utf-8-sig", invalid="not JSON")) as lines:  # closed at once by a bad line
        for number, data in lines:
            if not isinstance(data, dict):
                raise UserError(f"{file.name} line {number}: expected an object with \"question\" and \"answer\"")
            question = data.get("question", data.get("prompt"))
            answers = data.get("answers", [data["answer"]] if "answer" in data else None)
            if not isinstance(question, str) or not question.strip():
                raise UserError(f"{file.name} line {number}: \"question\" must be a non-empty string")
            if not isinstance(answers, list) or not answers or not all(isinstance(a, (str, int, float))
                                                                       and not isinstance(a, bool) for a in answers):
                raise UserError(f"{file.name} line {number}: \"answer\" must be a string or a number (or "
                                "\"answers\" a list of them)")
            records.append({"question": question, "answers": [str(a) for a in answers]})
            if len(records) > MAX_QUESTIONS:
                raise UserError(f"{file.name} holds more than {MAX_QUESTIONS:,} questions")
    if not records:
        raise UserError(f"{file.name} holds no questions")
    return records


def normalise(text: str) -> str:
    """Lower case, inner spaces collapsed, surrounding spaces, quotes, markdown and end punctuation dropped."""
    text = re.sub(r"\s+", " ", text.replace("**", "").strip().lower())
    return text.strip(" \"'`").rstrip(".!?;:,").strip()


def reply_answer(reply: str) -> str:
    block = answer_block(reply)
    if block is not None:
        return block
    lines = [line for line in reply.splitlines() if line.strip()]
    return lines[0] if lines else ""


def matches(reply: str, answers: list[str]) -> tuple[bool, bool]:
    """(exact, contains) for one reply."""
    got, whole = normalise(reply_answer(reply)), normalise(reply)
    wanted = [normalise(a) for a in answers]
    return any(got == w for w in wanted), any(w and w in whole for w in wanted)


def resolve_match(how: str, chat: bool) -> str:
    """exact or contains: as asked, else (auto) contains for chat prompts, exact for plain ones."""
    if how in ("exact", "contains"):
        return how
    if how != "auto":
        raise UserError(f"unknown answer match {how!r}; choose auto, exact or contains")
    return "contains" if chat else "exact"


@dataclass(frozen=True)
class QASettings:
    """How ask_questions decodes and scores: the context (max_len), reply length, prompts per batch, and which
    match (`how`: "auto", "exact" or "contains") gives qa_accuracy."""

    max_len: int
    max_new_tokens: int
    batch: int = 16
    how: str = "auto"


@torch.no_grad()
def ask_questions(model: Any, prompter: TaskPrompter, path: str | Path, settings: QASettings) -> Iterator[Progress]:
    """Yield Progress per batch; return {"qa_accuracy" (by the match), "qa_match" (which: exact or contains),
    "qa_exact", "qa_contains", "questions"}."""
    records = read_questions(path)
    batch, how = settings.batch, resolve_match(settings.how, prompter.chat)
    greedy = RolloutOptions(max_new_tokens=settings.max_new_tokens, temperature=0.0, stop_ids=prompter.stop_ids,
                            max_len=settings.max_len, tokens=prompter.codec.vocab_size())
    exact = contains = 0
    for start in range(0, len(records), batch):
        part = records[start:start + batch]
        prompts = [prompter.question_ids(r["question"]) for r in part]
        ids = sample_completions(model, prompts, greedy)
        for record, completion in zip(part, ids, strict=True):
            e, c = matches(prompter.codec.decode(completion), record["answers"])
            exact += e
            contains += c
        yield Progress("questions", min(start + batch, len(records)), len(records), "questions")
    n = len(records)
    return {"qa_accuracy": (exact if how == "exact" else contains) / n, "qa_match": how, "qa_exact": exact / n,
            "qa_contains": contains / n, "questions": n}

