"""A round shared among processes, without launching any (tests/engine/test_distributed_rl.py launches them): each
row of a decode samples from its own generator, so a decode cut into shares returns what the whole decode returns
(lean runners and the static path); a round's episodes shared out among processes each weigh in the loss what they
weigh in one process's, so the processes' averaged gradients are one process's; verdicts and held-out counts travel as
JSON."""

from __future__ import annotations

import contextlib
from types import SimpleNamespace

import pytest
import torch

from desktop_app.engine.generate.sampling import inverse_cdf, row_seeds
from desktop_app.engine.model.architecture import build_model
from desktop_app.engine.objectives.base import Processes
from desktop_app.engine.objectives.selfplay import SelfPlayObjective
from desktop_app.engine.selfplay.policy import Episode, EpisodeBatch
from desktop_app.engine.selfplay.rollout import RolloutOptions, sample_completions
from desktop_app.engine.specs import ModelSpec
from desktop_app.engine.tasks.base import Check, Task, Validation
from desktop_app.engine.train.loop import accumulate


def _model() -> torch.nn.Module:
    spec = ModelSpec("llama", 400, 64, 2, 4, 2, 128, 64, init_std=0.2, tie_embeddings=False)
    return build_model(spec, seed=0)


def _prompts() -> list[list[int]]:
    g = torch.Generator().manual_seed(0)
    return [torch.randint(5, 400, (n,), generator=g).tolist() for n in (5, 9, 3, 12, 7)]


@pytest.mark.parametrize("backend", ["lean", "static"])
def test_a_decode_cut_into_shares_samples_what_the_whole_decode_samples(backend: str) -> None:
    model, prompts = _model(), _prompts()
    options = RolloutOptions(samples=3, max_new_tokens=10, temperature=1.0, seed=11, backend=backend,
                             keys=range(5), longest=12)
    whole = sample_completions(model, prompts, options)
    shares = [sample_completions(model, prompts[:2], options, keys=[0, 1]),
              sample_completions(model, prompts[2:], options, keys=[2, 3, 4])]
    assert whole == shares[0] + shares[1]
    assert sample_completions(model, [prompts[3]], options, keys=[3]) == whole[9:12]  # alone, too
    assert len({tuple(c) for c in whole}) > 10  # the rows do draw apart
    # another seed, other draws; without keys a call keeps its one generator (streaming, evaluation)
    assert sample_completions(model, prompts, options, seed=12) != whole
    assert sample_completions(model, prompts, options, keys=None)[:6] != shares[0]


def test_rows_draw_each_token_by_its_probability() -> None:
    probs = torch.tensor([[0.5, 0.0, 0.3, 0.2, 0.0]]).repeat(20000, 1)
    uniform = torch.rand(20000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    counts = torch.bincount(inverse_cdf(probs, uniform), minlength=5).double() / 20000
    assert counts[1] == 0 and counts[4] == 0  # never a token without mass, even at a uniform near 1
    assert torch.allclose(counts, probs[0].double(), atol=0.015)
    assert inverse_cdf(probs[:1], torch.tensor([1 - 2**-53], dtype=torch.float64)).item() == 3
    seeds = row_seeds(5, [0, 1], 2)
    assert len(set(seeds)) == 4 and seeds == row_seeds(5, [0, 1], 2) and row_seeds(5, [1], 2) == seeds[2:]


def _round(count: int) -> EpisodeBatch:
    g = torch.Generator().manual_seed(count)
    episodes = [Episode(torch.randint(5, 400, (int(torch.randint(3, 9, (1,), generator=g)),), generator=g).tolist(),
                        torch.randint(5, 400, (int(torch.randint(1, 7, (1,), generator=g)),), generator=g).tolist(),
                        float(torch.randn(1, generator=g)), "solver", "deduction") for _ in range(count)]
    return EpisodeBatch(episodes, {"reward": 0.25})


def _step(model: torch.nn.Module, objective: SelfPlayObjective, batch: EpisodeBatch, micro: int
          ) -> tuple[float, dict[str, float], list[torch.Tensor]]:
    """One process's step as the loop computes it (loop.accumulate), without DDP: loss, metrics and gradients."""
    model.zero_grad(set_to_none=True)
    parts = SimpleNamespace(objective=objective, scaler=None,
                            wrapped=SimpleNamespace(loss=lambda m: objective.loss(model, m),
                                                    no_sync=contextlib.nullcontext),
                            ctx=SimpleNamespace(device=torch.device("cpu"), autocast=contextlib.nullcontext))
    loss, metrics, _tokens = accumulate(parts, batch, micro)
    grads = [p.grad.clone() if p.grad is not None else torch.zeros_like(p) for p in model.parameters()]
    return float(loss), {k: float(v) for k, v in metrics.items()}, grads


def _close(grads: list[torch.Tensor], want: list[torch.Tensor]) -> bool:
    """The same gradient to float rounding (each tensor within 1e-5 of its norm: the rows are packed otherwise)."""
    return all(float((a - b).norm()) <= 1e-5 * max(float(b.norm()), 1e-6) for a, b in zip(grads, want, strict=True))


@pytest.mark.parametrize(("episodes", "micro"), [(7, 2), (7, 3), (7, 16), (1, 2)])
def test_processes_averaging_their_shares_compute_one_process_step(episodes: int, micro: int) -> None:
    """2 processes (each its share of the round, gradients averaged as DDP does) = 1 process at the same micro-batch:
    the loss, the figures and the gradient. A round of 1 episode leaves process 1 an empty share."""
    model, batch = _model(), _round(episodes)
    objective = SelfPlayObjective()
    one_loss, one_metrics, one_grads = _step(model, objective, batch, micro)
    ranks = []
    for rank in (0, 1):
        objective.processes = Processes(rank, 2)
        ranks.append(_step(model, objective, batch, micro))
    assert (0.0 in (ranks[0][0], ranks[1][0])) == (episodes == 1)  # an empty share adds nothing
    assert (ranks[0][0] + ranks[1][0]) / 2 == pytest.approx(one_loss, rel=1e-6)  # the logged loss: sync's mean
    averaged = {k: (ranks[0][1][k] + ranks[1][1][k]) / 2 for k in one_metrics}
    assert averaged == pytest.approx(one_metrics, rel=1e-5, abs=1e-7)  # the round's figures, kl and entropy
    assert _close([(a + b) / 2 for a, b in zip(ranks[0][2], ranks[1][2], strict=True)], one_grads)


def test_shares_deal_every_item_once_and_pooling_puts_them_back_in_order() -> None:
    for count in (0, 1, 5, 8):
        shares = [list(Processes(r, 3).share(count)) for r in range(3)]
        assert sorted(i for share in shares for i in share) == list(range(count))
        assert max(map(len, shares)) - min(map(len, shares)) <= 1
        pooled = Processes(0, 3, gather=lambda value, what, shares=shares: shares).pool(shares[0], "x")
        assert pooled == list(range(count))  # each process's share, gathered: the items in their order
    mine = [[1, 2]]
    assert Processes().pool(mine, "x") is mine


def test_verdicts_travel_as_json_and_come_back_equal() -> None:
    import json

    task = Task("mini", "deduction", "f = lambda x: x", ("[1]",), ("[1]",), "hi", 0)
    for verdict in (Validation(task), Validation(None, "no program", format_error=True),
                    Validation(None, "constant", trivial=True)):
        assert Validation.from_json(json.loads(json.dumps(verdict.to_json()))) == verdict
    check = Check("format", -0.5, "two lines")
    assert Check.from_json(json.loads(json.dumps(check.to_json()))) == check


def test_the_held_out_counts_of_every_process_add_up_to_one_process(monkeypatch) -> None:
    """Each process solves its share of every type's held-out tasks (a type of one task leaves process 1 none); the
    gathered counts give one process's rates."""
    import desktop_app.engine.objectives.selfplay as selfplay
    from desktop_app.engine.evaluate.heldout import TypeResult

    def solve(model, prompter, world, heldout, settings):  # "solves" the programs that add
        yield from ()
        return {t: TypeResult(t, len(tasks), sum("+" in x.program for x in tasks)) for t, tasks in heldout.items()
                if tasks}

    monkeypatch.setattr(selfplay, "solve_heldout", solve)
    objective = SelfPlayObjective()
    objective.world = objective.prompter = object()
    objective.heldout = {"deduction": [Task("mini", "deduction", f"f = lambda x: x {op}", ("1",), ("2",))
                                       for op in ("+ 1", "* 2", "+ 3")],
                         "abduction": [Task("mini", "abduction", "f = lambda x: x + 5", ("1",), ("6",))]}
    one = objective.evaluate(None, None)
    assert one["heldout_solve_rate/deduction"] == pytest.approx(2 / 3) and one["heldout_solve_rate/abduction"] == 1.0
    sent: dict[int, object] = {}

    def gather_of(rank: int):
        def gather(value, what):
            sent[rank] = value
            return [sent.get(r, value) for r in (0, 1)]
        return gather

    for rank in (0, 1, 0, 1):  # the first two calls hand each process's counts over, the last two use them
        objective.processes = Processes(rank, 2, gather_of(rank))
        got = objective.evaluate(None, None)
    assert got == one
    objective.processes = Processes(0, 2, gather_of(0))
    assert objective.evaluate(None, None) == one
