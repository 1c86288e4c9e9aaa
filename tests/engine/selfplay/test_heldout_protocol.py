"""The held-out protocol: the reported and selection sets are disjoint by program; a proposer's task with a
held-out program teaches nothing (no reward, in neither role's update, never practised); trivial proposals are
refused; solver-only RL plays no proposer; the first tasks come from the generator, the identity alone (minimal) or
the simplest programs; the controls' data, `tasks` files and a run's records hold no held-out program; train()
closes its objective however it ends."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from desktop_app.engine.data.tokenization import train_tokenizer
from desktop_app.engine.evaluate.leakage import training_programs
from desktop_app.engine.events import Controls
from desktop_app.engine.model.architecture import build_model
from desktop_app.engine.objectives.base import TrainContext
from desktop_app.engine.objectives.selfplay import LOG_NAME, SelfPlayObjective
from desktop_app.engine.specs import ModelSpec, RunConfig, TrainSpec
from desktop_app.engine.tasks import Task
from desktop_app.engine.tasks.heldout_protocol import (
    REPORTED_SEED,
    SELECTION_SEED,
    HeldoutProtocol,
    program_key,
    program_shape,
    programs_in_text,
)
from desktop_app.engine.tasks.mini_world import MiniWorld

DED = Task("mini", "deduction", "f = lambda x: x + 1", ("3",), ("4",))


@pytest.fixture(scope="module")
def world() -> MiniWorld:
    return MiniWorld(options={"depth": 2})


@pytest.fixture(scope="module")
def tokenizer(world: MiniWorld):
    texts = [world.example_text(t) for kind in ("deduction", "abduction") for t in world.generate(kind, 50, 1)]
    return train_tokenizer(texts, "bpe", 96, min_frequency=2)


def _objective(tmp_path: Path, tokenizer, **options) -> SelfPlayObjective:
    objective = SelfPlayObjective({"task_types": ["deduction"], "proposals_per_type": 3, "solver_tasks_per_type": 1,
                                   "solver_samples": 2, "seed_tasks_per_type": 0, "heldout_per_type": 20,
                                   "world_options": {"depth": 2}, **options})
    ctx = TrainContext(run_dir=tmp_path, config=RunConfig(), train_spec=TrainSpec(), device=torch.device("cpu"),
                       autocast=contextlib.nullcontext, seed=0, store=SimpleNamespace(context_length=128),
                       tokenizer=tokenizer)
    objective.setup(ctx, build_model(ModelSpec("llama", tokenizer.get_vocab_size(), 32, 1, 2, 2, 64, 128), seed=0))
    return objective


def _script(objective: SelfPlayObjective, texts: list[str]) -> list[tuple[int, int]]:
    """Sampling replaced by fixed texts, in decode order; returns (prompts, samples) of every decode."""
    decodes: list[tuple[int, int]] = []

    def fake(part, samples, seed, max_lines, finished=None):
        decodes.append((len(part.prompts), samples))
        out = [texts.pop(0) for _ in range(len(part.prompts) * samples)]
        done = sum(p * n for p, n in decodes[:-1])
        return [[3, 10 + done + i] for i in range(len(out))], out  # each text its own ids: [3, 10 + its number]

    objective._sample = fake
    return decodes


def test_the_selection_set_never_shares_a_program_with_the_reported_set(world: MiniWorld) -> None:
    protocol = HeldoutProtocol(world, (REPORTED_SEED,), SELECTION_SEED, 0, 200)
    reported = {t.program for kind in world.types for t in protocol.reported(kind)}
    selection = {t.program for kind in world.types for t in protocol.selection_sets[kind]}
    assert len(selection) >= 200 and not reported & selection
    # without the protocol the two streams overlap (the issue measured 38-44 shared programs per type)
    plain = {t.program for kind in world.types for t in world.heldout_set(kind, 200, SELECTION_SEED)}
    assert plain & reported
    assert protocol.reserved == reported | selection
    # a held-out program is found however it is spelled
    program = next(iter(sorted(reported)))
    assert protocol.holds(program.replace(" ", "  ")) and protocol.holds(program)
    assert not protocol.holds("f = lambda x: x * 1234567")


def test_keys_shapes_and_programs_in_text() -> None:
    assert program_key("f = lambda x:(x+1)") == program_key("f = lambda x: x + 1") == "f = lambda x: x + 1"
    assert program_shape("f = lambda x: x + 1") == program_shape("f = lambda x: x + 7") != program_shape(
        "f = lambda x: x - 7")
    text = ("f(1)=2\nf= lambda x: (x + 1)\n# mini deduction tasks\nf = lambda x: x*2\ninput: 3\n"
            "```python\ndef f(s):\n    return s[::-1]  # reversed\n```\n")
    assert programs_in_text(text) == {"f = lambda x: x + 1", "f = lambda x: x * 2", "def f(s):\n    return s[::-1]"}


def test_a_held_out_proposal_teaches_nothing_and_trivial_ones_are_refused(
        tmp_path: Path, tokenizer, world: MiniWorld) -> None:
    objective = _objective(tmp_path, tokenizer)
    assert objective.protocol is not None
    held = objective.protocol.reported("deduction")[0]
    objective.buffers["deduction"].add(DED)
    # proposals: a held-out program (ids [3, 10]), the identity in disguise, a new task (f = lambda x: x + 5 on
    # 9 -> 14); the solver sees only the new task, 2 answers; the held-out program is never solved
    decodes = _script(objective, [" " + world.proposal_text(held), " f = lambda x: x if 2 > 1 else x\ninput: 4",
                                  " f = lambda x: x + 5\ninput: 9", " 14", " 7"])
    batch = objective.play_round(1)
    assert decodes == [(3, 1), (1, 2)]
    buffer = objective.buffers["deduction"]
    assert [t.program for t in buffer.tasks] == ["f = lambda x: x", DED.program, "f = lambda x: x + 5"]
    solver = [e for e in batch if e.role == "solver"]
    assert {tuple(e.prompt) for e in solver} and len({tuple(e.prompt) for e in solver}) == 1  # the new task's
    proposer = [e for e in batch if e.role == "proposer"]
    assert [e.completion for e in proposer] == [[3, 11], [3, 12]]  # the trivial and the new one; never [3, 10]
    history = {entry["program"].splitlines()[0]: entry for entry in buffer.history}
    assert history[held.program]["verdict"] == "held-out" and history[held.program]["solve_rate"] is None
    assert history[held.program]["reward"] == 0.0
    trivial = next(e for e in buffer.history if e["verdict"] == "trivial")
    assert trivial["reward"] == -0.5 and "identity" in trivial["reason"]
    stats = batch.stats
    assert stats["proposals_trivial"] == pytest.approx(1 / 3) and stats["proposals_heldout"] == pytest.approx(1 / 3)
    assert stats["proposal_validity"] == pytest.approx(2 / 3)
    assert stats["solve_rate/deduction"] == 0.5  # the trained task only: 14 right, 7 wrong
    assert stats["programs/deduction"] == 3 and stats["shapes/deduction"] == 2  # x + 1 and x + 5 share one
    # the curriculum: the solver's rate on the proposer's new task, and its program's size in characters
    assert stats["new_task_solve_rate/deduction"] == 0.5
    assert stats["program_size/deduction"] == len("f = lambda x: x + 5")
    line = json.loads((tmp_path / LOG_NAME).read_text().splitlines()[-1])
    assert line["buffers"]["trivial"] == 1 and line["buffers"]["heldout_hits"] == 1
    assert line["buffers"]["programs"] == {"deduction": 3}


def test_solver_only_rl_plays_no_proposer(tmp_path: Path, tokenizer) -> None:
    objective = _objective(tmp_path, tokenizer, proposer=False, seed_tasks_per_type=5, solver_tasks_per_type=3)
    seeds = objective.seed_tasks["deduction"]
    decodes = _script(objective, [" 1"] * 6)
    batch = objective.play_round(1)
    assert decodes == [(3, 2)]  # no proposer decode
    assert {e.role for e in batch} <= {"solver"} and "reward/proposer/deduction" not in batch.stats
    assert len(objective.buffers["deduction"]) == len(seeds)
    assert not objective.protocol.reserved & {t.program for t in seeds}


def test_the_minimal_seed_is_the_identity_alone_and_the_proposers_buffer_is_the_whole_practice(
        tmp_path: Path, tokenizer) -> None:
    objective = _objective(tmp_path, tokenizer, tasks_from="minimal", seed_tasks_per_type=50, seed_share=0.5,
                           solver_tasks_per_type=2)
    assert [t.program for t in objective.seed_tasks["deduction"]] == ["f = lambda x: x"]
    objective.buffers["deduction"].add(DED)  # as if the proposer had written it
    import random

    drawn = objective._draw("deduction", 200, random.Random(0))
    assert {t.program for t in drawn} == {"f = lambda x: x", DED.program}  # no generated task, no seed-fed half
    assert sum(t.program == DED.program for t in drawn) > 60  # the whole buffer, not half from the identity


def test_solver_only_rl_from_the_minimal_seed_practises_the_identity_alone(tmp_path: Path, tokenizer) -> None:
    objective = _objective(tmp_path, tokenizer, proposer=False, tasks_from="minimal", solver_tasks_per_type=3)
    decodes = _script(objective, [" 1"] * 6)
    batch = objective.play_round(1)
    assert decodes == [(3, 2)] and {e.role for e in batch} <= {"solver"}
    assert {t.program for t in objective.buffers["deduction"].tasks} == {"f = lambda x: x"}


def test_the_simplest_seed_takes_the_generators_shortest_programs(tmp_path: Path, tokenizer, world) -> None:
    from desktop_app.engine.objectives.selfplay import SIMPLEST_POOL

    objective = _objective(tmp_path, tokenizer, tasks_from="simplest", seed_tasks_per_type=8)
    seeds = objective.seed_tasks["deduction"][1:]  # after the identity
    pool = world.generate("deduction", 8 * SIMPLEST_POOL, 0, exclude=objective.protocol.reserved)
    assert len(seeds) == 8 and max(len(t.program) for t in seeds) <= sorted(len(t.program) for t in pool)[7]
    generator = _objective(tmp_path / "g", tokenizer, seed_tasks_per_type=8).seed_tasks["deduction"][1:]
    assert sum(len(t.program) for t in seeds) < sum(len(t.program) for t in generator)


def test_tasks_from_takes_the_three_sources_only() -> None:
    from desktop_app.engine.errors import UserError

    with pytest.raises(UserError, match="tasks_from"):
        SelfPlayObjective({"tasks_from": "everything"})
    SelfPlayObjective({"proposer": False, "seed_tasks_per_type": 0, "tasks_from": "minimal"})  # the floor's arm


def test_solver_only_needs_seed_tasks() -> None:
    from desktop_app.engine.errors import UserError

    with pytest.raises(UserError, match="seed_tasks_per_type"):
        SelfPlayObjective({"proposer": False, "seed_tasks_per_type": 0})


def test_your_seed_tasks_with_a_held_out_program_are_left_out_with_a_note(tmp_path: Path, tokenizer,
                                                                           world: MiniWorld) -> None:
    held = world.heldout_set("deduction", 1, REPORTED_SEED)[0]
    objective = _objective(tmp_path, tokenizer, seeds=[held.to_json(), DED.to_json()])
    assert [t.program for t in objective.seed_tasks["deduction"]] == ["f = lambda x: x", DED.program]
    assert any("held-out program" in n.message for n in objective.notes)


def test_a_runs_records_are_scanned_for_held_out_programs(tmp_path: Path, world: MiniWorld) -> None:
    """A run folder whose checkpoint buffers, self-play log and data files hold programs: each is found, and so is
    what its base run trained on."""
    base = tmp_path / "base"
    (base / "checkpoints" / "step-00000002").mkdir(parents=True)
    data = tmp_path / "chats.jsonl"
    held = world.heldout_set("abduction", 3, REPORTED_SEED)
    data.write_text(json.dumps({"messages": [{"role": "user", "content": world.solve_prompt(held[0])}]}) + "\n")
    (base / "run.json").write_text(json.dumps({"data": [str(data)]}))
    run = tmp_path / "run"
    checkpoint = run / "checkpoints" / "step-00000004"
    checkpoint.mkdir(parents=True)
    for folder in (checkpoint, base / "checkpoints" / "step-00000002"):
        (folder / "manifest.json").write_text("{}")
        (folder / "trainer_state.json").write_text(json.dumps({"data": {"buffers": {}}}))
    (checkpoint / "trainer_state.json").write_text(json.dumps(
        {"data": {"buffers": {"deduction": {"tasks": [held[1].to_json()]}}}}))
    (run / "run.json").write_text(json.dumps({"base_model": str(base / "checkpoints" / "step-00000002")}))
    (run / LOG_NAME).write_text(json.dumps({"round": 1, "proposals": [
        {"program": held[2].program, "verdict": "valid"},
        {"program": world.heldout_set("induction", 1, REPORTED_SEED)[0].program, "verdict": "held-out"},
        {"program": world.heldout_set("induction", 2, REPORTED_SEED)[1].program, "verdict": "duplicate"}]}) + "\n")
    found = training_programs(checkpoint)
    assert found is not None and found.count(held) == 3
    assert found.count(world.heldout_set("induction", 2, REPORTED_SEED)) == 0  # judged or repeated, never practised
    assert training_programs(tmp_path / "chats.jsonl") is None  # not a run: nothing known of its training


def test_the_fine_tuning_control_and_tasks_files_hold_no_held_out_program(tmp_path: Path, world: MiniWorld,
                                                                          capsys) -> None:
    from desktop_app.cli import main
    from desktop_app.engine.recipes.seed_chats import write_seed_chats

    path = write_seed_chats(tmp_path / "chats.jsonl", "", {"world": "mini", "heldout_per_type": 50}, 0, per_type=400)
    protocol = HeldoutProtocol(world, (REPORTED_SEED,), SELECTION_SEED, 0, 50)
    assert protocol.count_in(programs_in_text(path.read_text().replace("\\n", "\n"))) == 0
    assert main(["tasks", "--world", "mini", "--type", "induction", "--count", "500"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert len(rows) == 500 and protocol.count_in(r["program"] for r in rows) == 0
    assert main(["tasks", "--world", "mini", "--type", "induction", "--count", "5", "--heldout"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["program"] for r in rows] == [t.program for t in protocol.reported("induction", 5)]


class _Counting:
    """Wraps an objective, counting close() calls."""

    def __init__(self, inner, fail_at: int = 0):
        self.inner, self.closed, self.fail_at, self.calls = inner, 0, fail_at, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def loss(self, model, micro):
        self.calls += 1
        if self.fail_at and self.calls >= self.fail_at:
            raise RuntimeError("boom")
        return self.inner.loss(model, micro)

    def close(self) -> None:
        self.closed += 1
        self.inner.close()


@pytest.mark.parametrize("ending", ["completed", "stopped", "raised"])
def test_train_closes_its_objective_however_it_ends(tmp_path: Path, ending: str) -> None:
    from train_helpers import make_dataset, tiny_config

    from desktop_app.engine.objectives.causal_lm import CausalLMObjective
    from desktop_app.engine.train.loop import train

    dataset = make_dataset(tmp_path / "ds")
    objective = _Counting(CausalLMObjective(), fail_at=2 if ending == "raised" else 0)
    controls = Controls()
    events = train(tiny_config(dataset, steps=3, batch_size=4), tmp_path / "run", controls, objective=objective)
    if ending == "raised":
        with pytest.raises(RuntimeError, match="boom"):
            list(events)
    else:
        for event in events:
            if ending == "stopped" and event.type == "step":
                controls.stop.set()
    assert objective.closed == 1


def test_a_python_world_self_play_run_leaves_no_sandbox_behind(tmp_path: Path, monkeypatch) -> None:
    from train_helpers import make_dataset, tiny_config

    import desktop_app.engine.tasks.python_world as python_world
    from desktop_app.engine.train.loop import train

    made, servers = [], []

    class Spy(python_world.Executor):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.closed = False
            made.append(self)

        def close(self) -> None:
            self.closed = True
            servers.append(self._proc)  # the fork server, if it was started
            super().close()

    monkeypatch.setattr(python_world, "Executor", Spy)
    dataset = make_dataset(tmp_path / "ds", context=128)
    options = {"world": "python", "task_types": ["deduction"], "proposals_per_type": 1, "solver_tasks_per_type": 1,
               "solver_samples": 2, "max_new_tokens": 4, "heldout_per_type": 2, "seed_tasks_per_type": 2}
    events = list(train(tiny_config(dataset, steps=1, batch_size=4), tmp_path / "run",
                        objective=SelfPlayObjective(options)))
    assert events[-1].reason == "completed"
    assert made and all(e.closed for e in made)
    assert any(servers) and all(proc.poll() is not None for proc in servers if proc is not None)


def test_repeating_a_program_or_a_crowded_shape_earns_nothing(tmp_path: Path, tokenizer, world: MiniWorld) -> None:
    """The collapse the held-out protocol revealed (a proposer repeating `x + x`, a held-out program, for its
    learnability): a program the run has seen, a held-out program proposed again, or one more of a shape the buffer
    holds `max_tasks_per_shape` of is a duplicate: no reward, not solved, not added (a held-out program proposed
    the first time earns nothing either)."""
    objective = _objective(tmp_path, tokenizer, proposals_per_type=4, max_tasks_per_shape=2)
    held = objective.protocol.reported("deduction")[0]
    objective.buffers["deduction"].add(DED)  # x + 1: the shape "x + N" once
    # (x + 41 and x + 42: constants the generator never writes, so neither is a held-out program)
    texts = [" " + world.proposal_text(held), " f = lambda x: x + 1\ninput: 5", " f = lambda x: x + 41\ninput: 5",
             " f = lambda x: x + 42\ninput: 5", " 46", " 1"]  # x + 41 on 5: the one task solved
    decodes = _script(objective, texts)
    batch = objective.play_round(1)
    assert decodes == [(4, 1), (1, 2)]  # neither the duplicates nor the held-out program are solved
    fates = {e["program"]: (e["verdict"], e["reward"]) for e in objective.buffers["deduction"].history}
    assert fates[held.program] == ("held-out", 0.0)
    assert fates["f = lambda x: x + 1"][0] == "duplicate" and fates["f = lambda x: x + 1"][1] == 0.0  # in the buffer
    assert fates["f = lambda x: x + 41"] == ("valid", 0.5)
    assert fates["f = lambda x: x + 42"] == ("duplicate", 0.0)  # x + 1 and x + 41 fill the shape's 2 places
    assert batch.stats["proposals_duplicate"] == 0.5 and batch.stats["proposals_heldout"] == 0.25
    # the held-out program proposed again in a later round teaches nothing either, and so does one inside a
    # proposal the world refuses (any update on it would train on the program's text)
    _script(objective, [" " + world.proposal_text(held), " " + held.program + "\ninput: ???", " y", " z", " 1", " 2"])
    objective.play_round(2)
    assert [e["verdict"] for e in objective.buffers["deduction"].history[-4:-2]] == ["held-out", "held-out"]



def test_a_duplicate_earns_the_duplicate_reward_when_one_is_set(tmp_path: Path, tokenizer) -> None:
    """Issue 50's finding (docs/selfplay.md): from the minimal seed, copying a reference (0) beat writing an invalid
    task (-0.5), and duplicates rose to 81% of proposals. `duplicate_reward` makes a copy cost; a new task still earns
    its learnability and an invalid one the format penalty."""
    objective = _objective(tmp_path, tokenizer, proposals_per_type=2, duplicate_reward=-0.5)
    objective.buffers["deduction"].add(DED)  # x + 1
    _script(objective, [" f = lambda x: x + 1\ninput: 5", " f = lambda x: x + 41\ninput: 5", " 46", " 1"])
    objective.play_round(1)
    fates = {e["program"]: (e["verdict"], e["reward"]) for e in objective.buffers["deduction"].history}
    assert fates["f = lambda x: x + 1"] == ("duplicate", -0.5)
    assert fates["f = lambda x: x + 41"] == ("valid", 0.5)
