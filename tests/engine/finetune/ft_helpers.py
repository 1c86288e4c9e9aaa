"""Tiny base models of several families (random weights from config classes, saved to folders) with a
tokenizer trained here, generated chat / preference data, and run configs for fine-tuning tests.
Nothing is downloaded."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from desktop_app.engine.specs import RunConfig, TrainSpec

WORDS = ["red", "blue", "green", "cat", "dog", "bird", "sun", "moon", "tree", "rock", "fish", "star", "rain",
         "snow", "hill", "lake"]
FAMILIES = ("llama", "mistral", "qwen2", "gpt2", "phi3", "gemma")


def corpus(n: int = 200, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b = rng.sample(WORDS, 2)
        out.append(f"repeat {a} {b}: {a} {b}. say {a}! the {b} is good, the {a} is bad. hi there, ok.")
    return out


def make_tokenizer(*, chat_tokens: bool = True, vocab_size: int = 320, seed: int = 0) -> Any:
    """A transformers fast tokenizer (byte-level BPE). chat_tokens=False: an "older" tokenizer that has no chat
    template and no chat role tokens (fine-tuning must add ChatML tokens and grow the embeddings)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    from desktop_app.engine.data.tokenization import hf_tokenizer, train_tokenizer

    if chat_tokens:
        return hf_tokenizer(train_tokenizer(corpus(seed=seed), "byte-bpe", vocab_size, min_frequency=2))
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "</s>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(seed=seed), trainer=trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="</s>")


def hf_config(family: str, vocab: int, *, context: int = 128, width: int = 32, layers: int = 1,
              tie: bool = True, **extra: Any) -> Any:
    import transformers as tf

    heads = 2
    common = {"vocab_size": vocab, "tie_word_embeddings": tie, "pad_token_id": 0, "bos_token_id": 1,
              "eos_token_id": 2}
    if family == "gpt2":
        return tf.GPT2Config(n_embd=width, n_layer=layers, n_head=heads, n_positions=context, n_inner=2 * width,
                             **common, **extra)
    cls = {"llama": tf.LlamaConfig, "mistral": tf.MistralConfig, "qwen2": tf.Qwen2Config, "phi3": tf.Phi3Config,
           "gemma": tf.GemmaConfig}[family]
    kwargs = {"hidden_size": width, "intermediate_size": 2 * width, "num_hidden_layers": layers,
              "num_attention_heads": heads, "num_key_value_heads": 1 if family != "phi3" else heads,
              "max_position_embeddings": context, "head_dim": width // heads}
    if family == "phi3":
        kwargs.pop("head_dim")
    return cls(**kwargs, **common, **extra)


def make_base(folder: Path, family: str = "llama", *, tokenizer: Any = None, seed: int = 0, **config: Any) -> Path:
    """A tiny random causal LM of `family` with its tokenizer, saved as a Hugging Face folder."""
    import torch
    from transformers import AutoModelForCausalLM

    folder = Path(folder)
    tok = tokenizer if tokenizer is not None else make_tokenizer()
    cfg = hf_config(family, len(tok), **config)
    cfg.pad_token_id = tok.pad_token_id
    cfg.eos_token_id = tok.eos_token_id
    cfg.bos_token_id = tok.bos_token_id
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa")
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    return folder


def write_jsonl(path: Path, records: list[Any]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def repeat_chats(n: int, seed: int = 0) -> list[dict[str, Any]]:
    """'repeat A B' -> 'A B': learnable by copying, so held-out records measure generalisation."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b = rng.sample(WORDS, 2)
        out.append({"messages": [{"role": "user", "content": f"repeat {a} {b}"},
                                 {"role": "assistant", "content": f"{a} {b}"}]})
    return out


def preference_pairs(n: int, seed: int = 0, banned: str = "bad") -> list[dict[str, Any]]:
    """Chosen answers never contain `banned`; rejected ones always do."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a = rng.choice(WORDS)
        out.append({"prompt": f"tell me about the {a}", "chosen": f"the {a} is good",
                    "rejected": f"the {a} is {banned}"})
    return out


def ft_config(base: Path, data: list[Path], *, objective: str = "sft", adapter: dict[str, Any] | None = None,
              options: dict[str, Any] | None = None, seed: int = 1, **train: Any) -> RunConfig:
    defaults = {"steps": 8, "batch_size": 4, "lr": 5e-3, "warmup_steps": 0, "eval_every": 0, "save_every": 0,
                "sample_tokens": 0, "threads": 1, "log_every": 1, "precision": "fp32", "weight_decay": 0.0}
    defaults.update(train)
    return RunConfig(base_model=str(base), objective=objective, data=[str(d) for d in data],
                     adapter=adapter or {}, method_options=options or {}, train=TrainSpec(**defaults).to_dict(),
                     seed=seed)


def file_hashes(folder: Path) -> dict[str, str]:
    """sha256 of every file under a folder (to prove a base model is never modified)."""
    import hashlib

    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(Path(folder).rglob("*")) if p.is_file()}


def newest(run_dir: Path) -> Path:
    from desktop_app.engine.run_folder import list_committed

    return list_committed(run_dir)[-1]


def events_of(events: list[Any], kind: str) -> list[Any]:
    return [e for e in events if e.type == kind]
