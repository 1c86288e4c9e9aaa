"""Conversations -> token ids (encode_messages, fit_messages): the chat template's own rendering, the system
prompt kept, clear errors, and over-long conversations losing their oldest turns, never the system prompt."""

from __future__ import annotations

from pathlib import Path

import pytest

from desktop_app.engine.data.tokenization import hf_tokenizer, train_tokenizer
from desktop_app.engine.errors import UserError
from desktop_app.engine.generate.decode import stream_text
from desktop_app.engine.generate.prompts import NoChatTemplateError, encode_messages, encode_prompt, fit_messages
from desktop_app.engine.model.architecture import build_model
from desktop_app.engine.model.loading import LoadedModel
from desktop_app.engine.specs import GenerateSpec, ModelSpec

SYSTEM = {"role": "system", "content": "You answer in one short sentence."}
CHAT = [SYSTEM,
        {"role": "user", "content": "Where does the cat sit?"},
        {"role": "assistant", "content": "On the mat."},
        {"role": "user", "content": "And the dog?"}]


@pytest.fixture(scope="module")
def tokenizer():
    return hf_tokenizer(train_tokenizer(["the cat sat on the mat. Where does the dog sit?"] * 30, "byte-bpe", 320))


def _template_ids(tokenizer, messages) -> list[int]:
    """transformers' own rendering + tokenization of the conversation (the reference)."""
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_multi_turn_rendering_equals_the_chat_template(tokenizer):
    ids = encode_messages(tokenizer, CHAT)
    assert ids == _template_ids(tokenizer, CHAT)
    text = tokenizer.decode(ids)
    assert text.startswith("<|system|>" + SYSTEM["content"])  # the system prompt comes first
    assert all(m["content"] in text for m in CHAT)
    assert text.endswith("<|assistant|>")  # the assistant's turn is opened for the reply


def test_encode_prompt_chat_is_the_one_user_turn_conversation(tokenizer):
    one = [{"role": "user", "content": "Hi"}]
    assert encode_prompt(tokenizer, "Hi", chat=True) == encode_messages(tokenizer, one)
    assert encode_prompt(tokenizer, CHAT, chat=True) == encode_messages(tokenizer, CHAT)
    with pytest.raises(UserError, match="needs chat mode"):
        encode_prompt(tokenizer, CHAT)


def test_no_chat_template_is_a_clear_error(tokenizer):
    plain = hf_tokenizer(train_tokenizer(["abc def"] * 20, "byte-bpe", 300))
    plain.chat_template = None
    with pytest.raises(NoChatTemplateError, match="no chat template"):
        encode_messages(plain, CHAT)
    assert issubclass(NoChatTemplateError, UserError)  # shown as one line in the window and the CLI


@pytest.mark.parametrize("messages,match", [
    ([], "empty"),
    ("hello", "must be a list of messages"),
    ([{"role": "tool", "content": "x"}], "role 'tool'"),
    ([{"role": "user"}], "message 1 .user. has no 'content'"),
    ([{"role": "user", "content": "hi"}, "oops"], "message 2 must be an object"),
])
def test_bad_conversations_are_refused(tokenizer, messages, match):
    with pytest.raises(UserError, match=match):
        encode_messages(tokenizer, messages)


def test_a_template_that_refuses_says_so(tokenizer):
    strict = hf_tokenizer(train_tokenizer(["abc def"] * 20, "byte-bpe", 300))
    strict.chat_template = "{{ raise_exception('Conversation roles must alternate') }}"
    with pytest.raises(UserError, match=r"refused this conversation: .*alternate"):
        encode_messages(strict, CHAT)


def _long_chat(turns: int) -> list[dict[str, str]]:
    out = [SYSTEM]
    for i in range(turns):
        out += [{"role": "user", "content": f"question {i}: where does the cat sit today?"},
                {"role": "assistant", "content": f"answer {i}: the cat sat on the mat."}]
    return [*out, {"role": "user", "content": "and the dog?"}]


def test_fit_keeps_a_conversation_that_fits(tokenizer):
    assert fit_messages(tokenizer, CHAT, 512, reply_tokens=32) == (CHAT, 0)
    assert fit_messages(tokenizer, CHAT, None) == (CHAT, 0)  # unknown context: nothing to fit


def test_over_long_conversation_drops_its_oldest_turns(tokenizer):
    messages = _long_chat(6)
    full = len(encode_messages(tokenizer, messages))
    context, reply = full - 10, 40  # a little too long, and the reply needs room as well
    kept, dropped = fit_messages(tokenizer, messages, context, reply_tokens=reply)
    assert dropped > 0 and dropped % 2 == 0  # whole user + assistant turns
    assert kept[0] == SYSTEM and kept[1]["role"] == "user"  # the system prompt stays; a user turn opens
    assert kept[1:] == messages[1 + dropped:]  # the newest turns, in order
    assert len(encode_messages(tokenizer, kept)) <= context - reply
    # One turn fewer would not have fitted: only what had to go went.
    assert len(encode_messages(tokenizer, [SYSTEM, *messages[dropped - 1:]])) > context - reply
    # The reply never gets more than half the context.
    small, _ = fit_messages(tokenizer, messages, context, reply_tokens=10**6)
    assert len(encode_messages(tokenizer, small)) <= context - context // 2


def test_conversation_that_cannot_fit_is_a_clear_error(tokenizer):
    messages = [SYSTEM, {"role": "user", "content": "the cat sat on the mat " * 20}]
    with pytest.raises(UserError, match=r"does not fit the model's context.*system prompt and the last message"):
        fit_messages(tokenizer, messages, 64, reply_tokens=8)


def test_stream_text_generates_from_a_conversation(tokenizer):
    spec = ModelSpec("llama", 320, 32, 1, 2, 2, 64, 128, init_std=0.2, tie_embeddings=False)
    loaded = LoadedModel(build_model(spec, seed=0), tokenizer, spec, "hf", Path("."), "tiny")
    settings = GenerateSpec(max_new_tokens=6, temperature=0.0, chat=True)
    one = [{"role": "user", "content": "Hi"}]
    by_text = [e for e in stream_text(loaded, "Hi", settings) if e.type == "generation"]
    by_messages = [e for e in stream_text(loaded, [one], settings) if e.type == "generation"]
    assert by_text[0].token_ids == by_messages[0].token_ids  # a one-turn conversation is the chat prompt
    stats = [e for e in stream_text(loaded, [CHAT], settings) if e.type == "generation"]
    assert len(stats) == 1 and 1 <= len(stats[0].token_ids) <= 6
