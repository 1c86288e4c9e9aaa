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
    return process_logits(LOGITS[None], s, seen).softmax(-1)[0]


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
    cpu = Sampler(SamplingSettings(settings.temperature, settings.top_k, settings.top_p, settings.min_p),
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


# --- a padded vocabulary, buffers kept across calls, fp32 probabilities -------------------------------------------

# 6 tokenizer tokens in a vocabulary padded to 10; the padded ids hold the largest logits and the best real id is 2
PADDED = torch.tensor([0.5, 1.0, 2.0, -1.0, 0.0, 0.3, 5.0, 4.0, 3.0, 2.5])
TOKENS = 6


def _padded_picks(settings: SamplingSettings, rows: int = ROWS, seed: int = 0) -> torch.Tensor:
    sampling = DeviceSampling(rows, len(PADDED), torch.device("cpu"))
    sampling.start(settings, seed, [[] for _ in range(rows)])
    sampling.draw(rows)
    return sampling.pick(PADDED.expand(rows, -1).clone())


@pytest.mark.parametrize("settings", [
    SamplingSettings(temperature=1.0, tokens=TOKENS),
    SamplingSettings(temperature=1.0, top_k=3, tokens=TOKENS),
    SamplingSettings(temperature=0.8, top_p=0.7, tokens=TOKENS),
    SamplingSettings(temperature=1.0, min_p=0.3, tokens=TOKENS),
    SamplingSettings(temperature=0.9, top_k=4, top_p=0.9, min_p=0.05, tokens=TOKENS),
], ids=["t1", "topk", "topp", "minp", "all"])
def test_a_padded_vocabulary_is_masked_before_the_filters(settings):
    """The filters choose among the tokenizer's ids (as the CPU Sampler does): padded ids that lead neither get
    drawn nor crowd the real ones out of top-k / top-p / min-p."""
    got = torch.bincount(_padded_picks(settings), minlength=len(PADDED)).float() / ROWS
    assert got[TOKENS:].sum().item() == 0  # no padded id, ever
    cpu = Sampler(SamplingSettings(settings.temperature, settings.top_k, settings.top_p, settings.min_p,
                                   tokens=TOKENS), vocab_size=len(PADDED))
    expected = cpu.process(PADDED[None].clone()).softmax(-1)[0]  # the CPU path: mask first, then filter
    assert expected[TOKENS:].sum().item() == 0 and expected[2] > 0
    assert (got - expected).abs().max().item() < 0.012, (got, expected)
    assert got[expected == 0].sum().item() == 0


@pytest.mark.parametrize("settings", [
    SamplingSettings(tokens=TOKENS),
    SamplingSettings(temperature=1.0, top_k=1, tokens=TOKENS),
    SamplingSettings(temperature=1.0, top_p=1e-6, tokens=TOKENS),
    SamplingSettings(temperature=1.0, min_p=1.0, tokens=TOKENS),
    SamplingSettings(repetition_penalty=1.3, tokens=TOKENS),
], ids=["greedy", "topk1", "topp0", "minp1", "penalty"])
def test_padded_ids_that_lead_leave_the_best_real_id_not_id_0(settings):
    """Masking after a filter that kept only padded ids left every logit at -inf, and argmax returned id 0."""
    assert _padded_picks(settings, rows=64).tolist() == [2] * 64


def test_repeated_calls_refill_the_same_buffers_and_equal_a_fresh_sampler():
    """The kept sampler's buffers (what captured graphs read) keep their addresses across calls and take each
    call's values: every call picks what a fresh sampler picks."""
    rows, vocab = 64, 50
    logits = torch.randn(rows, vocab, generator=torch.Generator().manual_seed(1)) * 3
    logits[:, 30:] += 4.0  # the padded ids lead
    calls = [SamplingSettings(temperature=1.0, top_k=5, tokens=30), SamplingSettings(temperature=1.0),
             SamplingSettings(temperature=0.7, top_p=0.8, tokens=40), SamplingSettings(tokens=20),
             SamplingSettings(temperature=1.2, min_p=0.2, repetition_penalty=1.4, tokens=30),
             SamplingSettings(repetition_penalty=2.0), SamplingSettings(temperature=1.0, top_k=3, tokens=25)]
    prompts = [[b % 7, 3] for b in range(rows)]
    kept = DeviceSampling(rows, vocab, torch.device("cpu"))
    addresses = None
    for i, settings in enumerate(calls):
        picks = []
        for sampling in (kept, DeviceSampling(rows, vocab, torch.device("cpu"))):
            sampling.start(settings, i, prompts)
            sampling.draw(rows)
            picks.append([sampling.pick(logits).tolist() for _ in range(2)])  # the second pick sees the first
        assert picks[0] == picks[1], settings
        if settings.tokens:
            assert max(max(p) for p in picks[0]) < settings.tokens
        current = {name: getattr(kept, name).data_ptr() for name in ("padding", "noise", "seen")
                   if getattr(kept, name) is not None}
        if addresses is not None:
            assert all(current[name] == ptr for name, ptr in addresses.items()), (addresses, current)
        addresses = current
    assert set(addresses) == {"padding", "noise", "seen"}


def test_padding_buffer_is_filled_in_place():
    sampling = DeviceSampling(2, 10, torch.device("cpu"))
    sampling.start(SamplingSettings(tokens=6), 0, [[], []])
    padding = sampling.padding
    assert padding is not None and padding.tolist() == [False] * 6 + [True] * 4
    sampling.start(SamplingSettings(temperature=1.0, tokens=8), 1, [[], []])
    assert sampling.padding is padding and padding.tolist() == [False] * 8 + [True] * 2
    sampling.start(SamplingSettings(), 0, [[], []])  # no padding this call: the buffer stays, unread
    assert sampling.padding is padding and sampling.pick(PADDED.expand(2, -1).clone()).tolist() == [6, 6]


def test_probabilities_are_fp32_on_bf16_logits():
    """bf16 logits are sampled from fp32 probabilities (as transformers upcasts): the same picks as their fp32
    copy, and top-p's cumulative sums stay exact over a large vocabulary (bf16 sums stall near 0.03)."""
    from desktop_app.engine.generate.sampling import apply_min_p, apply_top_p

    rows, vocab = 256, 4000
    logits = (torch.randn(rows, vocab, generator=torch.Generator().manual_seed(2)) * 0.5).to(torch.bfloat16)
    for settings in (SamplingSettings(temperature=1.0, top_p=0.6, tokens=3900),
                     SamplingSettings(temperature=0.8, min_p=0.1), SamplingSettings(tokens=3000)):
        picks = []
        for x in (logits, logits.float()):
            sampling = DeviceSampling(rows, vocab, torch.device("cpu"))
            sampling.start(settings, 5, [[]] * rows)
            sampling.draw(rows)
            picks.append(sampling.pick(x).tolist())
        assert picks[0] == picks[1], settings
    reference = logits[:4].double().softmax(-1)
    for p in (0.3, 0.6, 0.9):
        kept = torch.isfinite(apply_top_p(logits[:4], p))
        for row in range(4):
            probs = reference[row][kept[row]]
            mass = probs.sum().item()  # the smallest set reaching p: at least p, less without its least token
            assert p - 1e-4 <= mass and mass - probs.min().item() < p + 1e-4, (p, mass)
    min_kept = torch.isfinite(apply_min_p(logits[:4], 0.5))
    assert torch.equal(min_kept, reference >= reference.amax(-1, keepdim=True) * 0.5)
