"""The python task world: generation, validation of proposals, and checking that cannot be forged."""

from __future__ import annotations

import re
import sys

import pytest

from desktop_app.engine.tasks import Task, get_world, python_world
from desktop_app.engine.tasks.base import PENALTY_FORMAT, PENALTY_UNPARSEABLE, REWARD_CORRECT
from desktop_app.engine.tasks.python_programs import Program
from desktop_app.engine.tasks.python_world import GEN_OUTPUT_CHARS, IDENTITY_SEED, PythonWorld

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


# -- generation at scale, held-out sets, triviality --------------------------------------------------------------
def shape(program: str) -> str:
    """Numbers and strings blanked: programs equal up to their constants share a shape."""
    return re.sub(r"\d+", "N", re.sub(r'"[^"]*"|\'[^\']*\'', "S", program))


def test_heldout_size_is_a_hundred_per_type() -> None:
    assert PythonWorld.heldout_size == 100


def test_heldout_set_has_its_own_stream(world) -> None:
    held = world.heldout_set("deduction", 20, seed=7)
    assert len(held) == 20 and held == world.heldout_set("deduction", 20, seed=7)
    train = world.generate("deduction", 20, seed=7)
    assert not {t.program for t in held} & {t.program for t in train}
    assert held[:10] == world.heldout_set("deduction", 10, seed=7)  # the first tasks do not depend on the count


@pytest.mark.parametrize("task_type", ["deduction", "abduction", "induction"])
def test_a_hundred_heldout_programs_are_kept_out_of_a_thousand_training_tasks(world, task_type: str) -> None:
    held = world.heldout_set(task_type, 100, seed=3)
    kept_out = {t.program for t in held}
    train = world.generate(task_type, 1_000, seed=3, exclude=kept_out)
    assert len(kept_out) == 100 and len(train) == 1_000 and len({t.program for t in train}) == 1_000
    assert not kept_out & {t.program for t in train}
    # nor are they the training programs with other constants, but for a few (measured: 2-4 of 100)
    assert sum(shape(p) in {shape(t.program) for t in train} for p in kept_out) <= 15
    tasks = held + train
    checks = world.check(tasks, [world.reference_answer(t) for t in tasks])
    assert all(c.correct for c in checks), next(c for c in checks if not c.correct)
    assert all(len(o) <= GEN_OUTPUT_CHARS for t in tasks for o in t.outputs)
    if task_type == "induction":
        assert all(t.shown == 3 and len(set(t.inputs)) == 6 for t in tasks)


def proposal(program: str, *calls: str) -> str:
    return f"```python\n{program}```\n" + "\n".join(f"Input: f({c})" for c in calls)


TRIVIAL = {
    "constant": ("def f(x):\n    return 7\n", "3"),
    "constant, computed": ("def f(s):\n    n = len(s)\n    return n * 0 + 4\n", "'abc'"),
    "identity behind a constant condition": ("def f(x):\n    return x if 1 > 0 else x\n", "5"),
    "identity behind a real condition": ("def f(x):\n    return x if x > 3 else x\n", "5"),
    "identity via a loop": ("def f(xs):\n    out = []\n    for v in xs:\n        out.append(v)\n    return out\n",
                            "[1, 2, 3]"),
    "identity, renamed": ("def f(y):\n    return y\n", "[1, 2, 3]"),
    "one argument of two, unchanged": ("def f(xs, k):\n    return xs[:k + 99]\n", "[4, 5], 1"),
}
NOT_TRIVIAL = {
    "constant": ("def f(x):\n    return x + 7\n", "3"),
    "constant, computed": ("def f(s):\n    n = len(s)\n    return n * 2 + 4\n", "'abc'"),
    "identity behind a constant condition": ("def f(x):\n    return x + 1 if 1 > 0 else x\n", "5"),
    "identity behind a real condition": ("def f(x):\n    return x if x > 3 else -x\n", "5"),
    "identity via a loop": ("def f(xs):\n    out = []\n    for v in xs:\n        out.append(v + 1)\n    return out\n",
                            "[1, 2, 3]"),
    "identity, renamed": ("def f(y):\n    return y[::-1]\n", "[1, 2, 3]"),
    "one argument of two, unchanged": ("def f(xs, k):\n    return xs[:k]\n", "[4, 5], 1"),
}


@pytest.mark.parametrize("name", list(TRIVIAL))
def test_trivial_proposals_are_refused_and_their_nontrivial_twins_pass(world, name: str) -> None:
    trivial, fine = world.validate("deduction", [proposal(*TRIVIAL[name]), proposal(*NOT_TRIVIAL[name])])
    assert not trivial.valid and trivial.reason.startswith("trivial: ") and not trivial.format_error, trivial
    assert getattr(trivial, "trivial", True)
    assert fine.valid, fine


def test_a_trivial_induction_proposal_is_refused(world) -> None:
    (verdict,) = world.validate("induction", [proposal("def f(x):\n    return 0 * x\n", "1", "2", "3", "4")])
    assert verdict.reason.startswith("trivial: ")


def test_the_seed_identity_validates_when_its_caller_allows_it(world) -> None:
    # the Absolute Zero seed (objectives/selfplay.py): the caller's own task, never a model's proposal
    single = proposal(IDENTITY_SEED, "[1, 2, 3]")
    induction = proposal(IDENTITY_SEED, "1", "[2, 3]", "'ab'", "4") + "\nMessage: identity"
    (seed,) = world.validate("deduction", [single], allow_identity=True)
    assert seed.valid and seed.task.program == IDENTITY_SEED and seed.task.outputs == ("[1, 2, 3]",)
    (seed,) = world.validate("induction", [induction], allow_identity=True)
    assert seed.valid and seed.task.outputs == ("1", "[2, 3]", "'ab'", "4") and seed.task.message == "identity"
    assert world.check([seed.task], [world.reference_answer(seed.task)])[0].correct
    (proposed,) = world.validate("deduction", [single])  # the same text from a proposer: trivial
    assert proposed.reason == "trivial: f returns its input unchanged"
    (constant,) = world.validate("deduction", [proposal("def f(x):\n    return 1\n", "2")], allow_identity=True)
    assert constant.reason.startswith("trivial: ")  # allow_identity lets the identity through, nothing else


def test_generation_drops_trivial_drafts(world, monkeypatch) -> None:
    made = iter(range(10_000))

    def alternate(rng):  # a constant program, then one that reads its input, and so on
        n = next(made)
        body = f"return {n}" if n % 2 == 0 else f"return x * 2 + {n}"
        return Program(f"def f(x):\n    {body}\n", "int")

    monkeypatch.setattr(python_world, "random_program", alternate)
    tasks = world.generate("deduction", 10, seed=1)
    assert len(tasks) == 10 and all("x * 2" in t.program for t in tasks)
