"""The mini task world: generation, prompts, validation of proposals, and verdicts that cannot be forged."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from desktop_app.engine.tasks import Task, get_world
from desktop_app.engine.tasks.base import PENALTY_FORMAT, PENALTY_UNPARSEABLE, REWARD_CORRECT, REWARD_WRONG
from desktop_app.engine.tasks.mini_lang import parse_program
from desktop_app.engine.tasks.mini_world import MiniWorld

REWARDS = {"correct": REWARD_CORRECT, "wrong": REWARD_WRONG, "format": PENALTY_FORMAT,
           "unparseable": PENALTY_UNPARSEABLE}


@pytest.fixture(scope="module")
def world() -> MiniWorld:
    world = get_world("mini")
    assert isinstance(world, MiniWorld)
    return world


DEDUCTION = Task("mini", "deduction", "f = lambda x: x * 9", ("25",), ("225",))
ABDUCTION = Task("mini", "abduction", "f = lambda x: sorted(x)[:2]", ("[5, 1, 3]",), ("[1, 3]",))
INDUCTION = Task("mini", "induction", "f = lambda x: x * 2 + 1", ("1", "2", "3", "10", "-4", "0"),
                 ("3", "5", "7", "21", "-7", "1"), shown=3)


@pytest.mark.parametrize("task, answer, status", [
    (DEDUCTION, "225", "correct"),
    (DEDUCTION, "\n  225  \n\n", "correct"),  # blank lines around the one answer line are fine
    (DEDUCTION, "226", "wrong"),
    (DEDUCTION, "225.0", "wrong"),  # values compare strictly by type
    (DEDUCTION, "True", "wrong"),
    (DEDUCTION, "225\nbecause 25 * 9", "format"),
    (DEDUCTION, "226\nor maybe 225", "format"),  # junk costs even when the first line is wrong
    (DEDUCTION, "the answer is 225", "unparseable"),
    (DEDUCTION, "", "unparseable"),
    (DEDUCTION, "0) or (1", "unparseable"),
    (DEDUCTION, "__import__('os').system('true')", "unparseable"),
    (DEDUCTION, "225 if True else 0", "unparseable"),
    (DEDUCTION, "9" * 5000, "unparseable"),
    (DEDUCTION, "[" * 200 + "]" * 200, "unparseable"),
    (ABDUCTION, "[3, 1]", "correct"),
    (ABDUCTION, "[9, 3, 1]", "correct"),  # any input that gives the output
    (ABDUCTION, "[5, 1, 3]", "correct"),
    (ABDUCTION, "[3, 2]", "wrong"),
    (ABDUCTION, "5", "wrong"),  # f(5) fails: sorted() of an int
    (ABDUCTION, "(3, 1)", "wrong"),  # a literal, but not a mini value
    (ABDUCTION, "'13'", "wrong"),
    (ABDUCTION, "[3, 1]\n[1, 3]", "format"),
    (ABDUCTION, "f([3, 1])", "unparseable"),
    (ABDUCTION, "0) or (1", "unparseable"),
    (ABDUCTION, "__import__('os')", "unparseable"),
    (ABDUCTION, "[1, 3] + [0]", "unparseable"),
    (INDUCTION, "lambda x: 2 * x + 1", "correct"),
    (INDUCTION, "f = lambda x: x + x + 1", "correct"),
    (INDUCTION, "lambda n: n - (-n) + True", "correct"),  # True + int is an int, as in Python
    (INDUCTION, "lambda x: [3, 5, 7][x - 1]", "wrong"),  # fits the shown pairs only: fails on f(10)
    (INDUCTION, "lambda x: 2 * x + 1 if x < 4 else 0", "wrong"),  # fits the shown pairs only
    (INDUCTION, "lambda x: x // 0", "wrong"),
    (INDUCTION, "lambda x: 2 * x + 1\nlambda x: x", "format"),
    (INDUCTION, "def f(x):\n    return 2 * x + 1", "unparseable"),
    (INDUCTION, "lambda x: x.bit_length()", "unparseable"),
    (INDUCTION, "lambda x: __import__('os').system('touch /tmp/mini-pwned')", "unparseable"),
    (INDUCTION, "__import__('os')", "unparseable"),
    (INDUCTION, "0) or (1", "unparseable"),
    (INDUCTION, "lambda x: [y * 2 + 1 for y in [x]][0]", "unparseable"),
    (INDUCTION, "no idea", "unparseable"),
])
def test_verdicts_and_rewards(world: MiniWorld, task: Task, answer: str, status: str) -> None:
    (check,) = world.check([task], [answer])
    assert check.status == status, check
    assert check.reward == REWARDS[status]
    assert status == "correct" or check.reason


def test_code_in_answers_is_never_run(world: MiniWorld, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "ran"
    attack = f"__import__('os').system('touch {marker}')"
    answers = [attack, f"lambda x: {attack}", f"[{attack}]", f"0) or ({attack}"]
    for task in (DEDUCTION, ABDUCTION, INDUCTION):
        checks = world.check([task] * len(answers), answers)
        assert all(c.status == "unparseable" for c in checks), checks
    assert not marker.exists()


@pytest.mark.parametrize("task_type", ["deduction", "abduction", "induction"])
def test_generated_tasks_are_seeded_valid_and_solved_by_their_reference(world: MiniWorld, task_type: str) -> None:
    tasks = world.generate(task_type, 200, seed=7)
    assert len(tasks) == 200 and len({t.program for t in tasks}) == 200
    assert tasks == world.generate(task_type, 200, seed=7)
    assert tasks != world.generate(task_type, 200, seed=8)
    assert all(t.world == "mini" and t.type == task_type for t in tasks)
    checks = world.check(tasks, [world.reference_answer(t) for t in tasks])
    assert all(c.correct for c in checks), [c for c in checks if not c.correct][:3]
    for task in tasks:  # every stored output is what the program gives
        program = parse_program(task.program)
        assert program.source == task.program and program.uses_param
    if task_type == "induction":
        assert all(t.shown == 3 and len(t.inputs) == 6 == len(t.outputs) for t in tasks)
        assert all(len(set(t.outputs[:3])) > 1 for t in tasks)
    else:
        assert all(len(t.inputs) == 1 == len(t.outputs) for t in tasks)
    # a proposal written from a generated task validates back into the same task
    back = world.validate(task_type, [world.proposal_text(t) for t in tasks[:50]])
    assert [v.task for v in back] == tasks[:50]


def test_solve_prompts_and_reference_answers(world: MiniWorld) -> None:
    assert world.solve_prompt(DEDUCTION) == "f = lambda x: x * 9\nf(25)="
    assert world.reference_answer(DEDUCTION) == "225"
    assert world.solve_prompt(ABDUCTION) == "f = lambda x: sorted(x)[:2]\nf(?)=[1, 3]\n?="
    assert world.reference_answer(ABDUCTION) == "[5, 1, 3]"
    assert world.solve_prompt(INDUCTION) == "f(1)=3\nf(2)=5\nf(3)=7\nf="  # the held-out pairs stay hidden
    assert world.reference_answer(INDUCTION) == "lambda x: x * 2 + 1"
    hinted = Task("mini", "induction", INDUCTION.program, INDUCTION.inputs, INDUCTION.outputs, "doubles", 3)
    assert world.solve_prompt(hinted).endswith("f(3)=7\n# doubles\nf=")


def test_propose_prompt_shows_k_references_in_the_proposal_format(world: MiniWorld) -> None:
    refs = world.generate("deduction", 5, seed=1)
    prompt = world.propose_prompt("deduction", refs, random.Random(0))
    assert prompt.startswith("# mini deduction tasks\n") and prompt.endswith("# a new deduction task:")
    assert prompt.count("\ninput: ") == 3 and prompt.count("f = lambda") == 3
    assert prompt == world.propose_prompt("deduction", refs, random.Random(0))
    two = MiniWorld(options={"references": 2}).propose_prompt("induction", world.generate("induction", 4, 1),
                                                               random.Random(0))
    assert two.count("\ninputs: [") == 2


GOOD = {
    "deduction": "f = lambda x: sorted(x)[::-1]\ninput: [2, 9, 4]",
    "abduction": "# a new abduction task\nf = lambda x: x * 3 - 1\ninput: 4\nf = lambda x: more junk ignored",
    "induction": "lambda x: filter(lambda y: y > x[0], x)\ninputs: [[1, 5, 0], [3], [2, 2, 7], [0, -1, 4, 1]]\n"
                 "message: keeps what beats the head",
}


def test_validate_accepts_good_proposals(world: MiniWorld) -> None:
    (ded,) = world.validate("deduction", [GOOD["deduction"]])
    assert ded.valid and ded.task.outputs == ("[9, 4, 2]",) and ded.task.inputs == ("[2, 9, 4]",)
    (abd,) = world.validate("abduction", [GOOD["abduction"]])
    assert abd.valid and abd.task.program == "f = lambda x: x * 3 - 1" and abd.task.outputs == ("11",)
    (ind,) = world.validate("induction", [GOOD["induction"]])
    assert ind.valid and ind.task.program == "f = lambda x: filter(lambda y: y > x[0], x)"
    assert ind.task.outputs == ("[5]", "[]", "[7]", "[4, 1]") and ind.task.shown == 2
    assert ind.task.message == "keeps what beats the head"
    assert world.check([ind.task], [world.reference_answer(ind.task)])[0].correct


@pytest.mark.parametrize("task_type, text, format_error, reason", [
    ("deduction", "", True, "program line"),
    ("deduction", "f = lambda x: x + 1", True, "program line"),
    ("deduction", "f = lambda x: x + 1\nf(3)", True, "'input:'"),
    ("deduction", "f = lambda x: x.real\ninput: 3", True, "Attribute"),
    ("deduction", "def f(x): return x\ninput: 3", True, "FunctionDef"),
    ("deduction", "f = lambda x: x +\ninput: 3", True, "not a valid program"),
    ("deduction", "f = lambda x: x + 1\ninput: __import__('os')", True, "literal"),
    ("deduction", "f = lambda x: x + 1\ninput: 0) or (1", True, "literal"),
    ("abduction", "f = lambda x: x[3]\ninput: [1]", False, "index out of range"),
    ("abduction", "f = lambda x: 10 // x\ninput: 0", False, "division by zero"),
    ("deduction", "f = lambda x: x + 1\ninput: 'a'", False, "mini values"),
    ("deduction", "f = lambda x: x * 999\ninput: [1, 2, 3]", False, "list too long"),
    ("deduction", "f = lambda x: range(150)\ninput: 0", False, "output too long"),
    ("deduction", "f = lambda x: x * x * x * x\ninput: 99999", False, "integer out of range"),
    ("induction", "f = lambda x: x + 1\ninputs: 3", False, "list of 4 to 10 inputs"),
    ("induction", "f = lambda x: x + 1\ninputs: [1, 2, 3]", False, "list of 4 to 10 inputs"),
    ("induction", "f = lambda x: x + 1\ninputs: [1, 2, 2, 3]", False, "differ"),
    ("induction", "f = lambda x: x + 1\ninput: [1, 2, 3, 4]", True, "'inputs:'"),
])
def test_validate_refuses_bad_proposals(world: MiniWorld, task_type: str, text: str, format_error: bool,
                                        reason: str) -> None:
    (verdict,) = world.validate(task_type, [text])
    assert not verdict.valid and verdict.format_error is format_error
    assert reason in verdict.reason, verdict.reason


def test_seed_corpus_and_heldout_sets(world: MiniWorld, tmp_path: Path) -> None:
    path = tmp_path / "corpus.txt"
    tasks = world.write_seed_corpus(path, 300, seed=3)
    text = path.read_text()
    examples = text.split("\n\n")
    assert len(tasks) == 300 and len(examples) == 300
    assert {t.type for t in tasks} == {"deduction", "abduction", "induction"}
    assert tasks[:100] == world.generate("deduction", 100, 3)
    assert world.example_text(tasks[0]) in text and text.endswith("\n")
    assert any(e.startswith("f(") and "\nf= lambda " in e for e in examples)  # induction examples
    world.write_seed_corpus(tmp_path / "again.txt", 300, seed=3)
    assert (tmp_path / "again.txt").read_text() == text  # the same seed writes the same corpus
    corpus_programs = {t.program for t in tasks}
    held = world.heldout_set("deduction", 100, seed=3, exclude=corpus_programs)
    assert len(held) == 100 and held == world.heldout_set("deduction", 100, seed=3, exclude=corpus_programs)
    assert not corpus_programs & {t.program for t in held}
    assert all(c.correct for c in world.check(held, [world.reference_answer(t) for t in held]))

    with_proposals = world.write_seed_corpus(tmp_path / "p.txt", 120, seed=3, types=["induction"], proposals=True)
    ptext = (tmp_path / "p.txt").read_text()
    assert len(with_proposals) == 120 and ptext.count("# a new induction task: f = ") == 30


def test_broken_tasks_get_an_error_not_a_reward(world: MiniWorld) -> None:
    broken = Task("mini", "abduction", "f = lambda x: x.y", ("1",), ("1",))
    (check,) = world.check([broken], ["1"])
    assert check.status == "error" and check.reward == 0.0
