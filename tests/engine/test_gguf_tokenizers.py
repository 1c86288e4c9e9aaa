"""The tokenizer of a GGUF export, for every kind of tokenizer people's models ship (gguf_tokenizer.py): the right
tokenizer.ggml.model and llama.cpp pre-tokenizer, found by what the tokenizer does to llama.cpp's check text; what
llama.cpp could not tokenize the same is refused in one line; the written vocabulary reads back in transformers to
the same ids. llama.cpp itself tokenizes them as transformers does in the llama.cpp lane below (and on llama.cpp's
own vocabularies of Llama 3, Qwen2, Phi-3 and Llama 2 where they are at hand)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from gguf_tokenizer_cases import KINDS, MIXED, TEXTS, hf

from desktop_app.engine.errors import UserError
from desktop_app.engine.export.gguf_tokenizer import GGUFTokenizer, add_tokenizer, tokenizer_kind

EXPECTED = {"gpt-2": ("gpt2", "gpt-2"), "llama-bpe": ("gpt2", "llama-bpe"), "qwen2": ("gpt2", "qwen2"),
            "smollm": ("gpt2", "smollm"), "llama-2 (SentencePiece)": ("llama", "default"),
            "gemma (SentencePiece)": ("llama", "default")}


@pytest.fixture(scope="module")
def tokenizers_of_every_kind():
    return {name: make() for name, make in KINDS.items()}


def write_vocab_gguf(tok, path: Path) -> Path:
    """A vocabulary-only GGUF (what llama.cpp's vocab files are) written by the export's own add_tokenizer."""
    import gguf

    fast = hf(tok)
    writer = gguf.GGUFWriter(str(path), "llama")
    special = {role: getattr(fast, f"{role}_token_id") for role in ("bos", "eos", "pad", "unk")}
    add_tokenizer(writer, GGUFTokenizer(json.loads(tok.to_str()), special), tok.get_vocab_size())
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    return path


@pytest.mark.parametrize("name", list(KINDS))
def test_each_kind_is_named_as_llama_cpp_names_it(name, tokenizers_of_every_kind):
    assert tokenizer_kind(json.loads(tokenizers_of_every_kind[name].to_str())) == EXPECTED[name]


@pytest.mark.parametrize("name", ["gpt-2", "llama-bpe", "qwen2", "llama-2 (SentencePiece)"])
def test_the_written_vocabulary_reads_back_in_transformers_to_the_same_ids(name, tokenizers_of_every_kind, tmp_path):
    from transformers import AutoTokenizer

    tok = tokenizers_of_every_kind[name]
    path = write_vocab_gguf(tok, tmp_path / "vocab.gguf")
    again = AutoTokenizer.from_pretrained(tmp_path, gguf_file=path.name)
    for text in [MIXED, *TEXTS]:
        assert again(text, add_special_tokens=False)["input_ids"] == tok.encode(text, add_special_tokens=False).ids


def test_what_llama_cpp_would_tokenize_differently_is_refused_in_one_line(tokenizers_of_every_kind):
    from tokenizers import Regex, pre_tokenizers

    data = json.loads(tokenizers_of_every_kind["qwen2"].to_str())
    odd = dict(data)  # a split no llama.cpp pre-tokenizer makes: runs of letters only
    odd["pre_tokenizer"] = json.loads(pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\p{L}+"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]).__getstate__())
    lowered = {**data, "normalizer": {"type": "Lowercase"}}
    words = {**data, "pre_tokenizer": {"type": "Whitespace"}}
    unigram = {**data, "model": {"type": "Unigram", "vocab": []}}
    for bad, words_in_reason in ((odd, "none of llama.cpp's pre-tokenizers"), (lowered, "normalizes text"),
                                 (words, "neither a ByteLevel"), (unigram, "Unigram")):
        with pytest.raises(UserError) as exc:
            tokenizer_kind(bad)
        assert words_in_reason in str(exc.value) and "\n" not in str(exc.value) and "Hugging Face folder" in \
            str(exc.value)


def test_bos_is_added_by_llama_cpp_exactly_when_the_tokenizer_adds_it(tokenizers_of_every_kind):
    from tokenizers import processors

    from desktop_app.engine.export.gguf_tokenizer import tokenizer_metadata

    tok = tokenizers_of_every_kind["llama-2 (SentencePiece)"]
    ids = {"bos": tok.token_to_id("<s>"), "eos": tok.token_to_id("</s>"), "pad": None, "unk": 0}
    plain = tokenizer_metadata(json.loads(tok.to_str()), tok.get_vocab_size(), ids)
    assert not plain["add_bos"] and not plain["add_eos"] and plain["add_space_prefix"]
    tok.post_processor = processors.TemplateProcessing(single="<s> $A", special_tokens=[("<s>", ids["bos"])])
    with_bos = tokenizer_metadata(json.loads(tok.to_str()), tok.get_vocab_size(), ids)
    assert with_bos["add_bos"] and not with_bos["add_eos"]
    gemma = tokenizers_of_every_kind["gemma (SentencePiece)"]
    assert not tokenizer_metadata(json.loads(gemma.to_str()), gemma.get_vocab_size(), ids)["add_space_prefix"]


# --- llama.cpp as the check -------------------------------------------------------------------------------------

def llama_vocab(path: Path):
    llama_cpp = pytest.importorskip("llama_cpp")
    return llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)


@pytest.mark.llamacpp
@pytest.mark.parametrize("name", list(KINDS))
def test_llama_cpp_tokenizes_each_kind_as_transformers_does(name, tokenizers_of_every_kind, tmp_path):
    tok = tokenizers_of_every_kind[name]
    llm = llama_vocab(write_vocab_gguf(tok, tmp_path / "vocab.gguf"))
    for text in [MIXED, *TEXTS]:
        assert llm.tokenize(text.encode(), add_bos=False, special=True) == \
            tok.encode(text, add_special_tokens=False).ids, text


def real_vocabs() -> Path | None:
    """llama.cpp's own vocabulary files (scripts/llama_vocabs.sh fetches them from its source archive on PyPI)."""
    folder = Path(os.environ.get("AZR_LLAMA_VOCABS", Path.home() / ".cache" / "azr-model-trainer" / "llama-vocabs"))
    return folder if (folder / "ggml-vocab-qwen2.gguf").is_file() else None


# transformers' reading of llama.cpp's own files already differs from llama.cpp itself on some texts (1 of Llama 3's,
# about a third of Llama 2's SentencePiece ones): our export must tokenize in llama.cpp exactly as llama.cpp's own
# file does, and as transformers does wherever llama.cpp's own file agrees with it.
@pytest.mark.llamacpp
@pytest.mark.parametrize("name", ["llama-bpe", "qwen2", "gpt-2", "phi-3", "llama-spm"])
def test_real_vocabularies_through_our_export_tokenize_as_transformers_does_in_llama_cpp(name, tmp_path):
    from transformers import AutoTokenizer

    folder = real_vocabs()
    if folder is None:
        pytest.skip("llama.cpp's vocabulary files are not here: bash scripts/llama_vocabs.sh (or AZR_LLAMA_VOCABS)")
    real = AutoTokenizer.from_pretrained(folder, gguf_file=f"ggml-vocab-{name}.gguf")
    data = json.loads(real.backend_tokenizer.to_str())
    assert tokenizer_kind(data)[0] == ("llama" if name in ("phi-3", "llama-spm") else "gpt2")
    import gguf

    out = tmp_path / "ours.gguf"
    writer = gguf.GGUFWriter(str(out), "llama")
    special = {role: getattr(real, f"{role}_token_id") for role in ("bos", "eos", "pad", "unk")}
    add_tokenizer(writer, GGUFTokenizer(data, special), len(real))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.close()
    ours, theirs = llama_vocab(out), llama_vocab(folder / f"ggml-vocab-{name}.gguf")
    texts = [t for t in (folder / f"ggml-vocab-{name}.gguf.inp").read_text(encoding="utf-8")
             .split("\n__ggml_vocab_test__\n") if t]
    for text in texts:
        got = ours.tokenize(text.encode(), add_bos=False, special=False)
        assert got == theirs.tokenize(text.encode(), add_bos=False, special=False), text
    agreed = [t for t in texts if theirs.tokenize(t.encode(), add_bos=False, special=False)
              == real(t, add_special_tokens=False)["input_ids"]]
    assert len(agreed) >= len(texts) // 2
    for text in agreed:
        assert ours.tokenize(text.encode(), add_bos=False, special=False) == \
            real(text, add_special_tokens=False)["input_ids"], text
