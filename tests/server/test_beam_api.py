"""Beam search over the API: `num_beams` / `length_penalty` / `early_stopping` extensions on /v1/completions and
/v1/chat/completions give the engine's beams; streaming with beams and sampling settings are refused with a
400; beam requests run on their own path and the batch of normal requests keeps decoding beside them."""

from __future__ import annotations

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from server_helpers import engine_text

from desktop_app.engine.generate.row_sampler import SamplingParams
from desktop_app.server.batcher import Batcher, Done, GenerationRequest, Piece


def _engine_beams(loaded, prompt, **settings):
    """GenerationStats of every returned beam of the engine's stream_text, best first."""
    from desktop_app.engine.generate.decode import stream_text
    from desktop_app.engine.specs import GenerateSpec

    events = stream_text(loaded, prompt, GenerateSpec(temperature=0.0, **settings), threads=1)
    return sorted((e for e in events if e.type == "generation"), key=lambda e: e.sample)


def _reason(engine_reason: str) -> str:
    return "length" if engine_reason == "length" else "stop"


def test_completion_beams_equal_the_engines(openai_client, loaded, model_dir):
    r = openai_client.completions.create(model=model_dir.name, prompt="the cat", max_tokens=12, n=2,
                                         extra_body={"num_beams": 3, "length_penalty": 0.5})
    ref = _engine_beams(loaded, "the cat", max_new_tokens=12, num_beams=3, samples=2, length_penalty=0.5)
    assert [c.index for c in r.choices] == [0, 1]
    assert [c.text for c in r.choices] == [s.text for s in ref]
    assert [c.finish_reason for c in r.choices] == [_reason(s.finish_reason) for s in ref]
    assert r.usage.completion_tokens == sum(len(s.token_ids) for s in ref)
    assert r.choices[0].text != r.choices[1].text or ref[0].token_ids != ref[1].token_ids


def test_chat_beams_equal_the_engines_and_one_beam_is_greedy(openai_client, loaded, model_dir):
    messages = [{"role": "user", "content": "hi there"}]
    r = openai_client.chat.completions.create(model=model_dir.name, messages=messages, max_tokens=10,
                                              extra_body={"num_beams": 4, "early_stopping": True})
    ref = _engine_beams(loaded, "hi there", max_new_tokens=10, num_beams=4, early_stopping="true", chat=True)
    assert r.choices[0].message.content == ref[0].text
    one = openai_client.chat.completions.create(model=model_dir.name, messages=messages, max_tokens=10, temperature=0,
                                                extra_body={"num_beams": 1})
    assert one.choices[0].message.content == engine_text(loaded, "hi there", max_new_tokens=10, temperature=0,
                                                         chat=True).text


@pytest.mark.parametrize(("fields", "param", "words"), [
    ({"stream": True}, "stream", "not available with stream"),
    ({"temperature": 0.8}, "temperature", "without randomness"),
    ({"top_p": 0.5}, "top_p", "does not apply to beam search"),
    ({"n": 4}, "n", "cannot exceed num_beams"),
    ({"num_beams": 0}, "num_beams", "between 1 and 64"),
    ({"num_beams": 65}, "num_beams", "between 1 and 64"),
    ({"length_penalty": 1e6}, "length_penalty", "between -10 and 10"),
    ({"early_stopping": "sometimes"}, "early_stopping", "early_stopping must be"),
])
def test_bad_beam_requests_are_400(server, model_dir, fields, param, words):
    url, _ = server
    body = {"model": model_dir.name, "prompt": "the cat", "max_tokens": 4, "num_beams": 3, **fields}
    r = httpx.post(url + "/v1/completions", json=body, timeout=30)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and words in error["message"]
    assert error["type"] == "invalid_request_error"


def test_non_finite_length_penalty_is_400(server, model_dir):
    url, _ = server
    for raw in ("NaN", "Infinity"):
        body = json.dumps({"model": model_dir.name, "messages": [{"role": "user", "content": "hi"}],
                           "num_beams": 2})[:-1] + f', "length_penalty": {raw}}}'  # JSON has no NaN: send it raw
        r = httpx.post(url + "/v1/chat/completions", content=body, headers={"Content-Type": "application/json"},
                       timeout=30)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["param"] == "length_penalty" and "finite" in r.json()["error"]["message"]


def test_normal_requests_keep_decoding_beside_a_beam_search(server, loaded, model_dir, monkeypatch):
    from desktop_app.server import batcher as batcher_module

    url, state = server
    prompts = ["hello", "the dog", "world", "cat sat"]
    rows_seen: list[int] = []
    step = batcher_module.BeamSearch.step

    def slow_step(search):  # 10 ms per beam step: the normal requests arrive while the search runs
        rows_seen.append(state.served.batcher.load()["rows"])
        time.sleep(0.01)
        return step(search)

    monkeypatch.setattr(batcher_module.BeamSearch, "step", slow_step)

    def normal(prompt: str) -> tuple[str, str]:
        with httpx.stream("POST", url + "/v1/completions", json={"model": model_dir.name, "prompt": prompt,
                                                                 "max_tokens": 20, "temperature": 0, "stream": True},
                          timeout=60) as r:
            assert r.status_code == 200
            text = ""
            for line in r.iter_lines():
                if line.startswith("data: {"):
                    text += json.loads(line[6:])["choices"][0]["text"]
        return prompt, text

    def beams() -> str:
        r = httpx.post(url + "/v1/completions", json={"model": model_dir.name, "prompt": "the cat", "max_tokens": 40,
                                                      "num_beams": 8, "n": 2}, timeout=60)
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["text"]

    with ThreadPoolExecutor(6) as pool:
        beam_future = pool.submit(beams)
        time.sleep(0.05)
        results = list(pool.map(normal, prompts))
        best = beam_future.result()
    assert max(rows_seen) >= 2  # batch rows decoded between the beam search's steps
    for prompt, text in results:
        assert text == engine_text(loaded, prompt, max_new_tokens=20, temperature=0).text
    assert best == _engine_beams(loaded, "the cat", max_new_tokens=40, num_beams=8, samples=2)[0].text
    deadline = time.monotonic() + 5
    while (state.served.batcher.load()["rows"] or state.served.batcher._beams) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert state.served.batcher.load()["rows"] == 0 and not state.served.batcher._beams


def test_a_cancelled_beam_search_is_dropped_and_close_fails_waiting_ones(loaded):
    batcher = Batcher(loaded, max_rows=4)
    batcher.start()
    got: list = []
    try:
        request = GenerationRequest([[5, 6, 7]], SamplingParams(max_tokens=60, temperature=0, num_beams=4), chat=False,
                                    sink=got.extend)
        request.cancelled.set()
        batcher.submit(request)
        finished = threading.Event()
        done: list = []
        ok = GenerationRequest([[5, 6]], SamplingParams(max_tokens=6, temperature=0, num_beams=2), chat=False,
                               sink=lambda ev: (done.extend(ev), finished.set()))
        batcher.submit(ok)
        assert finished.wait(30)
        assert [type(e) for e in done] in ([Piece, Done], [Done])
        assert done[-1].completion_tokens >= 1
    finally:
        batcher.close()
    assert got == []  # the cancelled search never ran
    waiting: list = []
    closed = Batcher(loaded)
    closed.submit(GenerationRequest([[5]], SamplingParams(max_tokens=4, temperature=0, num_beams=2), chat=False,
                                    sink=waiting.extend))
    closed.close()  # never started: the waiting beam request is told
    assert len(waiting) == 1 and waiting[0].status == 503
