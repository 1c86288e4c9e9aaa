"""llama.cpp as the check of our GGUF files (marker `llamacpp`; skipped without llama-cpp-python, the optional
`[llamacpp]` extra built from source): for each family we export, llama.cpp loads the file, its greedy tokens
equal our decoder's at f32 and for 32 tokens and more at f16 (where f16 rounding may only flip a near-tie of our
own model, checked), q8_0 and Q4_K_M keep the perplexity of a held-out text within 2% and 8% of f16, and its
tokenizer encodes a held-out text (Unicode, emoji) to the ids of the tokenizer the app trained."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from gguf_helpers import HELD_OUT, byte_bpe, corpus, trained_folder

llama_cpp = pytest.importorskip("llama_cpp")
pytestmark = pytest.mark.llamacpp

FAMILIES = ("llama", "gpt2", "mistral", "qwen2")
TYPES = ("f32", "f16", "q8_0", "q4_k_m")
NEAR_TIE = 0.02  # logits: f16 weights move them by about this much on these models


@pytest.fixture(scope="module")
def tok():
    return byte_bpe()


@pytest.fixture(scope="module")
def exported(tmp_path_factory, tok):
    from desktop_app.engine.export.hf import export_model

    root = tmp_path_factory.mktemp("llamacpp")
    files = {}
    for family in FAMILIES:
        src = trained_folder(root, family, tok, steps=30 if family in ("llama", "gpt2") else 20)
        for gguf_type in TYPES:
            out = root / f"{family}-{gguf_type}.gguf"
            events = list(export_model(src, "gguf", out, gguf_type=gguf_type))
            assert events[-1].reason == "completed", events[-1]
            files[family, gguf_type] = out
        files[family, "src"] = src
    return files


def open_llama(path, **kw):
    return llama_cpp.Llama(model_path=str(path), n_ctx=128, n_threads=1, seed=0, verbose=False, **kw)


def llamacpp_perplexity(path, ids: list[int]) -> float:
    llm = open_llama(path, logits_all=True)
    llm.eval(ids)
    logits = np.asarray(llm.scores[: len(ids)], dtype=np.float64)[:-1]
    logits -= logits.max(-1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nll = -logp[np.arange(len(ids) - 1), ids[1:]].mean()
    return math.exp(nll)


def llamacpp_greedy(llm, ids: list[int], n: int) -> list[int]:
    out: list[int] = []
    for token in llm.generate(ids, top_k=1, temp=0.0, reset=True):
        out.append(int(token))
        if len(out) == n:
            break
    return out


@pytest.mark.parametrize("gguf_type", ["f32", "f16"])
@pytest.mark.parametrize("family", FAMILIES)
def test_greedy_tokens_equal_our_decoder(exported, tok, family, gguf_type):
    from desktop_app.engine.generate.decode import stream_text
    from desktop_app.engine.model.loading import load_model
    from desktop_app.engine.specs import GenerateSpec

    loaded = load_model(exported[family, "src"], device="cpu")
    llm = open_llama(exported[family, gguf_type])
    prompts = [" ".join(corpus(3, seed=s)[0].split()[:5]) for s in (5, 6, 7)] + ["Привет мир 🙂"]
    agreed = 0
    continuations = set()
    for prompt in prompts:
        ids = tok.encode(prompt).ids
        stats = next(e for e in stream_text(loaded, prompt, GenerateSpec(max_new_tokens=32, temperature=0.0))
                     if e.type == "generation")
        ours = list(stats.token_ids)
        theirs = llamacpp_greedy(llm, ids, len(ours))
        continuations.add(tuple(ours))
        k = next((i for i, (a, b) in enumerate(zip(ours, theirs, strict=True)) if a != b), None)
        if k is None:
            agreed += len(ours)
            continue
        assert gguf_type == "f16", (family, prompt, ours, theirs)  # f32: every token
        with torch.no_grad():
            top2 = loaded.model(torch.tensor([ids + ours[:k]])).logits[0, -1].topk(2).values
        margin = float(top2[0] - top2[1])
        assert margin < NEAR_TIE, f"{family} {prompt!r}: token {k} differs where our model was sure ({margin:.4f})"
        agreed += k
    assert agreed >= 32 and len(continuations) > 1  # 32+ tokens agreed, not one degenerate answer


@pytest.mark.parametrize("family", FAMILIES)
def test_quantized_perplexity_close_to_f16(exported, tok, family):
    ids = tok.encode(HELD_OUT).ids
    ppl = {t: llamacpp_perplexity(exported[family, t], ids) for t in TYPES}
    assert abs(ppl["f32"] / ppl["f16"] - 1) <= 0.005, ppl
    assert abs(ppl["q8_0"] / ppl["f16"] - 1) <= 0.02, ppl
    assert abs(ppl["q4_k_m"] / ppl["f16"] - 1) <= 0.08, ppl
    assert ppl["f16"] < 0.5 * 300, ppl  # the model learned something: far below a uniform guess


@pytest.mark.parametrize("family", FAMILIES)
def test_llamacpp_tokenizer_encodes_like_ours(exported, tok, family):
    llm = open_llama(exported[family, "f16"], vocab_only=True)
    for text in (HELD_OUT, "naïve café 東京 🙂🙂 mixed   spaces\nnew line", "emoji 🙂 only"):
        ours = tok.encode(text).ids
        theirs = llm.tokenize(text.encode("utf-8"), add_bos=False, special=False)
        assert theirs == ours, text
        assert llm.detokenize(theirs).decode("utf-8") == text
