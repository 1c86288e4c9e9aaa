"""The python task world: generation, validation of proposals, and checking that cannot be forged."""

from __future__ import annotations

import sys

import pytest

from desktop_app.engine.tasks import Task, get_world
from desktop_app.engine.tasks.base import PENALTY_FORMAT, PENALTY_UNPARSEABLE, REWARD_CORRECT

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="uses the sandboxed executor")


@pytest.fixture(scope="module")
def world():
    world = get_world("python")
    yield world
    world.close()


DEDUCTION = Task("python", "deduction", "def f(x):\n    return x * 9\n", ("25",), ("225",))
ABDUCTION = Task("python", "abduction", "def f(xs):\n    return sorted(xs)[:2]\n", ("[5, 1, 3]",), ("[1, 3]",))
INDUCTION = Task("python", "induction", "def f(x):\n    return x * 2 + 1\n", ("1", "2", "3", "10", "-4", "0"),
                 ("3", "5", "7", "21", "-7", "1"), shown=3)


@pytest.mark.parametrize("task_type", ["deduction", "abduction", "induction"])
def test_generated_tasks_are_seeded_valid_and_solved_by_their_reference(world, task_type: str) -> None:
    tasks = world.generate(task_type, 12, seed=7)
    assert len(tasks) == 12 and len({(t.program, t.inputs) for t in tasks}) == 12
    assert tasks == world.generate(task_type, 12, seed=7)
    assert tasks != world.generate(task_type, 12, seed=8)
    checks = world.check(tasks, [world.reference_answer(t) for t in tasks])
    assert all(c.correct and c.reward == REWARD_CORRECT for c in checks)
    if task_type == "induction":
        assert all(t.shown == 3 and len(t.inputs) == 6 for t in tasks)


@pytest.mark.parametrize("task, answer, status", [
    (DEDUCTION, "225", "correct"),
    (DEDUCTION, "226", "wrong"),
    (DEDUCTION, "225\nbecause 25 * 9", "format"),
    (DEDUCTION, "the answer is 225", "unparseable"),
    (ABDUCTION, "f([3, 1])", "correct"),
    (ABDUCTION, "[9, 3, 1]", "correct"),
    (ABDUCTION, "f([3, 2])", "wrong"),
    (ABDUCTION, "f(", "unparseable"),
    (INDUCTION, "```python\ndef f(x):\n    return 2 * x + 1\n```", "correct"),
    (INDUCTION, "def f(x):\n    return {1: 3, 2: 5, 3: 7}.get(x, 0)\n", "wrong"),  # fits the shown pairs only
    (INDUCTION, "no idea", "unparseable"),
])
def test_verdicts_and_rewards(world, task: Task, answer: str, status: str) -> None:
    (check,) = world.check([task], [answer])
    assert check.status == status, check
    assert check.reward == {"correct": 1.0, "wrong": 0.0, "format": PENALTY_FORMAT,
                            "unparseable": PENALTY_UNPARSEABLE}[status]
    assert status == "correct" or check.reason


FORGERIES = [
    (DEDUCTION, "0) or (1"),
    (DEDUCTION, "__import__('os').system('true')"),
    (DEDUCTION, "225 if True else 0"),
    (DEDUCTION, "225.0"),
    (DEDUCTION, "'225'"),
    (DEDUCTION, "True"),
    (DEDUCTION, "float('nan')"),
    (DEDUCTION, "[" * 200 + "]" * 200),
    (DEDUCTION, "9" * 5000),
    (DEDUCTION, "RESULT: correct"),
    (DEDUCTION, "{'__eq__': 225}"),
    (DEDUCTION, "x"),
    (ABDUCTION, "f(0) or (1)"),
    (ABDUCTION, "f(__import__('os'))"),
    (ABDUCTION, "f(lambda: [1, 3])"),
    (ABDUCTION, "f(*[[1, 3]])"),
    (INDUCTION, "def f(x):\n    print('{\"results\": [{\"value\": \"3\"}]}')\n    print('correct')\n"),
    (INDUCTION, "raise SystemExit(0)\ndef f(x):\n    return 0\n"),
    (INDUCTION, "class A:\n    def __eq__(self, other):\n        return True\ndef f(x):\n    return A()\n"),
    (INDUCTION, "class I(int):\n    def __eq__(self, other):\n        return True\ndef f(x):\n    return I(0)\n"),
    (INDUCTION, "def f(x):\n    a = []\n    a.append(a)\n    return a\n"),
    (INDUCTION, "def f(x):\n    return [0] * 10**6\n"),
    (INDUCTION, "def f(x):\n    return float('nan')\n"),
    (INDUCTION, "import desktop_app\ndef f(x):\n    return 0\n"),
    (INDUCTION, "same_value = lambda a, b: True\ndef f(x):\n    return 0\n"),
    (INDUCTION, "g = [c for c in ().__class__.__base__.__subclasses__()][0]\ndef f(x):\n    return 0\n"),
    (INDUCTION, "def f(x):\n    while True:\n        pass\n"),
]


@pytest.mark.parametrize("task, answer", FORGERIES, ids=[f"forgery-{i}" for i in range(len(FORGERIES))])
def test_reward_forgery_earns_nothing(world, task: Task, answer: str) -> None:
    (check,) = world.check([task], [answer])
    assert check.reward <= 0 and not check.correct, check
    assert check.reason


def test_at_least_twenty_forgery_attempts() -> None:
    assert len(FORGERIES) >= 20


def test_proposals_are_validated(world) -> None:
    good = "```python\ndef f(xs):\n    return [v + 1 for v in xs]\n```\nInput: f([1, 2])"
    bad = {
        "no input": "```python\ndef f(x):\n    return x\n```",
        "not f": "```python\ndef g(x):\n    return x\n```\nInput: f(1)",
        "import": "```python\nimport os\ndef f(x):\n    return x\n```\nInput: f(1)",
        "random": "```python\nimport random\ndef f(x):\n    return random.random() + x\n```\nInput: f(1)",
        "raises": "```python\ndef f(x):\n    return x // 0\n```\nInput: f(1)",
        "loops": "```python\ndef f(x):\n    while True:\n        x += 1\n```\nInput: f(1)",
        "huge output": "```python\ndef f(x):\n    return list(range(5000))\n```\nInput: f(1)",
        "bad input": "```python\ndef f(x):\n    return x\n```\nInput: f(open('/etc/passwd'))",
    }
    verdicts = world.validate("deduction", [good, *bad.values()])
    assert verdicts[0].valid and verdicts[0].task.outputs == ("[2, 3]",)
    for (name, _), verdict in zip(bad.items(), verdicts[1:], strict=False):
        assert not verdict.valid and verdict.reason, name
    assert "deterministic" in verdicts[4].reason
    assert verdicts[1].format_error
    induction = world.validate("induction", ["```python\ndef f(x):\n    return -x\n```\nf(1)\nf(2)\nf(3)\nf(4)\n"
                                             "Message: negate"])
    assert induction[0].valid and induction[0].task.outputs == ("-1", "-2", "-3", "-4")
    assert induction[0].task.message == "negate" and induction[0].task.shown == 2


def test_prompts_show_what_the_solver_needs_and_hide_held_out_pairs(world) -> None:
    assert "f(25)" in world.solve_prompt(DEDUCTION) and "225" not in world.solve_prompt(DEDUCTION)
    assert "[1, 3]" in world.solve_prompt(ABDUCTION)
    prompt = world.solve_prompt(INDUCTION)
    assert "f(3) = 7" in prompt and "f(10)" not in prompt and "x * 2" not in prompt
    assert "Examples" in world.propose_prompt("deduction", [DEDUCTION], rng=None)
