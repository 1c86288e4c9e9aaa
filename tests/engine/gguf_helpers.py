"""Small real models for the GGUF tests: a byte-level BPE tokenizer the app trains, and llama / gpt2 folders
trained a few steps on it (clear greedy winners), saved as our exports are (HF folder + tokenizer.json)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from desktop_app.engine.data.tokenization import save_tokenizer, train_tokenizer
from desktop_app.engine.model.architecture import build_model
from desktop_app.engine.specs import ModelSpec

WORDS = ["the", "cat", "sat", "on", "the", "mat", "and", "the", "dog", "ran", "to", "the", "park", "one", "two",
         "three", "four", "five", "Привет", "мир", "hello", "world", "🙂", "emoji", "text", "café", "naïve", "東京"]
HELD_OUT = ("the dog sat on the park and one cat ran to the mat. Привет мир, hello world 🙂 emoji text "
            "café naïve 東京 two three four five the cat sat on the mat")

SPECS = {
    "llama": ModelSpec("llama", 320, 64, 2, 4, 2, 128, 128, tie_embeddings=False, init_std=0.1),
    "gpt2": ModelSpec("gpt2", 320, 64, 2, 4, 4, 128, 128, init_std=0.1),
}


def corpus(n: int = 300, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(WORDS[j] for j in rng.integers(0, len(WORDS), 14)) for _ in range(n)]


def byte_bpe():
    """A byte-level BPE tokenizer trained by the app (special tokens <pad> <bos> <eos> first)."""
    return train_tokenizer(corpus(), "byte-bpe", 300, 2)


def hf_family_model(family: str, vocab: int):
    """A tiny random mistral or qwen2 (Q/K/V biases, tied embeddings) of transformers' own classes."""
    import transformers as tf

    common = {"vocab_size": vocab, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
              "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 128,
              "tie_word_embeddings": family == "qwen2", "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
              "initializer_range": 0.1}
    config = {"mistral": tf.MistralConfig, "qwen2": tf.Qwen2Config}[family](**common)
    torch.manual_seed(3)
    model = tf.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():  # visible biases, so a lost bias shows in the logits
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.add_(torch.randn_like(p) * 0.1)
    return model


def trained_folder(root: Path, family: str, tok, steps: int = 30) -> Path:
    """An HF model folder of `family` (llama, gpt2, mistral, qwen2) trained `steps` AdamW steps on the corpus,
    with the tokenizer."""
    torch.manual_seed(0)
    model = build_model(SPECS[family], seed=0) if family in SPECS else hf_family_model(family, tok.get_vocab_size())
    ids = [i for text in corpus(96, seed=1) for i in [*tok.encode(text).ids, 2]]
    data = torch.tensor(ids[: (len(ids) // 65) * 65]).view(-1, 65)[:24]
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        loss = model(data[:, :-1], labels=data[:, :-1]).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    folder = root / f"{family}-model"
    model.save_pretrained(folder)
    save_tokenizer(tok, folder)
    return folder


def greedy(model, ids: list[int], n: int) -> list[int]:
    """Greedy continuation by full recomputation (no cache, no generator)."""
    out: list[int] = []
    with torch.no_grad():
        for _ in range(n):
            out.append(int(model(torch.tensor([ids + out])).logits[0, -1].argmax()))
    return out


def perplexity(model, ids: list[int]) -> float:
    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0, :-1].double()
    nll = torch.nn.functional.cross_entropy(logits, torch.tensor(ids[1:]))
    return float(torch.exp(nll))
