"""The batcher: concurrent requests joining a running batch decode exactly what `generate` gives alone;
a cancelled or disconnected request leaves the batch at once."""

from __future__ import annotations

import json
import random
import threading
import time

import httpx
import pytest
from server_helpers import engine_text, make_model_dir

from desktop_app.engine.generate.row_sampler import SamplingParams
from desktop_app.server.batcher import Batcher, Done, Failed, GenerationRequest, Piece


def _run_staggered(loaded, batcher: Batcher, count: int, seed: int = 0) -> tuple[list, list]:
    """Submit `count` greedy requests of varied prompts and lengths a few ms apart; (requests, results)."""
    from desktop_app.engine.generate.prompts import encode_prompt

    rng = random.Random(seed)
    words = ["hello", "world", "the", "cat", "sat", "on", "the", "mat", "and", "dog", "ran"]
    jobs = [(" ".join(rng.choice(words) for _ in range(rng.randint(1, 40))), rng.randint(1, 60)) for _ in range(count)]
    results: list = [None] * count
    done = threading.Event()

    def sink_for(i: int):
        pieces: list[str] = []

        def sink(events):
            for e in events:
                if isinstance(e, Piece):
                    pieces.append(e.text)
                elif isinstance(e, Done):
                    results[i] = (e.text, "".join(pieces), e.completion_tokens)
                    if all(r is not None for r in results):
                        done.set()
                else:
                    results[i] = e
        return sink

    for i, (prompt, max_tokens) in enumerate(jobs):
        ids = encode_prompt(loaded.tokenizer, prompt)[-63:]  # the engine keeps the end of an over-long prompt
        batcher.submit(GenerationRequest([ids], SamplingParams(max_tokens=max_tokens, temperature=0), chat=False,
                                         sink=sink_for(i)))
        time.sleep(rng.random() * 0.004)
    assert done.wait(60), results
    return jobs, results


@pytest.mark.parametrize("family,continuous,static", [("llama", True, False), ("gpt2", True, False),
                                                      ("llama", False, False), ("llama", True, True),
                                                      ("gpt2", True, True)])
@pytest.mark.filterwarnings("ignore:`past_key_values` is deprecated:FutureWarning")  # the engine's _HFRunner
def test_rows_joining_a_running_batch_match_generate(family, continuous, static, loaded, tmp_path, monkeypatch):
    # static: the CUDA path's GraphSlotCache (the engine's static decoder and its buckets), run eagerly here
    from desktop_app.engine.model.loading import load_model
    from desktop_app.server import batcher as batcher_module

    model = loaded if family == "llama" else load_model(make_model_dir(tmp_path / family, family=family))
    if not continuous:  # the fallback for models the lean runners do not cover: transformers' own forward
        from desktop_app.engine.generate import slot_cache

        real = slot_cache.make_runner
        monkeypatch.setattr(batcher_module.SlotCache, "supports", staticmethod(lambda m: False))
        monkeypatch.setattr(slot_cache, "make_runner", lambda m, b, n, backend="auto": real(m, b, n, "hf"))
    batcher = Batcher(model, max_rows=6, static=static)  # fewer rows than requests: some wait for a free row
    assert batcher.continuous is continuous
    assert isinstance(batcher.cache, batcher_module.GraphSlotCache) is static
    batcher.start()
    try:
        jobs, results = _run_staggered(model, batcher, 24)
    finally:
        batcher.close()
    assert batcher.stats["tokens"] > batcher.stats["steps"]  # several rows per step: they were batched
    for (prompt, max_tokens), result in zip(jobs, results, strict=True):
        ref = engine_text(model, prompt, max_new_tokens=max_tokens, temperature=0)
        text, streamed, tokens = result
        assert (text, streamed, tokens) == (ref.text, ref.text, len(ref.token_ids)), prompt


def test_a_cancelled_request_leaves_the_batch(loaded):
    batcher = Batcher(loaded, max_rows=4)
    batcher.start()
    got: list = []
    other: list = []
    try:
        def cancel_on_first(events):
            got.extend(events)
            request.cancelled.set()

        request = GenerationRequest([[5, 6, 7]], SamplingParams(max_tokens=60, temperature=0), chat=False,
                                    sink=cancel_on_first)
        batcher.submit(request)
        finished = threading.Event()
        batcher.submit(GenerationRequest([[5, 6]], SamplingParams(max_tokens=60, temperature=0), chat=False,
                                         sink=lambda ev: (other.extend(ev), any(isinstance(e, Done) for e in ev)
                                                          and finished.set())))
        assert finished.wait(30)
        deadline = time.monotonic() + 5
        while batcher.load()["rows"] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert batcher.load()["rows"] == 0
    finally:
        batcher.close()
    assert not any(isinstance(e, Done) for e in got) and len(got) <= 2  # it stopped after the first step
    assert any(isinstance(e, Done) and e.finish_reason == "length" for e in other)


def test_close_fails_waiting_requests(loaded):
    batcher = Batcher(loaded)
    events: list = []
    batcher.submit(GenerationRequest([[5]], SamplingParams(max_tokens=4), chat=False, sink=events.extend))
    batcher.close()  # never started: the waiting request is told
    assert len(events) == 1 and isinstance(events[0], Failed) and events[0].status == 503


@pytest.fixture
def slow_server(server, loaded, model_dir):
    """The module's server with each decode step slowed to 20 ms, so a request runs long enough to leave early."""
    url, state = server
    cache = state.served.batcher.cache
    step = cache.step

    def slow_step(next_ids):
        time.sleep(0.02)
        return step(next_ids)

    cache.step = slow_step
    reference = engine_text(loaded, "the cat", max_new_tokens=60, temperature=0)
    assert len(reference.token_ids) >= 30  # long enough that a finished request cannot pass for a cancelled one
    try:
        yield url, state, model_dir.name, len(reference.token_ids)
    finally:
        del cache.step


def _tokens_after_disconnect(state, before: int) -> int:
    t0 = time.monotonic()
    while state.served.batcher.load()["rows"]:
        assert time.monotonic() - t0 < 2.0, "the request kept decoding after its client left"
        time.sleep(0.005)
    return state.served.batcher.stats["tokens"] - before


def test_disconnected_stream_is_cancelled(slow_server):
    url, state, name, full = slow_server
    before = state.served.batcher.stats["tokens"]
    body = {"model": name, "prompt": "the cat", "max_tokens": 60, "temperature": 0, "stream": True}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as response:
        first = json.loads(next(line for line in response.iter_lines() if line)[6:])
        assert first["choices"][0]["finish_reason"] is None
    assert _tokens_after_disconnect(state, before) < full // 2


def test_disconnected_plain_request_is_cancelled(slow_server):
    url, state, name, full = slow_server
    before = state.served.batcher.stats["tokens"]
    body = {"model": name, "prompt": "the cat", "max_tokens": 60, "temperature": 0}
    with pytest.raises(httpx.TimeoutException):
        httpx.post(url + "/v1/completions", json=body, timeout=0.2)
    assert _tokens_after_disconnect(state, before) < full // 2
