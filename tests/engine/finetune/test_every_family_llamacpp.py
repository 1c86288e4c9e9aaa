"""llama.cpp as the check of every family's GGUF export (marker `llamacpp`; skipped without llama-cpp-python, the
optional `[llamacpp]` extra built from source). For each family of the app's table, a LoRA run on a tiny model of
transformers' own classes is merged and exported in every GGUF type the app offers; llama.cpp loads each file,
tokenizes a mixed text to the ids transformers gives, its logits at f32 equal transformers' on the merged model and
its greedy tokens are the same; the 16-bit, 8-bit and k-quant files keep the logits' shape (correlation) and, where
our model's winner is clear, its greedy choice."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from family_helpers import ALL_FAMILIES, make_family_base
from ft_helpers import ft_config, write_jsonl

llama_cpp = pytest.importorskip("llama_cpp")
pytestmark = pytest.mark.llamacpp

TYPES = ("f32", "f16", "bf16", "q8_0", "q4_k_m", "q5_k_m", "q6_k")
TEXT = "repeat the cat and the dog, 12 times: café naïve 東京 🙂\n  two spaces"
MIN_CORRELATION = {"f32": 0.99999, "f16": 0.999, "bf16": 0.99, "q8_0": 0.995}  # k-quants: 0.9
CLEAR_WIN = 0.5  # a greedy choice this far ahead of the runner-up must survive any of the written types
TIE = 1e-3  # at f32 only float rounding separates the two: a choice closer than this may go either way


@pytest.fixture(scope="module")
def chats(tmp_path_factory):
    rows = [{"messages": [{"role": "user", "content": f"repeat {a} {b}"}, {"role": "assistant", "content": f"{a} {b}"}]}
            for a, b in (("cat", "dog"), ("sun", "sea"), ("red", "blue"), ("one", "two"))]
    return write_jsonl(tmp_path_factory.mktemp("chats") / "chats.jsonl", rows * 3)


def merged_lora(tmp_path, family, chats):
    from desktop_app.engine.export.hf import export_model
    from desktop_app.engine.train.loop import train

    base = make_family_base(tmp_path / "base", family)
    done = list(train(ft_config(base, [chats], steps=3, batch_size=2, adapter={"kind": "lora", "rank": 2}),
                      tmp_path / "lora"))
    assert done[-1].reason == "completed", done[-1]
    assert list(export_model(tmp_path / "lora", "hf", tmp_path / "merged", merge=True))[-1].reason == "completed"
    return tmp_path / "merged"


def llama_logits(path, ids: list[int]) -> np.ndarray:
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=256, n_threads=1, logits_all=True, verbose=False)
    llm.eval(ids)
    return np.asarray(llm.scores[: len(ids)], dtype=np.float64)


def assert_same_greedy(path, model, prompt: list[int], n: int = 16) -> None:
    """llama.cpp's greedy continuation equals transformers' up to the first step where transformers' own choice is
    a float tie (none in most runs): both decode the same model."""
    llm = llama_cpp.Llama(model_path=str(path), n_ctx=256, n_threads=1, verbose=False)
    theirs = [t for t, _ in zip(llm.generate(prompt, top_k=1, temp=0.0), range(n), strict=False)]
    ours: list[int] = []
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([prompt + ours])).logits[0, -1]
            top = torch.topk(logits, 2).values
            if float(top[0] - top[1]) <= TIE:
                break
            ours.append(int(logits.argmax()))
    assert len(ours) >= 4 and theirs[: len(ours)] == ours


@pytest.mark.slow
@pytest.mark.parametrize("family", ALL_FAMILIES)
def test_llamacpp_reads_every_type_of_every_family_as_transformers_computes_it(family, chats, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from desktop_app.engine.export.hf import export_model

    merged = merged_lora(tmp_path, family, chats)
    model = AutoModelForCausalLM.from_pretrained(merged).eval()
    tok = AutoTokenizer.from_pretrained(merged)
    text_ids = tok(TEXT, add_special_tokens=False)["input_ids"]
    ids = text_ids[:40]
    with torch.no_grad():
        expected = model(torch.tensor([ids])).logits[0].double().numpy()
    top2 = np.sort(expected, axis=-1)[:, -2:]
    clear = (top2[:, 1] - top2[:, 0]) > CLEAR_WIN
    for gguf_type in TYPES:
        out = tmp_path / f"{family}-{gguf_type}.gguf"
        done = list(export_model(merged, "gguf", out, gguf_type=gguf_type))
        assert done[-1].reason == "completed", done[-1]
        if gguf_type == "f32":
            vocab_only = llama_cpp.Llama(model_path=str(out), vocab_only=True, verbose=False)
            assert vocab_only.tokenize(TEXT.encode(), add_bos=False, special=True) == text_ids
        got = llama_logits(out, ids)
        assert np.isfinite(got).all(), gguf_type
        corr = np.corrcoef(got.ravel(), expected.ravel())[0, 1]
        assert corr > MIN_CORRELATION.get(gguf_type, 0.9), (gguf_type, corr)
        if gguf_type == "f32":
            np.testing.assert_allclose(got, expected, atol=2e-3 * max(1.0, np.abs(expected).max()))
            decided = (top2[:, 1] - top2[:, 0]) > TIE
            assert decided.mean() > 0.8 and (got.argmax(-1)[decided] == expected.argmax(-1)[decided]).all()
            assert_same_greedy(out, model, ids[:12])
        elif gguf_type in MIN_CORRELATION:
            assert (got.argmax(-1)[clear] == expected.argmax(-1)[clear]).all(), gguf_type
