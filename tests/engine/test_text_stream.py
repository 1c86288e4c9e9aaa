"""Streaming detokenization: never half a character, never part of a stop string."""

from __future__ import annotations

import pytest

from desktop_app.engine.data.tokenization import train_tokenizer
from desktop_app.engine.generate.text_stream import IncrementalDetokenizer, StopStringFilter, TextStream

MIXED = "Привет, мир! Hello 🙂🚀 世界とテキスト. Ёжик в тумане — 你好 👋🏽 ok"


@pytest.fixture(scope="module")
def byte_tok():
    # Small vocabulary: most non-ASCII characters stay split across several byte tokens.
    corpus = ["plain english words and STOP markers here. " * 3, "a few words " * 5]
    return train_tokenizer(corpus, "byte-bpe", 300, min_frequency=1)


@pytest.fixture(scope="module")
def metaspace_tok():
    corpus = ["hello world and the quick brown fox jumps over the lazy dog " * 4] * 10
    return train_tokenizer(corpus, "bpe", 120, min_frequency=1)


def _decoder(tok):
    return lambda ids: tok.decode(list(ids), skip_special_tokens=True)


def _stream_pieces(tok, ids, stop=(), context=()):
    stream = TextStream(_decoder(tok), stop, context_ids=context)
    pieces = []
    for i in ids:
        pieces.append(stream.push(i))
        if stream.stopped:
            break
    pieces.append(stream.finish())
    return stream, pieces


def test_multibyte_characters_are_never_split(byte_tok):
    ids = byte_tok.encode(MIXED).ids
    # The test is only meaningful if some token ends mid-character.
    assert any("\ufffd" in byte_tok.decode([i]) for i in ids)
    stream, pieces = _stream_pieces(byte_tok, ids)
    assert "".join(pieces) == MIXED == stream.text
    for piece in pieces:
        assert "\ufffd" not in piece
        piece.encode("utf-8")  # a lone surrogate or broken char would raise


def test_stream_matches_full_decode_with_prompt_context(metaspace_tok):
    # Metaspace decoders drop the leading space of the first token: streaming after a prompt must not.
    prompt = metaspace_tok.encode("hello world and").ids
    gen = metaspace_tok.encode("hello world and the quick brown fox").ids[len(prompt):]
    full = metaspace_tok.decode(prompt + gen)
    expected = full[len(metaspace_tok.decode(prompt)):]
    assert expected.startswith(" ")
    _stream, pieces = _stream_pieces(metaspace_tok, gen, context=prompt)
    assert "".join(pieces) == expected


def test_incomplete_character_at_the_end_is_flushed(byte_tok):
    ids = byte_tok.encode("ok 🙂").ids
    detok = IncrementalDetokenizer(_decoder(byte_tok))
    shown = "".join(detok.push(i) for i in ids[:-1])
    assert "\ufffd" not in shown and shown.startswith("ok")
    assert detok.flush().endswith("\ufffd")  # the honest remainder: an incomplete character


def test_a_real_replacement_character_is_released_after_a_few_tokens(byte_tok):
    # A lone continuation byte never completes: it must not stall the stream forever.
    lone = next(i for i in range(byte_tok.get_vocab_size()) if byte_tok.decode([i]) == "\ufffd")
    detok = IncrementalDetokenizer(_decoder(byte_tok))
    ids = [lone, *byte_tok.encode("a few words a few words").ids]
    shown = "".join(detok.push(i) for i in ids) + detok.flush()
    assert shown.startswith("\ufffd") and shown.endswith("words")


def test_stop_string_spanning_tokens_is_never_shown(byte_tok):
    text = "plain english ENDX words"
    ids = byte_tok.encode(text).ids
    assert not any("ENDX" in byte_tok.decode([i]) for i in ids)  # the stop string spans several tokens
    stream = TextStream(_decoder(byte_tok), ["ENDX"])
    shown = ""
    for i in ids:
        shown += stream.push(i)
        assert "plain english ".startswith(shown)  # never even a prefix of the stop string
        if stream.stopped:
            break
    shown += stream.finish()
    assert stream.stopped and shown == "plain english " == stream.text


def test_stop_filter_unit_cases():
    f = StopStringFilter(["bcd"])
    assert f.push("ab") == "a"  # "b" may start the stop string
    assert f.push("c") == ""
    assert f.push("x") == "bcx"  # it was not the stop string after all
    assert f.push("zbc") == "z"
    assert f.push("dtail") == "" and f.stopped
    assert f.push("more") == "" and f.flush() == ""

    g = StopStringFilter(["aab"])
    assert g.push("a") == "" and g.push("a") == "" and g.push("a") == "a"
    assert g.push("b") == "" and g.stopped

    h = StopStringFilter(["END", "\n\n"])
    assert h.push("one\n") == "one"
    assert h.push("\ntwo END") == "" and h.stopped  # the earliest stop string wins

    k = StopStringFilter(["<|end|>"])
    assert k.push("hi <|e") == "hi "
    assert k.flush() == "<|e"  # generation ended for another reason: the held text is real text


def test_stop_string_with_multibyte_characters(byte_tok):
    text = "Привет 🙂 мир 🚀 конец"
    ids = byte_tok.encode(text).ids
    stream, pieces = _stream_pieces(byte_tok, ids, stop=["мир 🚀"])
    assert stream.stopped and "".join(pieces) == "Привет 🙂 "
    assert all("\ufffd" not in p for p in pieces)
