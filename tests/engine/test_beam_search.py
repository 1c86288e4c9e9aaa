"""Beam search: the same sequences (and scores) as transformers' generate(num_beams=N), greedy at one beam,
runner cache reordering, stream_text's beam path, stop strings, cancelling and refused settings."""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import pytest
import torch

from desktop_app.engine.data.chat import stop_token_ids
from desktop_app.engine.data.tokenization import hf_tokenizer, train_tokenizer
from desktop_app.engine.errors import UserError
from desktop_app.engine.generate.beam_search import BeamSearch, beam_search
from desktop_app.engine.generate.decode import stream_text
from desktop_app.engine.generate.runners import make_runner
from desktop_app.engine.generate.settings import BeamSettings, DecodeLimits, Vocab
from desktop_app.engine.generate.threads import torch_threads
from desktop_app.engine.model.architecture import build_model
from desktop_app.engine.model.loading import LoadedModel
from desktop_app.engine.specs import GenerateSpec, ModelSpec, SpecError

CORPUS = ["Привет мир! Hello world 🙂 日本語のテキスト. The cat sat on the mat. " * 2 + str(i) for i in range(100)]
PROMPTS = ["Hi", "Привет мир! Hello world", "The cat sat on"]
BUDGET = 12
# (num_beams, length_penalty, early_stopping): every setting at least once, 4 beams with each penalty.
CASES = [(2, 1.0, False), (4, 1.0, False), (4, 0.5, False), (4, 2.0, False), (4, 2.0, True), (4, 2.0, "never"),
         (2, 0.5, True), (4, 0.5, "never"), (4, 1.0, True)]


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    # Tiny models on a busy shared machine: more threads only add synchronisation (see generate/threads.py).
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def tokenizer():
    return hf_tokenizer(train_tokenizer(CORPUS, "byte-bpe", 400, min_frequency=1))


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def loaded(request, tokenizer):
    # As in test_generation.py: a larger init and untied embeddings give a random model varied text.
    spec = ModelSpec(request.param, 400, 64, 2, 4, 2 if request.param == "llama" else 4, 128, 64, init_std=0.2,
                     tie_embeddings=False)
    model = build_model(spec, seed=0).eval()
    return LoadedModel(model=model, tokenizer=tokenizer, spec=spec, kind="hf", path=Path("."), name=request.param)


def _hf_greedy(model, ids, n=BUDGET):
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0)
    return out[0, len(ids):].tolist()


def _hf_beams(model, ids, beams, lp, early, eos, returned):
    """transformers' beam search: (generated ids of each returned beam, cut after its end id; scores)."""
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                             max_new_tokens=BUDGET, do_sample=False, num_beams=beams, length_penalty=lp,
                             early_stopping=early, eos_token_id=eos or None, pad_token_id=0,
                             num_return_sequences=returned, return_dict_in_generate=True, output_scores=True)
    seqs = []
    for row in out.sequences[:, len(ids):].tolist():
        end = next((i for i, t in enumerate(row) if t in eos), None)
        seqs.append(row if end is None else row[: end + 1])
    return seqs, out.sequences_scores.tolist()


@pytest.mark.parametrize("backend", ["lean", "hf"])
def test_same_sequences_and_scores_as_transformers(loaded, backend):
    model, reasons, outcomes = loaded.model, set(), {}
    for prompt, eos_reachable in itertools.product(PROMPTS, (False, True)):
        ids = loaded.tokenizer(prompt)["input_ids"]
        greedy = _hf_greedy(model, ids)
        # End ids the model really produces (taken from its greedy text), or none at all.
        eos = [greedy[2], greedy[6]] if eos_reachable else []
        for beams, lp, early in CASES:
            ref, ref_scores = _hf_beams(model, ids, beams, lp, early, eos, beams)
            hyps = beam_search(model, [ids], BeamSettings(beams, lp, early, num_return=beams),
                               DecodeLimits(BUDGET, set(eos)), Vocab(pad=0), backend)[0]
            where = (prompt, eos, beams, lp, early)
            assert [h.token_ids for h in hyps] == ref, where
            assert [h.score for h in hyps] == pytest.approx(ref_scores, abs=1e-4), where
            reasons.update(h.finish_reason for h in hyps)
            outcomes.setdefault((prompt, eos_reachable, beams, early), set()).add(tuple(hyps[0].token_ids))
    assert reasons == {"eos", "length"}  # end ids were really reached, and the budget too
    assert any(len(best) > 1 for best in outcomes.values())  # the length penalty changed some answer


def test_one_beam_is_greedy(loaded):
    for prompt in PROMPTS:
        ids = loaded.tokenizer(prompt)["input_ids"]
        hyp = beam_search(loaded.model, [ids], BeamSettings(1), DecodeLimits(BUDGET))[0][0]
        assert hyp.token_ids == _hf_greedy(loaded.model, ids)
        greedy = next(e for e in stream_text(loaded, prompt, GenerateSpec(max_new_tokens=BUDGET, temperature=0.0,
                                                                          num_beams=1)) if e.type == "generation")
        assert greedy.token_ids == hyp.token_ids


def test_repetition_penalty_matches_transformers(loaded):
    ids = loaded.tokenizer("The cat sat on")["input_ids"]
    for penalty in (1.5, 0.8):
        with torch.no_grad():
            ref = loaded.model.generate(torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                        max_new_tokens=BUDGET, do_sample=False, num_beams=3,
                                        repetition_penalty=penalty, eos_token_id=None, pad_token_id=0)
        hyp = beam_search(loaded.model, [ids], BeamSettings(3, repetition_penalty=penalty), DecodeLimits(BUDGET))[0][0]
        assert hyp.token_ids == ref[0, len(ids):].tolist()


@pytest.mark.parametrize("backend", ["lean", "hf"])
def test_padded_batch_of_prompts_equals_one_at_a_time(loaded, backend):
    encoded = [loaded.tokenizer(p)["input_ids"] for p in PROMPTS]
    assert len({len(e) for e in encoded}) == len(encoded)  # left padding is really exercised
    settings = (BeamSettings(3, 0.5, num_return=2), DecodeLimits(10, {45, 80, 163}), Vocab(), backend)
    batch = beam_search(loaded.model, encoded, *settings)
    for i, ids in enumerate(encoded):
        single = beam_search(loaded.model, [ids], *settings)[0]
        assert [h.token_ids for h in batch[i]] == [h.token_ids for h in single]
        assert [h.prompt for h in batch[i]] == [i, i] and [h.rank for h in batch[i]] == [0, 1]


@pytest.mark.parametrize("backend", ["lean", "hf"])
def test_runner_reorder_moves_cache_rows(loaded, backend):
    tok = loaded.tokenizer
    prompts = [tok("Hi there")["input_ids"], tok("The cat sat")["input_ids"], tok("Привет мир")["input_ids"]]
    longest = max(map(len, prompts))
    ids = torch.tensor([[0] * (longest - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (longest - len(p)) + [1] * len(p) for p in prompts])
    order = [2, 0, 0]
    nxt = torch.tensor([7, 8, 9])
    with torch.inference_mode():
        runner = make_runner(loaded.model, 3, longest + 4, backend)
        runner.prefill(ids, mask)
        runner.reorder(torch.tensor(order))
        moved = runner.step(nxt)
        again = make_runner(loaded.model, 3, longest + 4, backend)
        again.prefill(ids[order], mask[order])
        direct = again.step(nxt)
    torch.testing.assert_close(moved, direct, rtol=1e-4, atol=1e-4)


def test_stream_text_runs_beams(loaded):
    spec = GenerateSpec(max_new_tokens=BUDGET, temperature=0.0, num_beams=4, samples=3, length_penalty=0.5)
    events = list(stream_text(loaded, PROMPTS[:2], spec))
    stats = sorted((e for e in events if e.type == "generation"), key=lambda e: e.sample)
    assert [s.sample for s in stats] == list(range(6))
    eos = stop_token_ids(loaded.tokenizer, loaded.model, chat=False)
    for p, prompt in enumerate(PROMPTS[:2]):
        ids = loaded.tokenizer(prompt)["input_ids"]
        hyps = beam_search(loaded.model, [ids], BeamSettings(4, 0.5, num_return=3), DecodeLimits(BUDGET, eos),
                           Vocab(pad=loaded.tokenizer.pad_token_id))[0]
        for rank, hyp in enumerate(hyps):
            got = stats[p * 3 + rank]
            assert got.token_ids == hyp.token_ids and got.finish_reason == hyp.finish_reason
            # The text the sampling path shows for the same ids.
            assert got.text == loaded.tokenizer.decode(hyp.token_ids, skip_special_tokens=True)
            assert "".join(e.text for e in events if e.type == "delta" and e.sample == got.sample) == got.text


def test_stop_strings_end_beams_and_cut_the_text(loaded):
    spec = GenerateSpec(max_new_tokens=BUDGET, temperature=0.0, num_beams=3, samples=3, length_penalty=-2.0)
    plain = [e for e in stream_text(loaded, "The cat", spec) if e.type == "generation"]
    text = plain[0].text
    start = next(i for i in range(2, len(text) - 2) if "\ufffd" not in text[i:i + 2])
    stop = text[start:start + 2]
    stopped = [e for e in stream_text(loaded, "The cat", spec.replace(stop=[stop])) if e.type == "generation"]
    assert all(stop not in s.text for s in stopped)
    best = stopped[0]  # a negative length penalty favours the shortest: the beam that hit the stop string
    assert best.finish_reason == "stop" and best.text == text[: text.index(stop)]


def test_cancel_returns_the_best_so_far(loaded):
    class AfterCalls:
        def __init__(self, n):
            self.n = n

        def is_set(self):
            self.n -= 1
            return self.n < 0

    spec = GenerateSpec(max_new_tokens=40, temperature=0.0, num_beams=3, samples=2)
    stats = [e for e in stream_text(loaded, "Hi", spec, AfterCalls(4)) if e.type == "generation"]
    assert [s.finish_reason for s in stats] == ["cancelled", "cancelled"]
    assert all(len(s.token_ids) == 4 for s in stats)
    stats = [e for e in stream_text(loaded, "Hi", spec, AfterCalls(0)) if e.type == "generation"]
    assert [(s.finish_reason, s.token_ids) for s in stats] == [("cancelled", [])] * 2


def test_bad_settings_are_refused_clearly(loaded):
    cases = [(dict(num_beams=0), "num_beams must be a whole number of at least 1"),
             (dict(num_beams=65, temperature=0.0), "at most 64"),
             (dict(num_beams=2, length_penalty=math.nan, temperature=0.0), "length_penalty must be between"),
             (dict(num_beams=2, length_penalty=math.inf, temperature=0.0), "length_penalty must be between"),
             (dict(num_beams=4, temperature=0.8), "set temperature to 0"),
             (dict(num_beams=2, samples=3, temperature=0.0), "samples 3 cannot exceed num_beams 2"),
             (dict(num_beams=2, early_stopping="sometimes", temperature=0.0), "early_stopping must be one of")]
    for settings, message in cases:
        with pytest.raises(SpecError, match=message):
            list(stream_text(loaded, "Hi", GenerateSpec(**settings)))
    assert GenerateSpec(num_beams=4, temperature=0.0, early_stopping=True).validate() == []
    ids = [5, 6]
    for settings, message in [(dict(num_beams=0), "num_beams"), (dict(num_beams=2, length_penalty=math.nan),
                                                                  "finite"),
                              (dict(num_beams=2, num_return=3), "returned beams"),
                              (dict(num_beams=2, early_stopping="maybe"), "early_stopping")]:
        with pytest.raises(UserError, match=message):
            BeamSearch(loaded.model, [ids], BeamSettings(**settings), DecodeLimits(4))
