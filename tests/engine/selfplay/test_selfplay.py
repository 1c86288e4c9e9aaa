"""Absolute Zero self-play: one round's rewards from a scripted policy (hand-checkable), forged answers end
to end, training through the one loop with exact resume (buffers, round, weights), and bad options."""

from __future__ import annotations

import contextlib
import random
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from desktop_app.engine.data.tokenization import train_tokenizer
from desktop_app.engine.errors import UserError
from desktop_app.engine.events import Controls
from desktop_app.engine.model.architecture import build_model
from desktop_app.engine.objectives.base import TrainContext
from desktop_app.engine.objectives.selfplay import LOG_NAME, SelfPlayObjective
from desktop_app.engine.run_folder import read_metrics
from desktop_app.engine.specs import ModelSpec, RunConfig, TrainSpec
from desktop_app.engine.tasks import Task
from desktop_app.engine.tasks.mini_world import MiniWorld
from desktop_app.engine.train.loop import train

DED = Task("mini", "deduction", "f = lambda x: x + 1", ("3",), ("4",))
ABD = Task("mini", "abduction", "f = lambda x: x * 2", ("5",), ("10",))


@pytest.fixture(scope="module")
def tokenizer():
    world = MiniWorld(options={"depth": 2})
    texts = [world.example_text(t) for kind in ("deduction", "abduction") for t in world.generate(kind, 50, 1)]
    return train_tokenizer(texts, "bpe", 96, min_frequency=2)


def _set_up(tmp_path: Path, tokenizer, **options) -> SelfPlayObjective:
    objective = SelfPlayObjective({"task_types": ["deduction", "abduction"], "proposals_per_type": 2,
                                   "solver_tasks_per_type": 1, "solver_samples": 4, "seed_tasks_per_type": 0,
                                   "heldout_per_type": 2, "world_options": {"depth": 2}, **options})
    spec = ModelSpec("llama", tokenizer.get_vocab_size(), 32, 1, 2, 2, 64, 128)
    ctx = TrainContext(run_dir=tmp_path, config=RunConfig(), train_spec=TrainSpec(), device=torch.device("cpu"),
                       autocast=contextlib.nullcontext, seed=0, store=SimpleNamespace(context_length=128),
                       tokenizer=tokenizer)
    objective.setup(ctx, build_model(spec, seed=0))
    return objective


def _objective(tmp_path: Path, tokenizer, **options) -> SelfPlayObjective:
    objective = _set_up(tmp_path, tokenizer, **options)
    for task_type, buffer in objective.buffers.items():  # every buffer starts with the identity program
        assert [t.program for t in buffer.tasks] == ["f = lambda x: x"], task_type
        buffer.__init__()  # the hand-worked rounds below use their own buffer tasks only
    return objective


def _script(objective: SelfPlayObjective, outputs: dict[str, list[str]]) -> None:
    """Replace sampling by fixed texts, given per task type as its proposals, then its solver answers. A round
    decodes every type's proposals in one batch, then every type's answers in one batch."""
    count = objective.options.proposals_per_type
    types = [t for t in ("deduction", "abduction") if outputs[t]]
    queue = [text for t in types for text in outputs[t][:count]] + [text for t in types for text in outputs[t][count:]]

    objective.decodes = []  # (prompts, samples) of every decode

    def fake(part, samples: int, seed: int, max_lines: int, finished=None) -> tuple[list[list[int]], list[str]]:
        objective.decodes.append((len(part.prompts), samples))
        texts = [queue.pop(0) for _ in range(len(part.prompts) * samples)]
        return [[3]] * len(texts), texts

    objective._sample = fake


@pytest.mark.parametrize("lines_differ", [False, True])
def test_one_round_by_hand(tmp_path: Path, tokenizer, lines_differ: bool) -> None:
    objective = _objective(tmp_path, tokenizer)
    if lines_differ:  # types whose answers are cut after different line counts decode apart, in line order
        objective.prompter.answer_lines = lambda world, task_type: {"deduction": 1, "abduction": 2}[task_type]
    objective.buffers["deduction"].add(DED)
    objective.buffers["abduction"].add(ABD)
    # deduction: proposal 1 valid (f = lambda x: x - 1 on 9 -> 8), proposal 2 invalid; the solver sees the
    # new task and answers 8, 8, 7, junk -> solve rate 0.5 -> learnability 0.5
    # abduction: both proposals invalid; solver gets the buffer task f(?)=10: answers 5, 0) or (1, 5 + extra
    # line, 4 -> rewards 1, -1, -0.5, 0
    _script(objective, {
        "deduction": [" f = lambda x: x - 1\ninput: 9", " import os\ninput: 1",
                      " 8", " 8", " 7", " (8"],
        "abduction": [" f = lambda x: x.real\ninput: 1", "", " 5", " 0) or (1", " 5\nf(5)=10", " 4"],
    })
    batch = objective.play_round(1)
    # both types' proposals in one decode, then all their answers
    assert objective.decodes == ([(4, 1), (1, 4), (1, 4)] if lines_differ else [(4, 1), (2, 4)])
    stats = batch.stats
    assert stats["reward/solver/deduction"] == pytest.approx((1 + 1 + 0 - 1) / 4)
    assert stats["solve_rate/deduction"] == 0.5
    assert stats["reward/proposer/deduction"] == pytest.approx((0.5 - 0.5) / 2)  # learnability 0.5, penalty -0.5
    assert stats["reward/solver/abduction"] == pytest.approx((1 - 1 - 0.5 + 0) / 4)
    assert stats["reward/proposer/abduction"] == -0.5
    assert stats["proposal_validity"] == 0.25
    assert stats["format_errors"] == pytest.approx(3 / 8)
    assert [t.program for t in objective.buffers["deduction"].tasks] == [DED.program, "f = lambda x: x - 1"]
    # TRR++: advantages are normalised within (role, type); the all-invalid abduction proposals carry none
    by_group: dict[tuple[str, str], list[float]] = {}
    for episode in batch:
        by_group.setdefault((episode.role, episode.task_type), []).append(episode.advantage)
    assert ("proposer", "abduction") not in by_group
    for advantages in by_group.values():
        assert sum(advantages) == pytest.approx(0.0, abs=1e-6)
    log = (tmp_path / LOG_NAME).read_text().splitlines()
    assert len(log) == 1 and '"verdict": "invalid"' in log[0]


def test_forged_answers_never_earn_a_reward(tmp_path: Path, tokenizer) -> None:
    objective = _objective(tmp_path, tokenizer, task_types=["deduction"], proposals_per_type=1)
    objective.buffers["deduction"].add(DED)
    forged = [" __import__('os').system('true')", " 0) or (1", " 4 if True else 5", " {'__eq__': 4}"]
    _script(objective, {"deduction": [" not a task", *forged], "abduction": []})
    stats = objective.play_round(1).stats
    assert stats["reward/solver/deduction"] < 0 and stats["solve_rate/deduction"] == 0.0


def test_self_play_trains_in_the_loop_and_resumes_exactly(tmp_path: Path) -> None:
    from train_helpers import make_dataset, tiny_config

    dataset = make_dataset(tmp_path / "ds", context=128, vocab_size=300)
    options = {"task_types": ["deduction", "abduction"], "proposals_per_type": 1, "solver_tasks_per_type": 2,
               "solver_samples": 2, "max_new_tokens": 8, "heldout_per_type": 2, "seed_tasks_per_type": 4,
               "world_options": {"depth": 1}}
    config = tiny_config(dataset, steps=4, batch_size=8, save_every=2, eval_every=2)
    events = list(train(config, tmp_path / "full", objective=SelfPlayObjective(options)))
    assert events[-1].reason == "completed"
    controls = Controls()
    for event in train(config, tmp_path / "half", controls, objective=SelfPlayObjective(options)):
        if event.type == "step" and event.step == 2:
            controls.stop.set()
    list(train(config, tmp_path / "half", resume=True, objective=SelfPlayObjective(options)))

    def curve(run: str) -> list[tuple]:
        return [(m["type"], m["step"], m.get("loss"), m.get("reward"), m.get("kl"), m.get("heldout_solve_rate"))
                for m in read_metrics(tmp_path / run) if m.get("type") in ("step", "eval")]

    assert curve("half") == curve("full")
    steps = [m for m in read_metrics(tmp_path / "full") if m.get("type") == "step"]
    for key in ("reward", "reward/solver/deduction", "reward/proposer/abduction", "solve_rate/deduction",
                "proposal_validity", "format_errors", "kl", "entropy", "response_length", "rollout_tokens_per_s"):
        assert key in steps[-1], key
    evals = [m for m in read_metrics(tmp_path / "full") if m.get("type") == "eval"]
    assert "heldout_solve_rate/deduction" in evals[-1]
    log = (tmp_path / "half" / LOG_NAME).read_text().splitlines()
    assert len(log) == 4  # the rounds after the checkpoint were replayed, not duplicated


def test_self_play_stops_when_its_held_out_rate_stalls_and_says_so(tmp_path: Path) -> None:
    """Early stopping in self-play follows the held-out solve rate (lr 0: it never rises after the first
    evaluation), and the reason is given in those words, not as a 'validation loss'."""
    from train_helpers import make_dataset, tiny_config

    dataset = make_dataset(tmp_path / "ds", context=128, vocab_size=300)
    options = {"task_types": ["deduction"], "proposals_per_type": 1, "solver_tasks_per_type": 2,
               "solver_samples": 2, "max_new_tokens": 8, "heldout_per_type": 2, "seed_tasks_per_type": 4,
               "world_options": {"depth": 1}}
    config = tiny_config(dataset, steps=20, batch_size=8, lr=0.0, eval_every=1, early_stopping_patience=2)
    events = list(train(config, tmp_path / "run", objective=SelfPlayObjective(options)))
    assert events[-1].reason == "early_stopped" and events[-1].step == 3, events[-1]
    assert "held-out solve rate has not risen for 2 evaluations" in events[-1].message
    assert "validation loss" not in events[-1].message


def test_kl_without_a_base_model_is_refused(tmp_path: Path, tokenizer) -> None:
    with pytest.raises(UserError, match="base model"):
        _objective(tmp_path, tokenizer, kl_coef=0.1)


@pytest.mark.parametrize("options, needle", [
    ({"task_types": ["guessing"]}, "task_types"),
    ({"solver_samples": 1}, "solver_samples"),
    ({"temperature": 0}, "temperature"),
    ({"wrld": "mini"}, "unknown self-play option"),
])
def test_bad_options_are_clear_errors(options: dict, needle: str) -> None:
    with pytest.raises(UserError, match=needle):
        SelfPlayObjective(options)


def test_recipe_options_seed_share_task_baseline_and_held_out_programs(tmp_path: Path, tokenizer) -> None:
    objective = _set_up(tmp_path, tokenizer, task_types=["deduction"], seed_tasks_per_type=30,
                           exclude_heldout=[9001, 9002], seed_share=1.0, solver_baseline="task",
                           proposals_per_type=1, solver_tasks_per_type=2, solver_samples=2)
    world, seeds = objective.world, objective.seed_tasks["deduction"]
    kept_out = objective.protocol.reserved  # the eval verb's set and the run's selection set, of every type
    for kind in world.types:
        assert {t.program for t in objective.protocol.reported(kind)} <= kept_out
        assert {t.program for t in objective.protocol.selection_sets[kind]} <= kept_out
    identity = "f = lambda x: x"  # the one seed every buffer starts with, wherever else it appears
    assert len(seeds) == 31 and not {t.program for t in seeds if t.program != identity} & kept_out
    objective.buffers["deduction"].add(DED)  # a task that is not a seed: seed_share 1 never draws it
    assert all(t in seeds for t in objective._draw("deduction", 50, random.Random(0)))
    # the task baseline: each task's answers are compared among themselves (GRPO), so they sum to zero per task
    _script(objective, {"deduction": [" not a task", " 1", " 2", " 3", " 4"], "abduction": []})
    batch = objective.play_round(1)
    solver = [e.advantage for e in batch if e.role == "solver"]
    assert solver and sum(solver) == pytest.approx(0.0, abs=1e-6)
