"""Models and data for the memory estimate's tests (engine and window): base folders the estimate reads (a
config.json, a tokenizer.json; no weights) and chat files of a known length."""

from __future__ import annotations

import json
from pathlib import Path

from desktop_app.engine.train.memory_plan import Machine

GIB = 1 << 30
# The machine: 21.9 GiB free of 24 (no GPU)
LAPTOP = Machine(ram_free=int(21.9 * GIB), ram_total=24 * GIB)
SMOLLM2_135M = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 576,
                "intermediate_size": 1536, "num_hidden_layers": 30, "num_attention_heads": 9,
                "num_key_value_heads": 3, "vocab_size": 49152, "max_position_embeddings": 8192,
                "tie_word_embeddings": True, "rms_norm_eps": 1e-5, "rope_theta": 100000}
LLAMA_8B = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
            "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
            "vocab_size": 128256, "max_position_embeddings": 8192}


def model_folder(folder: Path, config: dict) -> Path:
    """A base model folder as the estimate reads it: its config.json (the weights are never read)."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder


def chats(path: Path, answer_words: int, count: int = 20) -> Path:
    words = " ".join(["river"] * answer_words)
    path.write_text("".join(json.dumps({"messages": [{"role": "user", "content": "say it"},
                                                     {"role": "assistant", "content": words}]}) + "\n"
                            for _ in range(count)), encoding="utf-8")
    return path


def word_tokenizer(folder: Path) -> None:
    """A tokenizer.json that makes one token of each word."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "say": 1, "it": 2, "river": 3}, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.save(str(folder / "tokenizer.json"))
