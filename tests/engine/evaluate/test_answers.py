"""Answers inside chat replies (tasks/answers.py): tags, fences, labels and prose; nothing is evaluated."""

from __future__ import annotations

import pytest

from desktop_app.engine.tasks.answers import answer_block, extract_answer


@pytest.mark.parametrize(("reply", "kind", "expected"), [
    ("4", "value", "4"),
    ("The output is 4.", "value", "4"),
    ("<answer>[1, 2]</answer>", "value", "[1, 2]"),
    ("I think <answer> 'ab' </answer> and that is it", "value", "'ab'"),
    ("<answer>\n7\n</answer>", "value", "7"),
    ("<answer>6", "value", "6"),  # cut off before the closing tag
    ("Let me think. x = 3 so f(3) = 4\nSo the answer is **5**", "value", "5"),  # reasoning first: the last one
    ("4\nbecause f adds one to 3", "value", "4"),  # the bare answer first: the first one
    ("```\n'ab'\n```", "value", "'ab'"),
    ("Output: {'a': 1}", "value", "{'a': 1}"),
    ("f(3) = True", "value", "True"),
    ("Input: f([1, 2], 3)", "call", "f([1, 2], 3)"),
    ("The input is f(5).", "call", "f(5)"),
    ("<answer>f('x', 2)</answer>", "call", "f('x', 2)"),
    ("```python\ndef f(x):\n    return x // 5\nprint(f(283))  # Output: 56\n```", "call", "f(283)"),
    ("f('a)b', [1, (2, 3)]) is it", "call", "f('a)b', [1, (2, 3)])"),
    ("```python\ndef f(x):\n    return x + 1\n```\nThis adds one.", "program", "def f(x):\n    return x + 1"),
    ("Here: def f(x):\n    return x\nThat is it.", "program", "def f(x):\n    return x\n"),
    ("f = lambda x: x + 1\nexplanation", "program", "f = lambda x: x + 1"),
    ("nothing here", "value", None),
    ("", "value", None),
    ("f(__import__('os'))", "call", None),  # not literal arguments: no answer (never evaluated)
])
def test_extract_answer(reply: str, kind: str, expected: str | None) -> None:
    assert extract_answer(reply, kind) == expected


def test_answer_block_is_the_last_non_empty_one() -> None:
    assert answer_block("<answer>1</answer> then <answer>2</answer><answer> </answer>") == "2"
    assert answer_block("no tags") is None
    assert answer_block("x" * 30_000 + "<answer>1</answer>") is None  # far past where an answer is looked for
