"""The OpenAI-compatible API through the official `openai` client and raw httpx: same text as `generate`."""

from __future__ import annotations

import json
from types import SimpleNamespace

import httpx
import pytest
from server_helpers import engine_text

from desktop_app.engine.generate import prompts
from desktop_app.server.errors import ApiError
from desktop_app.server.prompts import chat_prompt


def test_models_list(openai_client, model_dir):
    models = openai_client.models.list()
    assert [m.id for m in models.data] == [model_dir.name]
    assert openai_client.models.retrieve(model_dir.name).id == model_dir.name


def test_completion_equals_generate_greedy_and_seeded(openai_client, loaded, model_dir):
    for settings in ({"temperature": 0}, {"temperature": 0.9, "top_p": 0.9, "seed": 7}):
        r = openai_client.completions.create(model=model_dir.name, prompt="the cat", max_tokens=14, **settings)
        ref = engine_text(loaded, "the cat", max_new_tokens=14, **settings)
        assert r.choices[0].text == ref.text
        assert r.choices[0].finish_reason == ("length" if ref.finish_reason == "length" else "stop")
        assert r.usage.completion_tokens == len(ref.token_ids)
        assert r.usage.prompt_tokens == len(loaded.tokenizer("the cat")["input_ids"])
        assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens


def test_completion_equals_generate_cli(openai_client, model_dir, capsys):
    import argparse

    from desktop_app.cli import generate as generate_cli

    parser = argparse.ArgumentParser()
    generate_cli.add_arguments(parser)
    assert generate_cli.run(parser.parse_args([str(model_dir), "--prompt", "hello", "--max-new-tokens", "10",
                                               "--temperature", "0", "--json"])) == 0
    expected = json.loads(capsys.readouterr().out)["text"]
    r = openai_client.completions.create(model=model_dir.name, prompt="hello", max_tokens=10, temperature=0)
    assert r.choices[0].text == expected


def test_chat_and_streaming_chat_equal_generate_chat(openai_client, loaded, model_dir):
    ref = engine_text(loaded, "hi there", max_new_tokens=12, temperature=0, chat=True)
    messages = [{"role": "user", "content": "hi there"}]
    r = openai_client.chat.completions.create(model=model_dir.name, messages=messages, max_tokens=12, temperature=0)
    assert r.object == "chat.completion" and r.choices[0].message.role == "assistant"
    assert r.choices[0].message.content == ref.text
    stream = openai_client.chat.completions.create(model=model_dir.name, messages=messages, max_tokens=12,
                                                   temperature=0, stream=True, stream_options={"include_usage": True})
    pieces, finishes, usage, roles = [], [], None, []
    for chunk in stream:
        assert chunk.object == "chat.completion.chunk" and chunk.id.startswith("chatcmpl-")
        if not chunk.choices:
            usage = chunk.usage
            continue
        delta = chunk.choices[0].delta
        roles += [delta.role] if delta.role else []
        pieces.append(delta.content or "")
        finishes.append(chunk.choices[0].finish_reason)
    assert "".join(pieces) == ref.text
    assert roles == ["assistant"] and finishes[-1] in ("stop", "length") and all(f is None for f in finishes[:-1])
    assert usage is not None and usage.completion_tokens == len(ref.token_ids)


def test_streaming_completion_several_choices_and_stop(openai_client, loaded, model_dir):
    full = engine_text(loaded, "hello", max_new_tokens=16, temperature=0).text
    stop = next(full[i:i + 2] for i in range(2, len(full) - 1) if "\ufffd" not in full[i:i + 2])
    texts: dict[int, str] = {}
    reasons: dict[int, str] = {}
    for chunk in openai_client.completions.create(model=model_dir.name, prompt="hello", max_tokens=16, temperature=0,
                                                  n=3, stop=[stop, "zzzz"], stream=True):
        for c in chunk.choices:
            texts[c.index] = texts.get(c.index, "") + c.text
            if c.finish_reason:
                reasons[c.index] = c.finish_reason
    assert texts == {i: full[: full.index(stop)] for i in range(3)}
    assert reasons == {0: "stop", 1: "stop", 2: "stop"}


def test_several_prompts_and_seeded_choices(openai_client, model_dir):
    r = openai_client.completions.create(model=model_dir.name, prompt=["the cat", "hello"], max_tokens=6, n=2,
                                         temperature=1.0, seed=3)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    again = openai_client.completions.create(model=model_dir.name, prompt=["the cat", "hello"], max_tokens=6, n=2,
                                             temperature=1.0, seed=3)
    assert [c.text for c in r.choices] == [c.text for c in again.choices]  # a seed makes it reproducible


def test_raw_sse_format_with_httpx(server, model_dir):
    url, _ = server
    body = {"model": model_dir.name, "prompt": "hello", "max_tokens": 4, "temperature": 0, "stream": True}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line for line in response.iter_lines() if line]
    assert all(line.startswith("data: ") for line in events)
    assert events[-1] == "data: [DONE]"
    chunks = [json.loads(line[6:]) for line in events[:-1]]
    assert {c["object"] for c in chunks} == {"text_completion"} and len({c["id"] for c in chunks}) == 1
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"


def test_prompt_as_token_ids(openai_client, loaded, model_dir):
    ids = loaded.tokenizer("the cat")["input_ids"]
    by_ids = openai_client.completions.create(model=model_dir.name, prompt=ids, max_tokens=5, temperature=0)
    by_text = openai_client.completions.create(model=model_dir.name, prompt="the cat", max_tokens=5, temperature=0)
    assert by_ids.choices[0].text == by_text.choices[0].text


def test_penalties_and_extensions_are_accepted(openai_client, model_dir):
    r = openai_client.chat.completions.create(
        model=model_dir.name, messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}],
        max_tokens=8, temperature=0.7, seed=1, presence_penalty=0.5, frequency_penalty=0.5,
        extra_body={"top_k": 20, "min_p": 0.05, "repetition_penalty": 1.1})
    assert r.usage.completion_tokens >= 1


def test_multi_turn_chat_equals_the_engines_conversation(openai_client, loaded, model_dir):
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "hello"}, {"role": "user", "content": "the cat?"}]
    ref = engine_text(loaded, [messages], max_new_tokens=8, temperature=0, chat=True)  # one conversation
    r = openai_client.chat.completions.create(model=model_dir.name, messages=messages, max_tokens=8, temperature=0)
    assert r.choices[0].message.content == ref.text


def test_chat_prompt_renders_through_the_engine(loaded, monkeypatch):
    seen = []
    real = prompts.encode_messages
    monkeypatch.setattr("desktop_app.server.prompts.encode_messages",
                        lambda tok, msgs: seen.append(msgs) or real(tok, msgs))
    messages = [SimpleNamespace(role="developer", content="be brief"),
                SimpleNamespace(role="user", content=[{"type": "text", "text": "hi"}])]
    ids = chat_prompt(loaded.tokenizer, messages, None, 0)
    assert seen == [[{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]]
    assert ids == real(loaded.tokenizer, seen[0])
    tokenizer = loaded.tokenizer
    monkeypatch.setattr(tokenizer, "chat_template", None)
    with pytest.raises(ApiError) as err:
        chat_prompt(tokenizer, messages, None, 0)
    assert err.value.code == "no_chat_template" and "/v1/completions" in str(err.value.message)
