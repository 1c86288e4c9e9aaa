"""llama.cpp's own vocabularies (models/ggml-vocab-*.gguf with the ids its tokenizer tests expect, .inp/.out) through
our GGUF export: as the tokenizer.json a model folder of each would ship, our file tokenizes in llama.cpp exactly as
llama.cpp's own file does and to the expected ids. The files are not in this repository (scripts/llama_vocabs.sh);
without them, or without llama-cpp-python (the [llamacpp] extra), these tests skip with the reason."""

from __future__ import annotations

import json

import pytest
from gguf_tokenizer_cases import llama_vocab, write_vocab_gguf
from llama_vocab_files import FETCH, SAME_AS, byte_level_json, cases, metadata, special_ids, vocab_folder

from desktop_app.engine.export.gguf_tokenizer import tokenizer_kind

llama_cpp = pytest.importorskip("llama_cpp")
pytestmark = pytest.mark.llamacpp

BYTE_LEVEL_FILES = ("gpt-2", "llama-bpe", "qwen2", "qwen35", "deepseek-llm", "deepseek-coder", "falcon", "starcoder",
                    "refact", "command-r", "mpt")


@pytest.fixture(scope="module")
def folder():
    found = vocab_folder()
    if found is None:  # llama.cpp's own test files are not ours to ship and tests never download: an optional lane
        pytest.skip(f"llama.cpp's vocabulary files are not here: {FETCH}")
    return found


def tokenize(llm, text: str) -> list[int]:
    return llm.tokenize(text.encode(), add_bos=False, special=False)


@pytest.mark.parametrize("name", BYTE_LEVEL_FILES)
def test_a_byte_level_vocabulary_through_our_export_tokenizes_as_llama_cpp_expects(name, folder, tmp_path):
    """Each file's tokens and merges as a tokenizer.json split with its pre-tokenizer's regexes (what its model
    folder ships): named as llama.cpp names it (or a name it treats the same), and tokenized to the .out ids."""
    path = folder / f"ggml-vocab-{name}.gguf"
    data = byte_level_json(path)
    assert tokenizer_kind(data) == ("gpt2", SAME_AS.get(name, name))
    size = len(metadata(path)["tokenizer.ggml.tokens"])
    ours = llama_vocab(write_vocab_gguf(data, special_ids(path), size, tmp_path / "ours.gguf"))
    theirs = llama_vocab(path)
    for text, expected in cases(folder, name):
        assert tokenize(ours, text) == tokenize(theirs, text) == expected, text


def from_transformers(folder, name):
    from transformers import AutoTokenizer

    real = AutoTokenizer.from_pretrained(folder, gguf_file=f"ggml-vocab-{name}.gguf")
    ids = {role: getattr(real, f"{role}_token_id") for role in ("bos", "eos", "pad", "unk")}
    return real, json.loads(real.backend_tokenizer.to_str()), ids


@pytest.mark.parametrize("name", ["llama-bpe", "qwen2"])
def test_transformers_tokenizer_json_of_llama_3_and_qwen2_through_our_export_tokenizes_as_transformers(
        name, folder, tmp_path):
    """The tokenizer.json transformers makes of llama.cpp's Llama 3 / Qwen2 file (the regexes as their tokenizer.json
    spells them). It drops Llama 3's ignore_merges (real Llama 3 has it), so it merges where llama.cpp's llama-bpe
    looks whole words up first (one .inp text differs): our export names it dbrx, which merges as it does, and so
    agrees with transformers on every text; with ignore_merges set back it is llama-bpe and agrees with the .out."""
    real, data, ids = from_transformers(folder, name)
    ours = llama_vocab(write_vocab_gguf(data, ids, len(real), tmp_path / "ours.gguf"))
    assert tokenizer_kind(data) == ("gpt2", "dbrx" if name == "llama-bpe" else name)
    for text, _ in cases(folder, name):
        assert tokenize(ours, text) == real(text, add_special_tokens=False)["input_ids"], text
    if name == "llama-bpe":
        data["model"]["ignore_merges"] = True
        assert tokenizer_kind(data) == ("gpt2", "llama-bpe")
        again = llama_vocab(write_vocab_gguf(data, ids, len(real), tmp_path / "again.gguf"))
        for text, expected in cases(folder, name):
            assert tokenize(again, text) == expected, text


@pytest.mark.parametrize("name", ["phi-3", "llama-spm"])
def test_sentencepiece_vocabularies_through_our_export_tokenize_as_llama_cpp_and_transformers(name, folder, tmp_path):
    """Phi-3 (a Prepend normalizer) and Llama 2 (a Metaspace pre-tokenizer, as transformers writes it): our scores
    from the merge order make llama.cpp tokenize every text as with its own file (the real SentencePiece scores), and
    as transformers does; for a text starting with a space llama.cpp (and SentencePiece: the .out) puts a second
    word-start mark, which a Metaspace pre-tokenizer does not: there it equals transformers' ids of " " + text."""
    real, data, ids = from_transformers(folder, name)
    assert tokenizer_kind(data) == ("llama", "default")
    ours = llama_vocab(write_vocab_gguf(data, ids, len(real), tmp_path / "ours.gguf", "phi3" if name == "phi-3"
                                        else "llama"))
    theirs = llama_vocab(folder / f"ggml-vocab-{name}.gguf")
    metaspace = (data.get("pre_tokenizer") or {}).get("type") == "Metaspace"
    for text, expected in cases(folder, name):
        assert tokenize(ours, text) == tokenize(theirs, text) == expected, text
        as_read = " " + text if metaspace and text.startswith(" ") else text
        assert tokenize(ours, text) == real(as_read, add_special_tokens=False)["input_ids"], text
