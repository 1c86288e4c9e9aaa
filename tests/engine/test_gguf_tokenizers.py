"""The tokenizer of a GGUF export, for every kind of tokenizer people's models ship (gguf_tokenizer.py,
gguf_pretokenizers.py): the right tokenizer.ggml.model and llama.cpp pre-tokenizer, found by how the tokenizer splits
llama.cpp's check text; what llama.cpp could not tokenize the same is refused in one line; the written vocabulary
reads back in transformers to the same ids. In the llama.cpp lane, llama.cpp itself tokenizes each kind as the
tokenizer does (llama.cpp's own vocabularies: test_gguf_tokenizers_llama_vocabs.py)."""

from __future__ import annotations

import json

import pytest
from gguf_tokenizer_cases import (
    BYTE_LEVEL,
    KINDS,
    MIXED,
    TEXTS,
    byte_level,
    hf,
    llama_vocab,
    sentencepiece_style,
    special_ids,
    write_vocab_gguf,
)

from desktop_app.engine.errors import UserError
from desktop_app.engine.export.gguf_pretokenizers import CHECK_TEXTS, LLAMA_PRE_TOKENIZERS, split_then_bytes
from desktop_app.engine.export.gguf_tokenizer import added_around_text, tokenizer_kind, tokenizer_metadata

SAMPLES = [MIXED, *TEXTS, *CHECK_TEXTS, "x\n\n  y  \t\n", "🦙🦙 3333333 ﬁ ①"]
# A text that starts with a space: llama.cpp puts a word-start mark before it all the same, a Metaspace
# pre-tokenizer (Mistral's and Llama's tokenizer.json as transformers writes them now) does not.
LEADING_SPACE = [" leading space", "  two spaces", " "]
# the pre-tokenizers transformers' GGUF reader rebuilds from the name (it reads any other as GPT-2's)
TRANSFORMERS_READS = ("gpt-2", "llama-bpe", "dbrx", "qwen2", "qwen35", "gpt-4o", "tekken")


@pytest.fixture(scope="module")
def every_kind():
    return {name: make() for name, (make, _arch) in KINDS.items()}


def write(tok, path, name):
    return write_vocab_gguf(json.loads(tok.to_str()), special_ids(hf(tok)), tok.get_vocab_size(), path, KINDS[name][1])


def ids(tok, text):
    return tok.encode(text, add_special_tokens=False).ids


@pytest.mark.parametrize("name", list(KINDS))
def test_each_kind_is_named_as_llama_cpp_names_it(name, every_kind):
    expected = ("gpt2", name) if name in BYTE_LEVEL else ("llama", "default")
    assert tokenizer_kind(json.loads(every_kind[name].to_str())) == expected


@pytest.mark.parametrize("name", list(LLAMA_PRE_TOKENIZERS))
def test_every_llama_cpp_pre_tokenizer_is_told_apart_by_how_it_splits(name):
    pre = LLAMA_PRE_TOKENIZERS[name]
    data = {"model": {"type": "BPE", "vocab": {}, "merges": [], "ignore_merges": pre.ignore_merges},
            "pre_tokenizer": split_then_bytes(pre.regexes)}
    assert tokenizer_kind(data) == ("gpt2", name)


# pre-tokenizers as published models' tokenizer.json files write them (the regexes as llama.cpp's comments quote them)
_CASED = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+<c>|[^\r\n\p{L}\p{N}]?"
          r"[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*<c>")
PUBLISHED = {
    "Llama 3": ("llama-bpe", True, r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
    "Qwen2.5 / Qwen3": ("qwen2", False, r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                        r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
    "Qwen3.5": ("qwen35", False, r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}"
                r"| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
    "Mistral NeMo": ("tekken", True, _CASED.replace("<c>", "") + r"|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+"
                     r"|\s+(?!\S)|\s+"),
    "Llama 4": ("gpt-4o", False, _CASED.replace("<c>", r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?") + r"|\p{N}{1,3}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"),
}


@pytest.mark.parametrize("model", list(PUBLISHED))
def test_published_models_pre_tokenizers_are_named_as_llama_cpps_converter_names_them(model):
    from tokenizers import Regex, normalizers, pre_tokenizers

    name, whole_words, regex = PUBLISHED[model]
    pre = pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(regex), behavior="isolated", invert=False),
                                   pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False,
                                                            use_regex=False)])
    data = {"model": {"type": "BPE", "vocab": {}, "merges": [], "ignore_merges": whole_words},
            "normalizer": json.loads(normalizers.NFC().__getstate__()), "pre_tokenizer": json.loads(pre.__getstate__())}
    assert tokenizer_kind(data) == ("gpt2", name)


def test_gpt2_and_smollm2_pre_tokenizers_are_named_as_llama_cpps_converter_names_them():
    from tokenizers import pre_tokenizers

    byte_level_ = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    smollm2 = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level_])
    for pre, name in ((byte_level_, "gpt-2"), (smollm2, "smollm")):
        data = {"model": {"type": "BPE", "vocab": {}, "merges": []}, "pre_tokenizer": json.loads(pre.__getstate__())}
        assert tokenizer_kind(data) == ("gpt2", name)


@pytest.mark.parametrize("name", [*TRANSFORMERS_READS, "llama-2 (SentencePiece)", "mistral (SentencePiece)",
                                  "gemma (SentencePiece)"])
def test_the_written_vocabulary_reads_back_in_transformers_to_the_same_ids(name, every_kind, tmp_path):
    from transformers import AutoTokenizer

    tok = every_kind[name]
    path = write(tok, tmp_path / "vocab.gguf", name)
    again = AutoTokenizer.from_pretrained(tmp_path, gguf_file=path.name)
    for text in [*SAMPLES, *LEADING_SPACE]:
        assert again(text, add_special_tokens=False)["input_ids"] == ids(tok, text), text


def refusal(data) -> str:
    with pytest.raises(UserError) as exc:
        tokenizer_kind(data)
    message = str(exc.value)
    assert "\n" not in message and "Hugging Face folder" in message
    return message


def test_what_llama_cpp_would_split_or_normalize_differently_is_refused_in_one_line(every_kind):
    from tokenizers import Regex, pre_tokenizers

    data = json.loads(every_kind["qwen2"].to_str())
    odd = json.loads(pre_tokenizers.Sequence([  # a split no llama.cpp pre-tokenizer makes: runs of letters only
        pre_tokenizers.Split(Regex(r"\p{L}+"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]).__getstate__())
    assert "none of llama.cpp's pre-tokenizers" in refusal({**data, "pre_tokenizer": odd})
    assert "none of llama.cpp's pre-tokenizers" in refusal(  # GPT-2's split, but a space before the text
        {**data, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": False,
                                   "use_regex": True}})
    assert "cannot read" in refusal({**data, "pre_tokenizer": {"type": "ByteLevel", "use_regex": True}})
    assert "normalizes text first (Lowercase)" in refusal({**data, "normalizer": {"type": "Lowercase"}})
    assert "neither a ByteLevel" in refusal({**data, "pre_tokenizer": {"type": "Whitespace"}})
    assert "Unigram" in refusal({**data, "model": {"type": "Unigram", "vocab": []}})


def test_a_sentencepiece_style_tokenizer_llama_cpp_would_read_differently_is_refused_in_one_line(every_kind):
    from tokenizers import normalizers, pre_tokenizers

    data = json.loads(every_kind["llama-2 (SentencePiece)"].to_str())
    nfkc = json.loads(normalizers.Sequence([normalizers.NFKC(), normalizers.Replace(" ", "\u2581")]).__getstate__())
    assert "normalizes text first (NFKC)" in refusal({**data, "normalizer": nfkc})
    digits = json.loads(pre_tokenizers.Digits(individual_digits=True).__getstate__())
    assert "elsewhere than at spaces" in refusal({**data, "pre_tokenizer": digits})
    # split into words, as older Metaspace pre-tokenizers do, while its merges made tokens across words
    split = json.loads(pre_tokenizers.Metaspace(prepend_scheme="first", split=True).__getstate__())
    assert any("\u2581" in t[1:] for t in data["model"]["vocab"])
    assert "never merges across words" in refusal({**data, "normalizer": None, "pre_tokenizer": split})
    no_bytes = {**data, "model": {**data["model"], "vocab": {t: i for t, i in data["model"]["vocab"].items()
                                                             if t != "<0x41>"}}}
    assert "256 byte tokens" in refusal(no_bytes)


def test_looking_whole_words_up_first_is_refused_only_where_llama_cpp_would_merge_differently():
    alphabet = {c: i for i, c in enumerate("abc")}
    # "abc" is a token that the merges never make from its letters: only looking it up first finds it
    data = {"model": {"type": "BPE", "vocab": {**alphabet, "ab": 3, "abc": 4}, "merges": ["a b"],
                      "ignore_merges": True},
            "pre_tokenizer": split_then_bytes(LLAMA_PRE_TOKENIZERS["qwen2"].regexes)}
    assert "looks whole words up before merging" in refusal(data)
    data["model"]["merges"] = ["a b", "ab c"]  # now the merges make it too: llama.cpp's qwen2 is the same
    assert tokenizer_kind(data) == ("gpt2", "qwen2")


def test_token_types_and_scores_are_as_llama_cpp_reads_them():
    import gguf
    from tokenizers import AddedToken

    tok = sentencepiece_style("llama-2")
    tok.add_tokens([AddedToken("<think>", special=False), AddedToken("\u2581\u2581x", special=False)])
    tok.add_special_tokens(["<|im_start|>"])
    vocab = tok.get_vocab()
    meta = tokenizer_metadata(json.loads(tok.to_str()), tok.get_vocab_size() + 2, {"unk": 0})
    types = dict(zip(meta["tokens"], meta["types"], strict=True))
    scores = dict(zip(meta["tokens"], meta["scores"], strict=True))
    assert types["<unk>"] == gguf.TokenType.UNKNOWN and types["<|im_start|>"] == gguf.TokenType.CONTROL
    assert types["<think>"] == types["  x"] == gguf.TokenType.USER_DEFINED  # matched in raw text: spaces as such
    word = next(t for t in vocab if t.startswith("\u2581") and len(t) > 3)
    assert types["<0x41>"] == gguf.TokenType.BYTE and types[word] == gguf.TokenType.NORMAL
    assert meta["tokens"][-2:] == [f"[PAD{tok.get_vocab_size()}]", f"[PAD{tok.get_vocab_size() + 1}]"]
    assert types[meta["tokens"][-1]] == gguf.TokenType.UNUSED
    merged = ["".join(m) for m in json.loads(tok.to_str())["model"]["merges"][:3]]
    assert scores[merged[0]] > scores[merged[1]] > scores[merged[2]] > scores["<0x41>"]
    assert scores["e"] == 0.0 and vocab["e"] > 0


def test_bos_is_added_by_llama_cpp_exactly_when_the_tokenizer_adds_it(every_kind):
    from tokenizers import processors

    tok = sentencepiece_style("llama-2")
    ids_ = {"bos": tok.token_to_id("<s>"), "eos": tok.token_to_id("</s>"), "pad": None, "unk": 0}
    plain = tokenizer_metadata(json.loads(tok.to_str()), tok.get_vocab_size(), ids_)
    assert not plain["add_bos"] and not plain["add_eos"] and plain["add_space_prefix"]
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", ids_["bos"])])
    with_bos = tokenizer_metadata(json.loads(tok.to_str()), tok.get_vocab_size(), ids_)
    assert with_bos["add_bos"] and not with_bos["add_eos"]
    told = tokenizer_metadata(json.loads(tok.to_str()), tok.get_vocab_size(), ids_, add_bos=False, add_eos=True)
    assert not told["add_bos"] and told["add_eos"]  # what the caller saw the tokenizer do wins
    assert added_around_text(hf(tok)) == {"add_bos": True, "add_eos": False}
    gemma = every_kind["gemma (SentencePiece)"]
    assert not tokenizer_metadata(json.loads(gemma.to_str()), gemma.get_vocab_size(), ids_)["add_space_prefix"]
    assert added_around_text(hf(byte_level("gpt-2"))) == {"add_bos": False, "add_eos": False}


# --- llama.cpp as the check -------------------------------------------------------------------------------------

@pytest.mark.llamacpp
@pytest.mark.parametrize("name", list(KINDS))
def test_llama_cpp_tokenizes_each_kind_as_the_tokenizer_does(name, every_kind, tmp_path):
    tok = every_kind[name]
    llm = llama_vocab(write(tok, tmp_path / "vocab.gguf", name))
    metaspace = name.startswith("mistral")
    for text in [*SAMPLES, *([] if metaspace else LEADING_SPACE)]:
        assert llm.tokenize(text.encode(), add_bos=False, special=True) == ids(tok, text), text
    for text in LEADING_SPACE if metaspace else []:  # the one difference: llama.cpp's mark before the space
        assert llm.tokenize(text.encode(), add_bos=False, special=True) == ids(tok, " " + text), text


# llama.cpp finds an added token in the raw text and its SentencePiece tokenizer puts a word-start mark after every
# one, as transformers does for added tokens it does not normalize under a Prepend normalizer (Llama 2, Phi-3). Not
# so (as with llama.cpp's own converter): one it matches after normalizing (then " <think>", not "<think>"), and text
# right after any added token under a Metaspace pre-tokenizer (no mark there).
@pytest.mark.llamacpp
@pytest.mark.parametrize("name", ["qwen2", "llama-2 (SentencePiece)"])
def test_llama_cpp_adds_and_finds_special_and_added_tokens_as_the_tokenizer_does(name, tmp_path):
    from tokenizers import AddedToken, processors

    tok = KINDS[name][0]()
    tok.add_special_tokens(["<|im_start|>", "<|im_end|>"])
    tok.add_tokens([AddedToken("<think>", special=False, normalized=False)])
    bos = tok.token_to_id("<s>")
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", bos)])
    llm = llama_vocab(write(tok, tmp_path / "vocab.gguf", name))
    for text in ("<|im_start|>user\nHi <think> there<|im_end|>\n", "a<think>b<|im_end|>c", "plain text", MIXED):
        assert llm.tokenize(text.encode(), add_bos=True, special=True) == tok.encode(text).ids, text
