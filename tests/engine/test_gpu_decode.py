"""The static decode path on CUDA (issue 22): exactness, graphs, stop strings, sampling distributions, cache
reuse, out-of-memory handling, rollouts and the server's graph buckets. Marked `gpu`; skipped without CUDA.

Run where a GPU is lent:  python -m pytest -q -p no:cacheprovider -m gpu tests/engine/test_gpu_decode.py
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from desktop_app.engine.data.tokenization import hf_tokenizer, train_tokenizer
from desktop_app.engine.errors import UserError
from desktop_app.engine.generate import static_cache
from desktop_app.engine.generate.cuda_graphs import GraphSet
from desktop_app.engine.generate.decode import stream_text
from desktop_app.engine.generate.device_sampling import DeviceSampling, SamplingSettings
from desktop_app.engine.generate.runners import forget_prepared_weights
from desktop_app.engine.generate.settings import DecodeLimits, PromptRows
from desktop_app.engine.generate.static_cache import StaticDecoder, rows_that_fit
from desktop_app.engine.generate.static_decode import StaticOptions, static_completions, use_static_path
from desktop_app.engine.model.architecture import build_model
from desktop_app.engine.model.loading import LoadedModel
from desktop_app.engine.selfplay.rollout import sample_completions
from desktop_app.engine.specs import GenerateSpec, ModelSpec

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none here)")]

CORPUS = ["Привет мир! Hello world 🙂 日本語のテキスト. The cat sat on the mat. " * 2 + str(i) for i in range(100)]
PROMPTS = ["Hi", "Привет мир! Hello world", "日本", "The cat sat on"]


@pytest.fixture(autouse=True)
def _exact_fp32():
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


@pytest.fixture(scope="module")
def tokenizer():
    return hf_tokenizer(train_tokenizer(CORPUS, "byte-bpe", 400, min_frequency=1))


def _pair(family: str, tokenizer) -> tuple[LoadedModel, LoadedModel]:
    """The same random model on the CPU and on the GPU (fp32)."""
    spec = ModelSpec(family, 400, 64, 2, 4, 2 if family == "llama" else 4, 128, 64, init_std=0.2,
                     tie_embeddings=False)
    cpu = build_model(spec, seed=0)
    gpu = build_model(spec, seed=0).to("cuda")
    wrap = lambda m: LoadedModel(model=m, tokenizer=tokenizer, spec=spec, kind="hf", path=Path("."), name=family)  # noqa: E731
    return wrap(cpu), wrap(gpu)


@pytest.fixture(scope="module", params=["llama", "gpt2"])
def pair(request, tokenizer):
    return _pair(request.param, tokenizer)


def _stats(loaded, prompt, backend="auto", stop_event=None, **kw):
    events = list(stream_text(loaded, prompt, GenerateSpec(**kw), stop_event, backend=backend))
    return sorted((e for e in events if e.type == "generation"), key=lambda e: e.sample)


def test_cuda_takes_the_static_path_with_graphs_and_greedy_matches_transformers_and_the_cpu(pair):
    cpu, gpu = pair
    assert use_static_path(gpu.model)[0]
    ours = _stats(gpu, PROMPTS, max_new_tokens=24, temperature=0.0)
    lean = _stats(cpu, PROMPTS, max_new_tokens=24, temperature=0.0)  # the CPU decoder, as it is
    assert [s.token_ids for s in ours] == [s.token_ids for s in lean]
    for prompt, stats in zip(PROMPTS, ours, strict=True):
        ids = gpu.tokenizer(prompt, return_tensors="pt").to("cuda")
        ref = gpu.model.generate(**ids, max_new_tokens=24, do_sample=False, eos_token_id=None, pad_token_id=0)
        assert stats.token_ids == ref[0, ids["input_ids"].shape[1]:].tolist()
    decoder = static_cache.kept_decoder(gpu.model)
    assert decoder is not None and decoder.graphs.enabled and decoder.graphs.captures > 0
    assert decoder.graphs.replays >= 20  # the steps really replayed graphs


def test_graphs_and_eager_steps_give_the_same_tokens(pair):
    _, gpu = pair
    prompts = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]
    for settings in (SamplingSettings(), SamplingSettings(temperature=1.0, top_k=20, top_p=0.9)):
        runs = [static_completions(gpu.model, PromptRows(prompts, 3), DecodeLimits(30), settings, 4,
                                   StaticOptions(graphs=g)) for g in (True, False)]
        assert runs[0] == runs[1]


def test_stop_strings_and_sampling_settings_on_the_gpu(pair):
    cpu, gpu = pair
    lean = _stats(cpu, PROMPTS, max_new_tokens=30, temperature=0.0)
    piece = lean[1].text[5:8]
    ref = _stats(cpu, PROMPTS, max_new_tokens=30, temperature=0.0, stop=[piece])
    got = _stats(gpu, PROMPTS, max_new_tokens=30, temperature=0.0, stop=[piece])
    assert [(s.text, s.finish_reason) for s in got] == [(s.text, s.finish_reason) for s in ref]
    assert got[1].finish_reason == "stop"
    pen = _stats(gpu, "The cat", max_new_tokens=16, temperature=0.0, repetition_penalty=1.5)[0]
    assert pen.token_ids == _stats(cpu, "The cat", max_new_tokens=16, temperature=0.0,
                                   repetition_penalty=1.5)[0].token_ids
    a = _stats(gpu, "The cat", max_new_tokens=20, temperature=0.9, top_k=30, top_p=0.95, min_p=0.02, seed=3, samples=4)
    b = _stats(gpu, "The cat", max_new_tokens=20, temperature=0.9, top_k=30, top_p=0.95, min_p=0.02, seed=3, samples=4)
    assert [s.token_ids for s in a] == [s.token_ids for s in b] and len({tuple(s.token_ids) for s in a}) > 1


@pytest.mark.parametrize("settings", [SamplingSettings(temperature=1.0), SamplingSettings(temperature=1.2, top_k=4),
                                      SamplingSettings(temperature=1.0, top_p=0.7),
                                      SamplingSettings(temperature=0.8, min_p=0.2)], ids=["t", "topk", "topp", "minp"])
def test_sampling_distributions_inside_a_captured_graph(settings):
    from desktop_app.engine.generate.sampling import process_logits

    logits = torch.tensor([2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, -3.0], device="cuda")
    rows, replays = 4096, 10
    sampling = DeviceSampling(rows, 8, torch.device("cuda"))
    sampling.start(settings, 0, [[]] * rows)
    static_logits = logits.expand(rows, -1).clone()
    picked = torch.zeros(rows, dtype=torch.long, device="cuda")
    graphs = GraphSet(torch.device("cuda"))
    counts = torch.zeros(8, device="cuda")

    def pick() -> None:
        picked.copy_(sampling.pick(static_logits))

    with torch.inference_mode():
        for _ in range(replays):
            sampling.draw(rows)  # fresh noise outside the graph, as the decode loop does
            graphs.run("pick", pick)
            counts += torch.bincount(picked, minlength=8)
    assert graphs.captures == 1 and graphs.replays == replays
    s = sampling.settings
    expected = process_logits(logits[None], s, None).softmax(-1)[0]
    got = counts / counts.sum()
    assert (got - expected).abs().max().item() < 0.012, (got, expected)
    assert got[expected == 0].sum().item() == 0


def test_the_cache_and_graphs_are_reused_across_requests(pair):
    _, gpu = pair
    static_cache.release_decoder(gpu.model)
    first = _stats(gpu, ["The cat"] * 3, max_new_tokens=40, temperature=0.0)
    decoder = static_cache.kept_decoder(gpu.model)
    captures = decoder.graphs.captures
    assert decoder.rows == 4 and captures > 0
    again = _stats(gpu, ["The cat"] * 3, max_new_tokens=40, temperature=0.0)
    assert [s.token_ids for s in again] == [s.token_ids for s in first]
    assert static_cache.kept_decoder(gpu.model) is decoder and decoder.graphs.captures == captures
    one = _stats(gpu, "The cat", max_new_tokens=40, temperature=0.0)[0]  # a smaller batch: same cache, new bucket
    assert one.token_ids == first[0].token_ids
    assert static_cache.kept_decoder(gpu.model) is decoder and decoder.graphs.captures > captures


def test_a_cache_that_cannot_fit_is_refused_in_one_line_and_nothing_is_lost(pair):
    _, gpu = pair
    fit = rows_that_fit(gpu.model, 128)
    assert fit is not None and fit > 1000
    with pytest.raises(UserError, match=r"^the decode cache for \d+ rows x 128 tokens needs .* GiB"):
        StaticDecoder(gpu.model, fit * 4, 128)
    with pytest.raises(UserError, match="decode cache"):
        static_completions(gpu.model, PromptRows([[5, 6]], fit * 4), DecodeLimits(100), SamplingSettings())
    assert _stats(gpu, "The cat", max_new_tokens=8, temperature=0.0)[0].finish_reason == "length"


def test_rollouts_on_the_gpu_match_the_cpu_and_follow_weight_updates(pair):
    cpu, gpu = pair
    prompts = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14, 15, 16, 17, 18]] * 24  # 72 prompts x 2 = 144 rows
    plain = sample_completions(cpu.model, prompts[:3], samples=2, max_new_tokens=16, temperature=0.0)
    kw = dict(samples=2, max_new_tokens=16, temperature=0.0, stop_ids={plain[2][5]},
              newline_ids={plain[0][3], plain[4][2]}, max_lines=2, max_len=40)
    assert sample_completions(gpu.model, prompts, **kw) == sample_completions(cpu.model, prompts, **kw)
    with torch.no_grad():
        for p_cpu, p_gpu in zip(cpu.model.parameters(), gpu.model.parameters(), strict=True):
            noise = torch.randn_like(p_cpu) * 0.05
            p_cpu.data.add_(noise)  # .data: no version bump, as with fused optimizers
            p_gpu.data.add_(noise.cuda())
    forget_prepared_weights(gpu.model)
    forget_prepared_weights(cpu.model)
    assert sample_completions(gpu.model, prompts[:3], **kw) == sample_completions(cpu.model, prompts[:3], **kw)


def test_the_servers_continuous_batching_runs_on_the_graph_buckets(pair):
    """Rows joining and leaving a running batch (the server's layout, slot_cache.GraphSlotCache) decode what each
    prompt decodes alone on the CPU. (slot_cache needs no FastAPI; the Batcher's choice is checked below.)"""
    from desktop_app.engine.generate.slot_cache import GraphSlotCache

    cpu, gpu = pair
    prompts = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14, 15, 16, 17, 18], [19]]
    refs = sample_completions(cpu.model, prompts, max_new_tokens=30, temperature=0.0)
    cache = GraphSlotCache(gpu.model, 6, pad_id=0)
    got: list[list[int]] = [[] for _ in prompts]
    live: list[int] = []  # prompt index of each live row, in row order

    def take(logits):
        for row, token in zip(live, logits.argmax(-1).tolist(), strict=True):
            got[row].append(token)

    live += [0, 1]
    take(cache.admit([prompts[0], prompts[1]], [0, 1], 30))
    for step in range(29):
        if step == 4:  # a longer prompt joins the running batch: the live rows shift right
            logits = cache.admit([prompts[2]], [0], 30)
            live.append(2)
            got[2].append(int(logits.argmax(-1)[0]))
        if step == 9:  # the first row leaves; the last row moves into its place
            for src, dst in cache.remove([0]):
                live[dst] = live[src]
            del live[cache.n:]
        if step == 12:
            logits = cache.admit([prompts[3]], [0], 30)
            live.append(3)
            got[3].append(int(logits.argmax(-1)[0]))
        ids = [got[row][-1] for row in live]
        take(cache.step(ids))
    for row, ref in enumerate(refs):
        assert got[row] == ref[:len(got[row])] and len(got[row]) >= 10, row
    assert cache.runner.graphs.captures > 0 and cache.runner.graphs.replays > 0


def test_the_batcher_picks_the_graph_buckets_on_cuda(pair):
    pytest.importorskip("fastapi")  # the server's package needs it (carry it to run this check)
    from desktop_app.engine.generate.slot_cache import GraphSlotCache
    from desktop_app.server.batcher import Batcher

    _, gpu = pair
    batcher = Batcher(gpu, max_rows=8)
    try:
        assert isinstance(batcher.cache, GraphSlotCache) and batcher.capacity == 8
    finally:
        batcher.close()


def test_bf16_decoding_runs_and_the_first_token_comes_alone(tokenizer):
    _, gpu = _pair("llama", tokenizer)
    gpu.model.to(torch.bfloat16)
    stats = _stats(gpu, PROMPTS, max_new_tokens=64, temperature=0.7, seed=1, samples=2)
    assert len(stats) == 8 and all(s.finish_reason in ("length", "eos") and s.token_ids for s in stats)
    assert all(s.ttft_ms > 0 and s.tokens_per_s > 0 for s in stats)
    decoder = static_cache.kept_decoder(gpu.model)
    assert decoder is not None and decoder.dtype == torch.bfloat16 and decoder.graphs.captures > 0


# --- a vocabulary padded beyond the tokenizer, through captured graphs (the self-play / GRPO case) ---------------

PADDED_CALLS = [SamplingSettings(tokens=400), SamplingSettings(temperature=1.0, top_k=5, tokens=400),
                SamplingSettings(temperature=1.0), SamplingSettings(temperature=0.8, top_p=0.8, tokens=300),
                SamplingSettings(repetition_penalty=1.3, tokens=350),
                SamplingSettings(temperature=1.1, min_p=0.1, repetition_penalty=1.2, tokens=400),
                SamplingSettings(temperature=0.9, top_k=20, top_p=0.9, min_p=0.05, tokens=200)]


def _padded_pair(family: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    """A model padded to 448 ids beyond a 400-token tokenizer (the padded ids made to lead often), CPU and GPU."""
    spec = ModelSpec(family, 448, 64, 2, 4, 2 if family == "llama" else 4, 128, 64, init_std=0.2,
                     tie_embeddings=False)
    models = []
    for device in ("cpu", "cuda"):
        model = build_model(spec, seed=0)
        with torch.no_grad():
            model.lm_head.weight[400:] *= 3.0
        models.append(model.to(device))
    return models[0], models[1]


@pytest.mark.parametrize("family", ["llama", "gpt2"])
def test_repeated_graph_calls_with_a_padded_vocabulary_equal_eager_steps(family):
    """Calls with other settings on the kept decoder replay graphs captured by earlier calls: they read the
    padding mask, noise and seen buffers refilled in place (a re-created padding tensor left them reading freed
    memory), give the eager steps' tokens, and never a padded id."""
    cpu, gpu = _padded_pair(family)
    prompts = [[5, 6, 7, 8, 9], [10, 11], [12, 13, 14]]
    rows, limits = PromptRows(prompts, 2), DecodeLimits(24)
    junk = []  # allocations that would take over a freed padding tensor's memory
    graphs: list[list[list[int]]] = []
    for _ in range(2):  # the second round replays the first round's graphs
        for i, settings in enumerate(PADDED_CALLS):
            graphs.append(static_completions(gpu, rows, limits, settings, i, StaticOptions(graphs=True)))
            junk.append(torch.ones(448, dtype=torch.bool, device="cuda"))
    eager = [static_completions(gpu, rows, limits, s, i, StaticOptions(graphs=False))
             for i, s in enumerate(PADDED_CALLS)]
    assert graphs == eager + eager
    for settings, out in zip(PADDED_CALLS, eager, strict=True):
        assert all(t < (settings.tokens or 448) for row in out for t in row), settings
    assert any(t >= 400 for row in eager[2] for t in row)  # unmasked, the padded ids really lead
    lean = sample_completions(cpu, prompts, samples=2, max_new_tokens=24, temperature=0.0, tokens=400, backend="lean")
    assert eager[0] == lean  # greedy over the tokenizer's ids: the CPU decoder's tokens
    decoder = static_cache.kept_decoder(gpu)
    assert decoder is not None and decoder.graphs.enabled and decoder.graphs.replays > 0
    assert decoder.sampling().padding is not None
    kept = static_cache.reusable_decoder(gpu)
    assert kept is decoder and rows_that_fit(gpu, 64, kept=kept) >= max(decoder.rows, rows_that_fit(gpu, 64))


def test_a_captured_pick_reads_the_padding_buffer_refilled_in_place():
    """One captured pick replayed after calls that refill the padding mask (other tokenizer sizes under the same
    graph) and after allocations that would reuse a freed mask: it masks what the latest call asked."""
    logits = torch.tensor([0.5, 1.0, 2.0, -1.0, 0.0, 0.3, 5.0, 4.0, 3.0, 2.5], device="cuda")
    rows = 512
    sampling = DeviceSampling(rows, 10, torch.device("cuda"))
    static_logits = logits.expand(rows, -1).clone()
    picked = torch.zeros(rows, dtype=torch.long, device="cuda")
    graphs = GraphSet(torch.device("cuda"))
    junk = []

    def pick() -> None:
        picked.copy_(sampling.pick(static_logits))

    with torch.inference_mode():
        for seed, tokens in enumerate((6, 6, 4, 8, 6, 2)):
            settings = SamplingSettings(temperature=1.0, top_k=2, tokens=tokens)
            sampling.start(settings, seed, [[]] * rows)
            junk.append(torch.ones(10, dtype=torch.bool, device="cuda"))
            sampling.draw(rows)
            graphs.run("pick", pick)  # one graph: top_k and temperature fixed, the mask refilled
            fresh = DeviceSampling(rows, 10, torch.device("cuda"))
            fresh.start(settings, seed, [[]] * rows)
            fresh.draw(rows)
            assert torch.equal(picked, fresh.pick(static_logits)), tokens
            assert int(picked.max()) < tokens and int(picked.min()) >= 0
    assert graphs.captures == 1 and graphs.replays == 6
