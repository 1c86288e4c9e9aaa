"""stream_text: equals transformers' greedy generate(), batch == single, every sampling setting, streaming."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest
import torch

from desktop_app.engine.data.tokenization import hf_tokenizer, train_tokenizer
from desktop_app.engine.devices import cpu_cores
from desktop_app.engine.errors import UserError
from desktop_app.engine.generate import runners, threads
from desktop_app.engine.generate.decode import stream_text
from desktop_app.engine.generate.prompts import encode_prompt
from desktop_app.engine.generate.runners import make_runner
from desktop_app.engine.generate.threads import decode_threads
from desktop_app.engine.model.architecture import build_model
from desktop_app.engine.model.loading import LoadedModel
from desktop_app.engine.specs import GenerateSpec, ModelSpec, SpecError

CORPUS = ["Привет мир! Hello world 🙂 日本語のテキスト. The cat sat on the mat. " * 2 + str(i) for i in range(100)]
PROMPTS = ["Hi", "Привет мир! Hello world", "日本", "The cat sat on"]


@pytest.fixture(scope="module")
def tokenizer():
    return hf_tokenizer(train_tokenizer(CORPUS, "byte-bpe", 400, min_frequency=1))


def _model(family: str) -> torch.nn.Module:
    # A larger init and untied embeddings make a random model's greedy text varied (with the default
    # init it repeats the prompt's last token), so the comparisons below actually compare something.
    spec = ModelSpec(family, 400, 64, 2, 4, 2 if family == "llama" else 4, 128, 64, init_std=0.2,
                     tie_embeddings=False)
    return build_model(spec, seed=0), spec


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def loaded(request, tokenizer):
    model, spec = _model(request.param)
    return LoadedModel(model=model, tokenizer=tokenizer, spec=spec, kind="hf", path=Path("."), name=request.param)


def _run(loaded, prompt, **kw):
    backend = kw.pop("backend", "auto")
    stop_event = kw.pop("stop_event", None)
    events = list(stream_text(loaded, prompt, GenerateSpec(**kw), stop_event, backend=backend))
    stats = sorted((e for e in events if e.type == "generation"), key=lambda e: e.sample)
    deltas = [e for e in events if e.type == "delta"]
    return stats, deltas


def _greedy(loaded, prompt, n=16, **kw):
    return _run(loaded, prompt, max_new_tokens=n, temperature=0.0, **kw)[0][0]


@pytest.mark.parametrize("backend", ["lean", "hf"])
def test_greedy_equals_transformers_generate(loaded, backend):
    for prompt in PROMPTS:
        ids = loaded.tokenizer(prompt, return_tensors="pt")
        ref = loaded.model.generate(**ids, max_new_tokens=16, do_sample=False, eos_token_id=None, pad_token_id=0)
        ours = _greedy(loaded, prompt, backend=backend)
        assert ours.token_ids == ref[0, ids["input_ids"].shape[1]:].tolist()
        assert ours.finish_reason == "length"
        assert len(set(ours.token_ids)) > 3  # a varied sequence, not one repeated token


def test_greedy_with_repetition_penalty_equals_transformers(loaded):
    ids = loaded.tokenizer("The cat", return_tensors="pt")
    ref = loaded.model.generate(**ids, max_new_tokens=16, do_sample=False, repetition_penalty=1.5,
                                eos_token_id=None, pad_token_id=0)
    ours = _greedy(loaded, "The cat", repetition_penalty=1.5)
    assert ours.token_ids == ref[0, ids["input_ids"].shape[1]:].tolist()


@pytest.mark.parametrize("prepared", [True, False])
def test_lean_logits_match_transformers_forward(loaded, prepared, monkeypatch):
    # prepared: the transposed, norm-folded weight copies; else the model's own weights (huge models).
    monkeypatch.setattr(runners, "_FUSE_MAX_PARAMS", 10**12 if prepared else 0)
    ids = loaded.tokenizer(["Привет мир! Hello world 🙂 The cat sat on the mat"], return_tensors="pt")["input_ids"]
    assert ids.shape[1] > 8
    with torch.inference_mode():
        ref = loaded.model(ids).logits
        runner = make_runner(loaded.model, 1, 64, "lean")
        first = runner.prefill(ids[:, :3], None)
        torch.testing.assert_close(first, ref[:, 2], rtol=1e-4, atol=1e-4)
        for t in range(3, ids.shape[1]):
            torch.testing.assert_close(runner.step(ids[:, t]), ref[:, t], rtol=1e-4, atol=1e-4)


def test_unprepared_lean_path_equals_prepared_in_a_padded_batch(loaded, monkeypatch):
    prepared, _ = _run(loaded, PROMPTS, max_new_tokens=10, temperature=0.0, backend="lean")
    monkeypatch.setattr(runners, "_FUSE_MAX_PARAMS", 0)
    plain, _ = _run(loaded, PROMPTS, max_new_tokens=10, temperature=0.0, backend="lean")
    assert [s.token_ids for s in plain] == [s.token_ids for s in prepared]


@pytest.mark.parametrize("backend", ["lean", "hf"])
def test_batch_equals_single_under_greedy_with_different_prompt_lengths(loaded, backend):
    stats, _ = _run(loaded, PROMPTS, max_new_tokens=12, temperature=0.0, backend=backend)
    lengths = {len(loaded.tokenizer(p)["input_ids"]) for p in PROMPTS}
    assert len(lengths) > 2  # left padding is really exercised
    assert [s.sample for s in stats] == [0, 1, 2, 3]
    for prompt, batched in zip(PROMPTS, stats, strict=False):
        assert batched.token_ids == _greedy(loaded, prompt, 12, backend=backend).token_ids


def test_greedy_is_deterministic_and_samples_agree(loaded):
    stats, _ = _run(loaded, "The cat", max_new_tokens=10, temperature=0.0, samples=3)
    assert stats[0].token_ids == stats[1].token_ids == stats[2].token_ids == _greedy(loaded, "The cat", 10).token_ids


def test_seed_reproducibility_and_several_samples(loaded):
    a, _ = _run(loaded, "The cat", max_new_tokens=12, temperature=1.0, top_k=0, seed=5, samples=4)
    b, _ = _run(loaded, "The cat", max_new_tokens=12, temperature=1.0, top_k=0, seed=5, samples=4)
    c, _ = _run(loaded, "The cat", max_new_tokens=12, temperature=1.0, top_k=0, seed=6, samples=4)
    assert [s.token_ids for s in a] == [s.token_ids for s in b]
    assert [s.token_ids for s in a] != [s.token_ids for s in c]
    assert len({tuple(s.token_ids) for s in a}) > 1  # the samples differ from each other


def test_top_k_one_equals_greedy(loaded):
    sampled = _run(loaded, "Hi", max_new_tokens=10, temperature=1.3, top_k=1, seed=3)[0][0]
    assert sampled.token_ids == _greedy(loaded, "Hi", 10).token_ids
    tiny_p = _run(loaded, "Hi", max_new_tokens=10, temperature=1.0, top_k=0, top_p=1e-6, seed=3)[0][0]
    assert tiny_p.token_ids == _greedy(loaded, "Hi", 10).token_ids
    full_min_p = _run(loaded, "Hi", max_new_tokens=10, temperature=1.0, top_k=0, min_p=1.0, seed=3)[0][0]
    assert full_min_p.token_ids == _greedy(loaded, "Hi", 10).token_ids


def test_repetition_penalty_reduces_repeats(loaded):
    def repeats(ids):
        return len(ids) - len(set(ids))

    plain = _greedy(loaded, "The cat", 40)
    penalised = _greedy(loaded, "The cat", 40, repetition_penalty=5.0)
    assert repeats(penalised.token_ids) < repeats(plain.token_ids)


def test_max_new_tokens_and_text_is_the_sum_of_deltas(loaded):
    stats, deltas = _run(loaded, "Привет", max_new_tokens=7, temperature=0.0)
    assert len(stats[0].token_ids) == 7 and stats[0].finish_reason == "length"
    assert "".join(d.text for d in deltas) == stats[0].text
    assert stats[0].ttft_ms > 0 and stats[0].tokens_per_s > 0


def test_eos_ends_a_sample(loaded):
    ref = _greedy(loaded, "The cat", 16).token_ids
    eos = ref[5]
    cut = ref.index(eos)
    old = loaded.model.generation_config.eos_token_id
    loaded.model.generation_config.eos_token_id = eos
    try:
        stats, _ = _run(loaded, ["The cat", "The cat"], max_new_tokens=16, temperature=0.0)
    finally:
        loaded.model.generation_config.eos_token_id = old
    for s in stats:
        assert s.finish_reason == "eos"
        assert s.token_ids == ref[: cut + 1]  # the EOS id is reported, its text is not


def test_stop_string_ends_a_sample_and_is_not_shown(loaded):
    full = _greedy(loaded, "The cat", 24).text
    start = next(i for i in range(2, len(full) - 2) if "\ufffd" not in full[i:i + 2])
    stop = full[start:start + 2]
    stats, deltas = _run(loaded, "The cat", max_new_tokens=24, temperature=0.0, stop=[stop, "never-there"])
    assert stats[0].finish_reason == "stop"
    assert stats[0].text == full[: full.index(stop)]
    assert "".join(d.text for d in deltas) == stats[0].text


def test_cancellation_mid_stream(loaded):
    stop = threading.Event()
    events = []
    for event in stream_text(loaded, "The cat", GenerateSpec(max_new_tokens=50, temperature=0.0, samples=2), stop):
        events.append(event)
        if len(events) == 3:
            stop.set()
    stats = [e for e in events if e.type == "generation"]
    assert len(stats) == 2
    assert all(s.finish_reason == "cancelled" and 0 < len(s.token_ids) < 50 for s in stats)


def test_utf8_streaming_never_splits_characters(loaded):
    # Random-model output is mostly byte soup; whatever it is, no delta may hold a broken character
    # unless it is a real replacement character held back for several tokens.
    stats, deltas = _run(loaded, "Привет 🙂", max_new_tokens=40, temperature=1.0, top_k=0, seed=11)
    for d in deltas:
        d.text.encode("utf-8")
    assert "".join(d.text for d in deltas) == stats[0].text


def test_chat_mode_wraps_the_prompt(loaded):
    ids = encode_prompt(loaded.tokenizer, "Hi", chat=True)
    user = loaded.tokenizer.convert_tokens_to_ids("<|user|>")
    assistant = loaded.tokenizer.convert_tokens_to_ids("<|assistant|>")
    assert ids[0] == user and ids[-1] == assistant
    stats, _ = _run(loaded, "Hi", max_new_tokens=5, temperature=0.0, chat=True)
    assert len(stats[0].token_ids) <= 5


def test_chat_mode_without_template_is_a_clear_error(loaded):
    plain = hf_tokenizer(train_tokenizer(["abc def"] * 20, "byte-bpe", 300))
    plain.chat_template = None
    other = LoadedModel(loaded.model, plain, loaded.spec, "hf", Path("."), "x")
    with pytest.raises(UserError, match="chat template"):
        _run(other, "Hi", chat=True)


def test_long_prompt_is_cut_to_the_context(loaded):
    long_prompt = "The cat sat on the mat. " * 40  # far more tokens than the 64-token context
    stats, _ = _run(loaded, long_prompt, max_new_tokens=20, temperature=0.0)
    assert 1 <= len(stats[0].token_ids) <= 20


def test_bad_settings_are_refused(loaded):
    with pytest.raises(SpecError):
        _run(loaded, "Hi", temperature=-1.0)
    with pytest.raises(SpecError):
        _run(loaded, "Hi", stop=[""])
    with pytest.raises(UserError):
        _run(loaded, [])


def test_thread_policy_and_restore(loaded):
    assert decode_threads(loaded.model, 1) == 1
    before = torch.get_num_threads()
    switch = sys.getswitchinterval()
    seen = []
    for _event in stream_text(loaded, "Hi", GenerateSpec(max_new_tokens=3, temperature=0.0), threads=1):
        seen.append(torch.get_num_threads())
    assert set(seen) == {1}
    assert torch.get_num_threads() == before
    assert sys.getswitchinterval() == switch  # the shorter GIL switch interval is restored too


def test_auto_threads_only_use_one_or_all_cores_restore_and_change_no_token(loaded, monkeypatch):
    monkeypatch.setattr(threads, "_TUNE_MIN_WORK", 0)  # tune even this tiny model
    spec = GenerateSpec(max_new_tokens=24, temperature=0.0)
    pinned = [e for e in stream_text(loaded, "The cat", spec, threads=1) if e.type == "generation"]
    before = torch.get_num_threads()
    seen = set()
    for _ in range(2):  # the second call resumes the first call's tuner state
        events = []
        for event in stream_text(loaded, "The cat", spec, threads="auto"):
            seen.add(torch.get_num_threads())
            events.append(event)
        assert [e.token_ids for e in events if e.type == "generation"] == [e.token_ids for e in pinned]
    assert seen <= {1, cpu_cores()}
    assert torch.get_num_threads() == before
    assert threads._TUNING  # the tuner ran and left its state for the next call


def test_weight_changes_are_seen_between_calls(loaded):
    # The lean path caches fused weight copies; an in-place update (a training step) must invalidate them.
    before = _greedy(loaded, "The cat", 12, backend="lean").token_ids
    params = list(loaded.model.parameters())
    saved = [p.detach().clone() for p in params]
    try:
        with torch.no_grad():
            for p in params:
                if p.dim() == 2:
                    p.mul_(-1.5)
        ids = loaded.tokenizer("The cat", return_tensors="pt")
        ref = loaded.model.generate(**ids, max_new_tokens=12, do_sample=False, eos_token_id=None, pad_token_id=0)
        after = _greedy(loaded, "The cat", 12, backend="lean").token_ids
        assert after == ref[0, ids["input_ids"].shape[1]:].tolist() and after != before
    finally:
        with torch.no_grad():
            for p, s in zip(params, saved, strict=True):
                p.copy_(s)
    assert _greedy(loaded, "The cat", 12, backend="lean").token_ids == before


def test_tokenizer_larger_than_model_is_refused(loaded):
    big = hf_tokenizer(train_tokenizer(CORPUS * 3, "byte-bpe", 800, min_frequency=1))
    other = LoadedModel(loaded.model, big, loaded.spec, "hf", Path("."), "x")
    high = next(t for t, i in big.get_vocab().items() if i >= 400)
    with pytest.raises(UserError, match="does not know"):
        _run(other, big.convert_tokens_to_string([high]))


def test_several_prompts_times_samples_are_numbered_prompt_major(loaded):
    stats, _ = _run(loaded, ["Hi", "The cat sat"], max_new_tokens=6, temperature=0.0, samples=2)
    hi, cat = _greedy(loaded, "Hi", 6).token_ids, _greedy(loaded, "The cat sat", 6).token_ids
    assert [s.token_ids for s in stats] == [hi, hi, cat, cat]
