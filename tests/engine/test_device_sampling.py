"""On-device sampling and stop checks (device_sampling.py) on CPU tensors: the exponential race draws each
token with the processed probability, as the CPU sampler's multinomial does; stop ids and line limits end
rows on the device. The GPU lane (test_gpu_decode.py) runs the same checks on CUDA tensors."""

from __future__ import annotations

import pytest
import torch

from desktop_app.engine.generate.device_sampling import DeviceSampling, SamplingSettings, StopState
from desktop_app.engine.generate.sampling import Sampler, process_logits

LOGITS = torch.tensor([2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, -3.0])
ROWS = 40_000


def _expected(settings: SamplingSettings, seen: torch.Tensor | None = None) -> torch.Tensor:
    s = settings
    return process_logits(LOGITS[None], temperature=s.temperature, top_k=s.top_k, top_p=s.top_p, min_p=s.min_p,
                          repetition_penalty=s.repetition_penalty, seen=seen).softmax(-1)[0]


def _frequencies(settings: SamplingSettings, seed: int = 0, prompts=None) -> torch.Tensor:
    sampling = DeviceSampling(ROWS, len(LOGITS), torch.device("cpu"))
    sampling.start(settings, seed, prompts or [[] for _ in range(ROWS)])
    sampling.draw(ROWS)
    ids = sampling.pick(LOGITS.expand(ROWS, -1).clone())
    return torch.bincount(ids, minlength=len(LOGITS)).float() / ROWS


@pytest.mark.parametrize("settings", [
    SamplingSettings(temperature=1.0),
    SamplingSettings(temperature=0.6),
    SamplingSettings(temperature=1.4, top_k=3),
    SamplingSettings(temperature=1.0, top_p=0.8),
    SamplingSettings(temperature=1.0, min_p=0.3),
    SamplingSettings(temperature=0.9, top_k=5, top_p=0.9, min_p=0.05),
], ids=["t1", "t0.6", "topk", "topp", "minp", "all"])
def test_draws_follow_the_processed_distribution(settings):
    expected = _expected(settings)
    got = _frequencies(settings)
    # 40,000 draws: one standard deviation of a frequency is at most 0.0025
    assert (got - expected).abs().max().item() < 0.012, (got, expected)
    assert got[expected == 0].sum().item() == 0  # a removed token is never drawn
    cpu = Sampler(temperature=settings.temperature, top_k=settings.top_k, top_p=settings.top_p, min_p=settings.min_p,
                  seed=1, batch=ROWS, vocab_size=len(LOGITS))
    multinomial = torch.bincount(cpu(LOGITS.expand(ROWS, -1).clone()), minlength=len(LOGITS)).float() / ROWS
    assert (got - multinomial).abs().max().item() < 0.015  # the CPU sampler draws the same distribution


def test_repetition_penalty_covers_the_prompt_and_each_pick():
    settings = SamplingSettings(temperature=1.0, repetition_penalty=3.0)
    seen = torch.zeros(1, len(LOGITS), dtype=torch.bool)
    seen[0, 0] = True
    got = _frequencies(settings, prompts=[[0]] * ROWS)
    assert (got - _expected(settings, seen)).abs().max().item() < 0.012
    greedy = DeviceSampling(2, len(LOGITS), torch.device("cpu"))
    greedy.start(SamplingSettings(repetition_penalty=100.0), 0, [[], [0]])
    first = greedy.pick(LOGITS.expand(2, -1).clone()).tolist()
    second = greedy.pick(LOGITS.expand(2, -1).clone()).tolist()
    assert first == [0, 1] and second == [1, 2]  # a picked token is penalised from the next pick on


def test_greedy_is_argmax_and_seeds_reproduce():
    logits = torch.randn(64, 50, generator=torch.Generator().manual_seed(0))
    sampling = DeviceSampling(64, 50, torch.device("cpu"))
    sampling.start(SamplingSettings(), 0, [[]] * 64)
    sampling.draw(64)
    assert torch.equal(sampling.pick(logits), logits.argmax(-1))
    picks = []
    for seed in (7, 7, 8):
        sampling.start(SamplingSettings(temperature=1.0), seed, [[]] * 64)
        sampling.draw(64)
        picks.append(sampling.pick(logits).tolist())
    assert picks[0] == picks[1] != picks[2]
    assert SamplingSettings(temperature=0.0, top_k=5, top_p=0.5).normalized(50).key == (0.0, 0, 1.0, 0.0, 1.0, 0)
    assert SamplingSettings(temperature=1.0, top_k=50).normalized(50).top_k == 0


def test_stop_state_ends_rows_on_stop_ids_and_line_limits():
    stops = StopState(4, 10, torch.device("cpu"))
    stops.start(3, stop_ids={9}, newline_ids={5}, max_lines=2)  # row 3 is idle: done from the start
    steps = [[1, 5, 2, 3], [9, 5, 2, 3], [4, 2, 5, 3], [4, 4, 4, 3]]  # each step: one token per row
    for step in steps:
        stops.record(torch.tensor(step))
    log = stops.ring[:, :4].tolist()
    assert log[0] == [1, 9, -1, -1]  # a stop id ends the row and is kept
    assert log[1] == [5, 5, -1, -1]  # the second line break ends it
    assert log[2] == [2, 2, 5, 4]  # one line break: still running
    assert log[3] == [-1, -1, -1, -1]  # the idle row logs nothing
    assert stops.done.tolist() == [True, True, False, True] and stops.count.item() == 4
    stops.finish_rows([2])
    stops.record(torch.tensor([0, 0, 0, 0]))
    assert stops.ring[:, 4].tolist() == [-1, -1, -1, -1]
    stops.start(4, stop_ids=())  # a new call resets everything; no line limit without newline ids
    stops.record(torch.tensor([5, 5, 5, 9]))
    assert stops.done.tolist() == [False] * 4 and stops.ring[:, 0].tolist() == [5, 5, 5, 9]
    with pytest.raises(ValueError, match="at most"):
        StopState(1, 1000, torch.device("cpu")).start(1, stop_ids=range(100))
