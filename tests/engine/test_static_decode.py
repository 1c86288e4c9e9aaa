"""The static decode path on the CPU (the same code the GPU runs, without graph capture): exactness against
transformers and the lean runners, buckets, the kept decoder, weight refreshes, memory sizing, on-device
stop handling through stream_text and sample_completions. Sampling distributions: test_device_sampling.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from desktop_app.engine.data.tokenization import hf_tokenizer, train_tokenizer
from desktop_app.engine.errors import UserError
from desktop_app.engine.generate import static_cache
from desktop_app.engine.generate.buckets import batch_bucket, bucket_at_most, length_bucket, length_buckets
from desktop_app.engine.generate.cuda_graphs import GraphSet
from desktop_app.engine.generate.decode import stream_text
from desktop_app.engine.generate.device_sampling import SamplingSettings
from desktop_app.engine.generate.runners import forget_prepared_weights
from desktop_app.engine.generate.settings import DecodeLimits, PromptRows
from desktop_app.engine.generate.static_cache import StaticDecoder, check_fits, decoder_for, rows_that_fit
from desktop_app.engine.generate.static_decode import (
    StaticGeneration,
    StaticOptions,
    static_completions,
    use_static_path,
)
from desktop_app.engine.model.architecture import build_model
from desktop_app.engine.model.loading import LoadedModel
from desktop_app.engine.selfplay.rollout import sample_completions
from desktop_app.engine.specs import GenerateSpec, ModelSpec

CORPUS = ["Привет мир! Hello world 🙂 日本語のテキスト. The cat sat on the mat. " * 2 + str(i) for i in range(100)]
PROMPTS = ["Hi", "Привет мир! Hello world", "日本", "The cat sat on"]


def _model(family: str, kv_heads: int | None = None):
    # A larger init and untied embeddings make a random model's greedy text varied.
    kv = kv_heads if kv_heads is not None else (2 if family == "llama" else 4)
    spec = ModelSpec(family, 400, 64, 2, 4, kv, 128, 64, init_std=0.2, tie_embeddings=False)
    return build_model(spec, seed=0), spec


@pytest.fixture(scope="module")
def tokenizer():
    return hf_tokenizer(train_tokenizer(CORPUS, "byte-bpe", 400, min_frequency=1))


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def loaded(request, tokenizer):
    model, spec = _model(request.param)
    return LoadedModel(model=model, tokenizer=tokenizer, spec=spec, kind="hf", path=Path("."), name=request.param)


def _stats(loaded, prompt, backend="static", **kw):
    events = list(stream_text(loaded, prompt, GenerateSpec(**kw), backend=backend))
    return sorted((e for e in events if e.type == "generation"), key=lambda e: e.sample)


def _hf_greedy(model, ids: list[int], n: int, **kw) -> list[int]:
    out = model.generate(torch.tensor([ids]), max_new_tokens=n, do_sample=False, eos_token_id=None, pad_token_id=0,
                         **kw)
    return out[0, len(ids):].tolist()


# --- buckets ----------------------------------------------------------------------------------------

def test_batch_and_length_buckets():
    assert [batch_bucket(n) for n in (1, 2, 3, 5, 9, 17, 33, 49, 65, 97, 129, 193, 256, 257, 300)] == \
        [1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256, 256, 320, 320]
    assert [bucket_at_most(n) for n in (0, 1, 3, 47, 48, 255, 300, 1000)] == [0, 1, 2, 32, 48, 192, 256, 960]
    assert length_buckets(1024) == [64, 128, 192, 256, 384, 576, 896, 1024]
    assert [length_bucket(c, 1024) for c in (1, 64, 65, 272, 1000)] == [64, 64, 128, 384, 1024]
    assert length_buckets(40) == [40] and length_bucket(40, 40) == 40
    with pytest.raises(ValueError):
        length_bucket(1025, 1024)
    with pytest.raises(ValueError):
        batch_bucket(0)


# --- exactness --------------------------------------------------------------------------------------

def test_static_step_logits_match_transformers_forward(loaded):
    ids = loaded.tokenizer(["Привет мир! Hello world 🙂 The cat sat on the mat"], return_tensors="pt")["input_ids"]
    assert ids.shape[1] > 8
    with torch.inference_mode():
        ref = loaded.model(ids).logits
        d = StaticDecoder(loaded.model, 2, 128)
        first = d.prefill([ids[0, :3].tolist()], [0], 0, pad_id=0)
        torch.testing.assert_close(first, ref[:, 2], rtol=1e-4, atol=1e-4)
        d.idle_rows(1, 2)
        d.column.fill_(3)
        for t in range(3, ids.shape[1]):
            d.tokens[0] = ids[0, t]
            logits = d.step_logits(2, d.length_bucket(t + 1))  # two rows: the second one is idle
            torch.testing.assert_close(logits[:1], ref[:, t], rtol=1e-4, atol=1e-4)


def test_greedy_equals_generate_and_the_lean_runner_in_a_padded_batch(loaded):
    static = _stats(loaded, PROMPTS, max_new_tokens=14, temperature=0.0)
    lean = _stats(loaded, PROMPTS, backend="lean", max_new_tokens=14, temperature=0.0)
    assert len({len(loaded.tokenizer(p)["input_ids"]) for p in PROMPTS}) > 2  # left padding really exercised
    assert [s.token_ids for s in static] == [s.token_ids for s in lean]
    for prompt, stats in zip(PROMPTS, static, strict=True):
        assert stats.token_ids == _hf_greedy(loaded.model, loaded.tokenizer(prompt)["input_ids"], 14)
        assert stats.finish_reason == "length" and stats.text
    assert len(set(static[1].token_ids)) > 3  # varied text, not one repeated token


def test_grouped_query_llama_and_single_kv_head_match_generate(tokenizer):
    for kv in (1, 4):
        model, _ = _model("llama", kv_heads=kv)
        prompts = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]
        out = static_completions(model, PromptRows(prompts), DecodeLimits(10), SamplingSettings())
        assert out == [_hf_greedy(model, p, 10) for p in prompts]


def test_repetition_penalty_greedy_equals_generate(loaded):
    ids = loaded.tokenizer("The cat")["input_ids"]
    ours = _stats(loaded, "The cat", max_new_tokens=16, temperature=0.0, repetition_penalty=1.5)[0]
    assert ours.token_ids == _hf_greedy(loaded.model, ids, 16, repetition_penalty=1.5)


def test_samples_share_a_prefill_and_seeds_reproduce(loaded):
    greedy = _stats(loaded, "The cat", max_new_tokens=10, temperature=0.0, samples=3)
    assert greedy[0].token_ids == greedy[1].token_ids == greedy[2].token_ids
    a = _stats(loaded, "The cat", max_new_tokens=12, temperature=1.0, top_k=0, seed=5, samples=4)
    b = _stats(loaded, "The cat", max_new_tokens=12, temperature=1.0, top_k=0, seed=5, samples=4)
    c = _stats(loaded, "The cat", max_new_tokens=12, temperature=1.0, top_k=0, seed=6, samples=4)
    assert [s.token_ids for s in a] == [s.token_ids for s in b]
    assert [s.token_ids for s in a] != [s.token_ids for s in c]
    assert len({tuple(s.token_ids) for s in a}) > 1


def test_filters_that_keep_one_token_equal_greedy(loaded):
    greedy = _stats(loaded, "Hi", max_new_tokens=10, temperature=0.0)[0].token_ids
    for kw in ({"top_k": 1}, {"top_k": 0, "top_p": 1e-6}, {"top_k": 0, "min_p": 1.0}):
        assert _stats(loaded, "Hi", max_new_tokens=10, temperature=1.3, seed=3, **kw)[0].token_ids == greedy


# --- a vocabulary padded beyond the tokenizer -------------------------------------------------------

def _padded_model(family: str, vocab: int = 448, real: int = 400):
    """A model whose vocabulary is padded beyond a `real`-token tokenizer, the padded ids made to lead often."""
    spec = ModelSpec(family, vocab, 64, 2, 4, 2 if family == "llama" else 4, 128, 64, init_std=0.2,
                     tie_embeddings=False)
    model = build_model(spec, seed=0)
    with torch.no_grad():
        model.lm_head.weight[real:] *= 3.0
    return model, spec


PADDED_CALLS = [SamplingSettings(tokens=400), SamplingSettings(temperature=1.0, top_k=5, tokens=400),
                SamplingSettings(temperature=1.0), SamplingSettings(temperature=0.8, top_p=0.8, tokens=300),
                SamplingSettings(repetition_penalty=1.3, tokens=350),
                SamplingSettings(temperature=1.1, min_p=0.1, repetition_penalty=1.2, tokens=400),
                SamplingSettings(temperature=0.9, top_k=20, top_p=0.9, min_p=0.05, tokens=200)]


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_padded_ids_are_never_sampled_and_leading_ones_leave_the_best_real_id(family):
    model, _ = _padded_model(family)
    prompts = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]
    rows, limits = PromptRows(prompts, 2), DecodeLimits(12)
    unmasked = static_completions(model, rows, limits, SamplingSettings(), 3)
    assert any(t >= 400 for row in unmasked for t in row)  # the padded ids really lead
    greedy = static_completions(model, rows, limits, SamplingSettings(tokens=400), 3)
    lean = sample_completions(model, prompts, samples=2, max_new_tokens=12, temperature=0.0, tokens=400,
                              backend="lean")
    assert greedy == lean and all(t < 400 for row in greedy for t in row)
    for one in (dict(top_k=1), dict(top_p=1e-6), dict(min_p=1.0)):  # filters that keep the best real id only
        assert static_completions(model, rows, limits, SamplingSettings(temperature=1.3, tokens=400, **one),
                                  3) == greedy, one
    for settings in PADDED_CALLS[1:]:
        out = static_completions(model, rows, limits, settings, 3)
        assert all(t < (settings.tokens or 448) for row in out for t in row), settings
    sampled = sample_completions(model, prompts, samples=2, max_new_tokens=12, temperature=1.0, top_p=0.9, seed=1,
                                 tokens=400, backend="static")
    assert all(t < 400 for row in sampled for t in row)


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_repeated_calls_with_other_settings_equal_a_fresh_decoder(family):
    """The kept decoder's buffers take each call's settings in place (padding mask, noise, seen, stop table): a
    sequence of calls on it gives what each call gives on a fresh decoder, and its buffers keep their addresses."""
    model, _ = _padded_model(family)
    prompts = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]
    rows = PromptRows(prompts, 2)
    stops = [(), (7,), (), (9, 11), (), (), (3,)]
    kept_runs: list[list[list[int]]] = []
    addresses: dict[str, set[int]] = {}
    for i, (settings, stop) in enumerate(zip(PADDED_CALLS, stops, strict=True)):
        kept_runs.append(static_completions(model, rows, DecodeLimits(10, stop), settings, i))
        decoder = static_cache.kept_decoder(model)
        for name in ("padding", "noise", "seen"):
            if getattr(decoder.sampling(), name) is not None:
                addresses.setdefault(name, set()).add(getattr(decoder.sampling(), name).data_ptr())
        addresses.setdefault("stops", set()).add(tuple(t.data_ptr() for t in decoder.stops().buffers()))
    assert {name: len(ptrs) for name, ptrs in addresses.items()} == {"padding": 1, "noise": 1, "seen": 1, "stops": 1}
    for i, (settings, stop) in enumerate(zip(PADDED_CALLS, stops, strict=True)):
        static_cache.release_decoder(model)
        fresh = static_completions(model, rows, DecodeLimits(10, stop), settings, i)
        assert fresh == kept_runs[i], settings


def test_a_tokenizer_smaller_than_the_vocabulary_through_stream_text(tokenizer):
    model, spec = _padded_model("llama", vocab=len(tokenizer) + 48, real=len(tokenizer))
    loaded = LoadedModel(model=model, tokenizer=tokenizer, spec=spec, kind="hf", path=Path("."), name="padded")
    static = _stats(loaded, PROMPTS, max_new_tokens=14, temperature=0.0)
    lean = _stats(loaded, PROMPTS, backend="lean", max_new_tokens=14, temperature=0.0)
    assert [s.token_ids for s in static] == [s.token_ids for s in lean]
    sampled = _stats(loaded, PROMPTS, max_new_tokens=14, temperature=1.0, top_k=8, top_p=0.9, min_p=0.05, seed=2,
                     samples=2)
    assert all(t < len(tokenizer) for s in static + sampled for t in s.token_ids)
    assert len({tuple(s.token_ids) for s in sampled}) > 1


# --- stops ------------------------------------------------------------------------------------------

def test_stop_strings_and_eos_match_the_lean_path(loaded):
    lean = _stats(loaded, PROMPTS, backend="lean", max_new_tokens=24, temperature=0.0)
    piece = lean[1].text[5:8]  # a stop string that occurs in the middle of one row's text
    assert piece
    ref = _stats(loaded, PROMPTS, backend="lean", max_new_tokens=24, temperature=0.0, stop=[piece])
    got = _stats(loaded, PROMPTS, backend="static", max_new_tokens=24, temperature=0.0, stop=[piece])
    assert [(s.text, s.finish_reason, s.token_ids) for s in got] == [(s.text, s.finish_reason, s.token_ids)
                                                                     for s in ref]
    assert got[1].finish_reason == "stop" and piece not in got[1].text


def test_chunked_reads_give_the_same_tokens_and_end_rows_on_device(loaded):
    model = loaded.model
    prompts = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]
    every = static_completions(model, PromptRows(prompts, 2), DecodeLimits(20), SamplingSettings())
    stop = every[1][6]  # row 1 ends at its 7th token (others may end earlier where it occurs)
    runs = {}
    for sync in (1, 5, 32):
        rows: list[list[int]] = [[] for _ in range(6)]
        run = StaticGeneration(model, PromptRows(prompts, 2), DecodeLimits(20, {stop}),
                               options=StaticOptions(sync_every=sync))
        chunks = list(run.run())
        for chunk in chunks:
            for row, tokens in zip(rows, chunk.tokens, strict=True):
                row.extend(tokens)
        runs[sync] = rows
        assert len(chunks[0].tokens[0]) == 1  # the first token comes alone (time to first token)
    assert runs[1] == runs[5] == runs[32]
    for full, got in zip(every, runs[1], strict=True):
        cut = full.index(stop) + 1 if stop in full else len(full)
        assert got == full[:cut]  # each row ends after its first stop id, kept


def test_finish_rows_stops_a_row_and_the_run_ends_when_all_have(loaded):
    run = StaticGeneration(loaded.model, PromptRows([[5, 6, 7], [8, 9]]), DecodeLimits(30),
                           options=StaticOptions(sync_every=1))
    seen = [0, 0]
    chunks = 0
    for chunk in run.run():
        chunks += 1
        for b, tokens in enumerate(chunk.tokens):
            seen[b] += len(tokens)
        if chunks == 3:
            run.finish_rows([0])
        if chunks == 6:
            run.finish_rows([1])
    assert seen == [3, 6] and chunks == 6  # no token of an ended row, no step after the last row ended


def test_rollout_api_static_equals_lean_with_stop_ids_and_line_limits(loaded):
    model = loaded.model
    prompts = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14, 15, 16, 17, 18]]
    plain = sample_completions(model, prompts, samples=2, max_new_tokens=16, temperature=0.0, backend="lean")
    newline = {plain[0][3], plain[4][2]}
    stop = {plain[2][5]}
    kw = dict(samples=2, max_new_tokens=16, temperature=0.0, stop_ids=stop, newline_ids=newline, max_lines=2,
              max_len=24)
    lean = sample_completions(model, prompts, backend="lean", **kw)
    static = sample_completions(model, prompts, backend="static", **kw)
    assert static == lean
    assert any(len(r) < 16 for r in lean)  # the stops and line limits really cut rows
    sampled = [sample_completions(model, prompts, samples=3, max_new_tokens=12, temperature=1.0, top_p=0.9, seed=s,
                                  backend="static") for s in (1, 1, 2)]
    assert sampled[0] == sampled[1] != sampled[2]


def test_greedy_rollouts_stop_decoding_finished_rows_and_give_what_each_prompt_gives_alone(monkeypatch):
    """Once half of a greedy batch has finished, the runner keeps only the rows still writing (a chat model's long
    replies otherwise keep every short one decoding): each completion is the one its prompt gets alone."""
    from desktop_app.engine.generate import runners

    model, _ = _model("llama")
    prompts = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14, 15, 16, 17, 18], [20, 21, 22], [30], [31, 32, 33, 34]]
    plain = sample_completions(model, prompts, max_new_tokens=20, temperature=0.0, backend="lean")
    stop = {plain[0][2], plain[1][4], plain[3][1], plain[4][6]}  # rows end at different steps
    shrunk: list[int] = []
    reorder = runners.Runner.reorder

    def spy(self, indices):
        shrunk.append(int(indices.numel()))
        reorder(self, indices)

    monkeypatch.setattr(runners.Runner, "reorder", spy)
    batched = sample_completions(model, prompts, max_new_tokens=20, temperature=0.0, stop_ids=stop, backend="lean")
    assert shrunk and shrunk[0] <= len(prompts) // 2  # finished rows were dropped from the batch
    monkeypatch.setattr(runners.Runner, "reorder", reorder)
    alone = [sample_completions(model, [p], max_new_tokens=20, temperature=0.0, stop_ids=stop, backend="lean")[0]
             for p in prompts]
    assert batched == alone
    assert sorted(len(c) for c in batched)[0] < 20 == max(len(c) for c in batched)


@pytest.mark.parametrize("family", ["llama", "gpt2"])
@pytest.mark.parametrize("backend", ["lean", "hf"])
def test_prompts_sharing_a_prefix_prefill_it_once_and_each_gets_what_it_gets_alone(family, backend, monkeypatch):
    """A chat template and a task's instructions start every prompt: that prefix is prefilled once (batch 1), its
    cache rows repeated, then each prompt's own rest follows (padded on the left, between the two). Every
    completion, greedy or sampled with several samples, is the one the prompt gets alone."""
    from desktop_app.engine.generate import runners
    from desktop_app.engine.generate.prefill import shared_prefix

    model, _ = _model(family)
    head = list(range(40, 52))
    prompts = [[*head, 5, 6, 7], [*head, 10], [*head, 12, 13, 14, 15, 16, 17], [*head, 20, 21]]
    assert shared_prefix(prompts) == len(head) and shared_prefix([[*head, 1], [2, *head]]) == 0
    assert shared_prefix([head, head]) == len(head) - 1  # every prompt keeps a token of its own
    prefills: list[tuple[int, int]] = []
    original = runners.make_runner

    def spy(*args, **kwargs):
        runner = original(*args, **kwargs)
        inner = runner.prefill

        def prefill(ids, mask):
            prefills.append(tuple(ids.shape))
            return inner(ids, mask)

        runner.prefill = prefill
        return runner

    monkeypatch.setattr("desktop_app.engine.generate.prefill.make_runner", spy)
    greedy = sample_completions(model, prompts, max_new_tokens=12, temperature=0.0, backend=backend)
    assert prefills == [(1, len(head))]  # the prefix alone, once
    alone = [sample_completions(model, [p], max_new_tokens=12, temperature=0.0, backend=backend)[0] for p in prompts]
    assert greedy == alone
    monkeypatch.setattr("desktop_app.engine.generate.prefill.make_runner", original)
    kw = dict(samples=3, max_new_tokens=10, temperature=1.0, seed=4, backend=backend)
    shared = sample_completions(model, prompts, **kw)
    # sampled with several samples per prompt: the same draws as the plain path (the prefix minimum raised)
    monkeypatch.setattr("desktop_app.engine.generate.prefill.MIN_SHARED_PREFIX", 10_000)
    assert sample_completions(model, prompts, **kw) == shared


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_the_hf_runner_passes_its_cache_by_the_name_the_model_takes(family):
    """transformers renamed `past_key_values` to `cache` (the old name warns, then goes): the runner uses the name
    the model's forward declares, so decoding neither warns nor breaks on either side of the rename."""
    import inspect
    import warnings

    from desktop_app.engine.generate.runners import cache_keyword

    model, _ = _model(family)
    declared = inspect.signature(model.forward).parameters
    assert cache_keyword(model) == ("cache" if "cache" in declared else "past_key_values")

    class Older(torch.nn.Module):
        def forward(self, input_ids=None, past_key_values=None, use_cache=None):
            return None

    assert cache_keyword(Older()) == "past_key_values"
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*past_key_values.*", category=FutureWarning)
        out = sample_completions(model, [[5, 6, 7], [8, 9]], max_new_tokens=6, temperature=0.0, backend="hf")
    assert out == sample_completions(model, [[5, 6, 7], [8, 9]], max_new_tokens=6, temperature=0.0, backend="lean")


def test_a_batch_of_several_task_types_takes_one_completeness_check_per_prompt():
    model, _ = _model("llama")
    prompts = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]
    plain = sample_completions(model, prompts, max_new_tokens=12, temperature=0.0, backend="lean")
    checks = [lambda ids: len(ids) >= 3, None, lambda ids: len(ids) >= 5]
    cut = sample_completions(model, prompts, max_new_tokens=12, temperature=0.0, backend="lean", finished=checks)
    assert cut == [plain[0][:3], plain[1], plain[2][:5]]
    with pytest.raises(ValueError, match="2 completeness checks for 3 prompts"):
        sample_completions(model, prompts, max_new_tokens=4, temperature=0.0, finished=checks[:2])


# --- the kept decoder, weights, memory --------------------------------------------------------------

def test_the_decoder_is_kept_across_calls_grown_when_needed_and_private_when_busy():
    model, _ = _model("gpt2")
    prompts = [[5, 6, 7]]
    settings = SamplingSettings()
    first = static_completions(model, PromptRows(prompts), DecodeLimits(8), settings)
    kept = static_cache.kept_decoder(model)
    assert kept is not None and (kept.rows, kept.columns) == (1, 64)
    assert static_completions(model, PromptRows(prompts), DecodeLimits(8), settings) == first
    assert static_cache.kept_decoder(model) is kept  # reused, buffers and all
    static_completions(model, PromptRows(prompts, 5), DecodeLimits(80), settings)
    grown = static_cache.kept_decoder(model)
    assert grown is not kept and (grown.rows, grown.columns) == (8, 128)
    with grown.lock:  # another thread decoding: this call gets a private decoder and the same tokens
        again = static_completions(model, PromptRows(prompts), DecodeLimits(8), settings)
    assert again == first and static_cache.kept_decoder(model) is grown
    static_cache.release_decoder(model)
    assert static_cache.kept_decoder(model) is None


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_weights_changed_in_place_are_seen_by_the_next_call(family):
    model, _ = _model(family)
    prompt = [5, 6, 7, 8]

    def run():
        return static_completions(model, PromptRows([prompt]), DecodeLimits(10), SamplingSettings())[0]

    before = run()
    kept = static_cache.kept_decoder(model)
    with torch.no_grad():  # an optimizer-like in-place update that tensor versions show
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    assert run() == _hf_greedy(model, prompt, 10) != before
    for p in model.parameters():  # through .data: versions unchanged, as with fused optimizers
        p.data.mul_(-1.0)
    assert run() == _hf_greedy(model, prompt, 10)
    forget_prepared_weights(model)  # what the rollout objectives call each round (for the lean runners)
    assert run() == _hf_greedy(model, prompt, 10)
    assert static_cache.kept_decoder(model) is kept  # refreshed in place, not rebuilt


def test_memory_sizing_refuses_with_one_clear_line():
    model, _ = _model("llama")
    per_row = static_cache.kv_bytes_per_row(model, 256)
    assert per_row == 2 * 2 * 2 * 256 * 16 * 4  # k and v, 2 layers, 2 kv heads, 256 columns, head_dim 16, fp32
    assert rows_that_fit(model, 256) is None  # the CPU states no limit
    check_fits(model, 10**6, 256)  # ... and refuses nothing
    gib = 1 << 30
    assert rows_that_fit(model, 256, free=2 * gib) > 1000
    with pytest.raises(UserError, match=r"^the decode cache for 100000 rows x 256 tokens needs .* GiB .* at most "
                                        r"\d+ rows fit"):
        check_fits(model, 100_000, 256, free=gib)


def test_the_kept_decoder_counts_as_free_memory_for_the_call_that_takes_it_over(monkeypatch):
    """A repeat call near the memory limit is neither split nor refused because of its own kept cache: the fit
    check counts the decoder it will reuse (or free before growing) as free; a busy one (another thread's) not."""
    from desktop_app.engine.generate import static_decode

    model, _ = _model("gpt2")
    prompts = [[5, 6, 7], [8, 9], [10, 11, 12, 13]]
    args = (PromptRows(prompts, 2), DecodeLimits(8), SamplingSettings())
    first = static_completions(model, *args)
    kept = static_cache.kept_decoder(model)
    assert kept is not None and (kept.rows, kept.columns) == (8, 64)
    assert static_cache.reusable_decoder(model) is kept and static_cache.reusable_decoder(model, graphs=False) is None
    cache = kept.rows * static_cache.kv_bytes_per_row(model, 64)  # keys and values
    assert cache < kept.nbytes() < cache + 64 * kept.rows * 400  # the cache and the per-row vocabulary buffers
    per_row = static_cache.row_bytes(model, 64)
    free = (512 << 20) + 2 * per_row  # two rows beyond the reserve (the CPU's reserve: 512 MiB)
    assert rows_that_fit(model, 64, free=free) == 2
    assert rows_that_fit(model, 64, free=free, kept=kept) == (2 * per_row + kept.nbytes()) // per_row >= 8
    assert rows_that_fit(model, 64, free=0, kept=kept) == kept.rows  # its own rows always fit again
    assert rows_that_fit(model, 128, free=0, kept=kept) == 0  # a longer call grows it: then the bytes decide
    check_fits(model, 8, 64, free=0, kept=kept)
    with pytest.raises(UserError, match="decode cache"):
        check_fits(model, 8, 64, free=0)
    monkeypatch.setattr(static_cache, "free_memory", lambda device: free)  # a GPU-like reading, on the CPU
    runs: list[int] = []
    original = static_decode.StaticGeneration.run

    def spy(self):
        runs.append(self.n)
        return original(self)

    monkeypatch.setattr(static_decode.StaticGeneration, "run", spy)
    assert static_completions(model, *args) == first
    assert runs == [6] and static_cache.kept_decoder(model) is kept  # one group on the kept decoder, not three
    runs.clear()
    with kept.lock:  # busy: the call allocates beside it, so only the free memory counts
        assert static_cache.reusable_decoder(model) is None
        static_completions(model, *args)
    assert runs == [2, 2, 2]
    static_cache.release_decoder(model)


def test_graphs_fall_back_to_eager_steps_off_cuda():
    graphs = GraphSet(torch.device("cpu"))
    assert not graphs.enabled and "CUDA device" in graphs.reason
    calls = []
    graphs.run("key", lambda: calls.append(1))
    graphs.run("key", lambda: calls.append(2))
    assert calls == [1, 2] and graphs.captures == 0


def test_path_choice_and_its_reasons(loaded, monkeypatch):
    static, reason = use_static_path(loaded.model)
    assert not static and "cpu" in reason  # the CPU keeps the lean runners
    assert use_static_path(loaded.model, "static")[0] and not use_static_path(loaded.model, "lean")[0]
    odd, _ = _model("gpt2")
    odd.config.scale_attn_by_inverse_layer_idx = True
    with pytest.raises(ValueError, match="does not support"):
        use_static_path(odd, "static")
    with pytest.raises(ValueError, match="unknown backend"):
        list(stream_text(loaded, "Hi", GenerateSpec(max_new_tokens=2), backend="fast"))


def test_a_cancelled_static_stream_stops_and_frees_the_decoder(loaded):
    import threading

    stop = threading.Event()
    events = []
    for e in stream_text(loaded, "The cat", GenerateSpec(max_new_tokens=50, temperature=0.0), stop, backend="static"):
        events.append(e)
        stop.set()
    stats = [e for e in events if e.type == "generation"]
    assert stats[0].finish_reason == "cancelled" and len(stats[0].token_ids) < 50
    kept = decoder_for(loaded.model, 1, 64)
    assert not kept.lock.locked()


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_a_step_reads_nothing_back_to_the_host(family):
    """What CUDA graph capture needs (checked here without a GPU): torch.compile with fullgraph=True refuses
    any host read (.item(), .tolist(), data-dependent shapes) in the generation step, sampling with every
    processor and the stop checks included, and in the server's logits step."""
    model, _ = _model(family)
    d = StaticDecoder(model, 4, 128)
    sampling, stops = d.sampling(), d.stops()
    with torch.inference_mode():
        sampling.start(SamplingSettings(temperature=0.9, top_k=20, top_p=0.9, min_p=0.05, repetition_penalty=1.2), 0,
                       [[1, 2]] * 4)
        stops.start(3, {3}, {5}, 2)
        d.prefill([[5, 6, 7]], [0, 0, 0], 0, pad_id=0)
        d.idle_rows(3, 4)
        d.column.fill_(3)
        sampling.draw(4)

        def step() -> None:
            ids = sampling.pick(d.step_logits(4, 64))
            stops.record(ids)
            d.tokens[:4].copy_(ids)

        torch.compile(step, fullgraph=True, backend="eager")()
        logits = torch.zeros(4, 400)
        torch.compile(lambda: logits.copy_(d.step_logits(4, 64)), fullgraph=True, backend="eager")()
    assert stops.count.item() == 1 and d.column.item() == 5 and torch.isfinite(logits[:3]).all()
