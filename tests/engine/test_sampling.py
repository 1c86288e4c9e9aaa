"""Logits processors on handmade logits, checked against Hugging Face's processors where they exist."""

from __future__ import annotations

import math

import pytest
import torch

from desktop_app.engine.generate.sampling import (
    Sampler,
    apply_min_p,
    apply_repetition_penalty,
    apply_temperature,
    apply_top_k,
    apply_top_p,
)
from desktop_app.engine.generate.settings import SamplingSettings

INF = float("inf")


def _probs(p):
    return torch.tensor([[math.log(x) for x in p]])


def test_top_k_keeps_the_k_best():
    logits = torch.tensor([[1.0, 4.0, 2.0, 3.0]])
    out = apply_top_k(logits, 2)
    assert out.tolist() == [[-INF, 4.0, -INF, 3.0]]
    assert torch.equal(apply_top_k(logits, 0), logits)  # 0 disables
    assert torch.equal(apply_top_k(logits, 10), logits)  # k >= vocab disables


def test_top_p_keeps_the_smallest_set_reaching_p():
    logits = _probs([0.5, 0.3, 0.15, 0.05])
    kept = torch.isfinite(apply_top_p(logits, 0.8))[0].tolist()
    assert kept == [True, True, False, False]
    kept = torch.isfinite(apply_top_p(logits, 0.81))[0].tolist()
    assert kept == [True, True, True, False]
    kept = torch.isfinite(apply_top_p(logits, 0.0))[0].tolist()
    assert kept == [True, False, False, False]  # always keeps the most likely token
    assert torch.equal(apply_top_p(logits, 1.0), logits)
    # Remaining mass after renormalisation
    probs = apply_top_p(logits, 0.8).softmax(-1)[0]
    assert probs[:2].sum().item() == pytest.approx(1.0)
    assert probs[0].item() == pytest.approx(0.5 / 0.8)


def test_min_p_drops_tokens_below_a_fraction_of_the_best():
    logits = _probs([0.6, 0.3, 0.1])
    kept = torch.isfinite(apply_min_p(logits, 0.2))[0].tolist()  # threshold 0.12
    assert kept == [True, True, False]
    assert torch.isfinite(apply_min_p(logits, 1.0))[0].tolist() == [True, False, False]
    assert torch.equal(apply_min_p(logits, 0.0), logits)


def test_temperature_sharpens_and_flattens():
    logits = torch.tensor([[2.0, 1.0, 0.0]])
    cold = apply_temperature(logits, 0.5).softmax(-1)[0, 0].item()
    warm = apply_temperature(logits, 2.0).softmax(-1)[0, 0].item()
    assert cold > logits.softmax(-1)[0, 0].item() > warm


def test_repetition_penalty_follows_sign_rule():
    logits = torch.tensor([[2.0, -2.0, 2.0, -2.0]])
    seen = torch.tensor([[True, True, False, False]])
    out = apply_repetition_penalty(logits, seen, 2.0)
    assert out.tolist() == [[1.0, -4.0, 2.0, -2.0]]


def test_processors_match_hugging_face():
    from transformers.generation.logits_process import (
        MinPLogitsWarper,
        RepetitionPenaltyLogitsProcessor,
        TemperatureLogitsWarper,
        TopKLogitsWarper,
        TopPLogitsWarper,
    )

    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 50, generator=g) * 3
    ids = torch.randint(0, 50, (3, 7), generator=g)
    seen = torch.zeros(3, 50, dtype=torch.bool).scatter_(1, ids, True)
    assert torch.equal(apply_repetition_penalty(logits, seen, 1.7),
                       RepetitionPenaltyLogitsProcessor(1.7)(ids, logits.clone()))
    assert torch.equal(apply_temperature(logits, 0.7), TemperatureLogitsWarper(0.7)(ids, logits.clone()))
    assert torch.equal(apply_top_k(logits, 5), TopKLogitsWarper(5)(ids, logits.clone()))
    for p in (0.3, 0.9):
        assert torch.equal(torch.isfinite(apply_top_p(logits, p)),
                           torch.isfinite(TopPLogitsWarper(p)(ids, logits.clone())))
    assert torch.equal(torch.isfinite(apply_min_p(logits, 0.1)),
                       torch.isfinite(MinPLogitsWarper(0.1)(ids, logits.clone())))


def test_greedy_sampler_is_argmax_and_ignores_randomness():
    logits = torch.tensor([[0.1, 3.0, 0.2], [5.0, 0.0, 0.0]])
    s = Sampler(SamplingSettings(temperature=0.0, top_k=1), seed=123)
    assert s(logits).tolist() == [1, 0]
    assert s.generator is None


def test_seeded_sampling_is_reproducible_and_seed_dependent():
    logits = torch.zeros(4, 100)

    def draw(seed):
        s = Sampler(SamplingSettings(temperature=1.0), seed=seed, batch=4)
        return [s(logits).tolist() for _ in range(5)]

    assert draw(7) == draw(7)
    assert draw(7) != draw(8)


def test_sampling_respects_top_k_and_top_p_mass():
    logits = _probs([0.4, 0.3, 0.2, 0.05, 0.05]).repeat(64, 1)
    s = Sampler(SamplingSettings(temperature=1.0, top_k=2), seed=1, batch=64)
    picks = torch.cat([s(logits) for _ in range(10)])
    assert set(picks.tolist()) <= {0, 1} and {0, 1} <= set(picks.tolist())
    s = Sampler(SamplingSettings(temperature=1.0, top_p=0.9), seed=1, batch=64)
    picks = torch.cat([s(logits) for _ in range(10)])
    assert set(picks.tolist()) <= {0, 1, 2} and 2 in picks.tolist()
    s = Sampler(SamplingSettings(temperature=1.0, min_p=0.6), seed=1, batch=64)  # 0.6 * 0.4 = 0.24 -> tokens 0 and 1
    picks = torch.cat([s(logits) for _ in range(10)])
    assert set(picks.tolist()) <= {0, 1}


def test_sampler_repetition_penalty_tracks_seen_tokens():
    logits = torch.tensor([[3.0, 2.9, 0.0]])
    s = Sampler(SamplingSettings(temperature=0.0, repetition_penalty=2.0), batch=1, vocab_size=3)
    assert s(logits).tolist() == [0]  # first pick: 0; now 0 is penalised (3.0 -> 1.5)
    assert s(logits).tolist() == [1]
    s = Sampler(SamplingSettings(temperature=0.0, repetition_penalty=2.0), batch=1, vocab_size=3)
    s.observe_prompt([[0]])
    assert s(logits).tolist() == [1]  # the prompt counts too
