"""Tiny models of every family in the app's table, as a person who pulls Qwen, Llama 3 or Gemma would have them:
transformers' own config classes (random weights, visible norms and biases so a lost shift or bias shows), and a
byte-level BPE tokenizer trained here that carries the family's real chat template (tests/fixtures/chat_templates,
from llama.cpp's source) with that template's special tokens, bos and eos."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ft_helpers import make_tokenizer

from desktop_app.engine.data.chat import CHATML_TEMPLATE, spelled_tokens
from desktop_app.engine.model.families import FAMILIES, attention_of

TEMPLATES_DIR = Path(__file__).resolve().parents[2] / "fixtures" / "chat_templates"
ALL_FAMILIES = tuple(FAMILIES)  # every family of the table, in its order

# family -> (template file or None for ChatML, extra special tokens, bos, eos)
CHAT: dict[str, tuple[str | None, tuple[str, ...], str | None, str]] = {
    "llama": ("meta-llama-Llama-3.2-3B-Instruct.jinja", (), "<|begin_of_text|>", "<|eot_id|>"),
    "mistral": ("mistralai-Mistral-Nemo-Instruct-2407.jinja",
                ("[INST]", "[/INST]", "[TOOL_CALLS]", "[AVAILABLE_TOOLS]", "[/AVAILABLE_TOOLS]", "[TOOL_RESULTS]",
                 "[/TOOL_RESULTS]"), "<s>", "</s>"),
    "qwen2": ("Qwen-Qwen2.5-7B-Instruct.jinja", (), None, "<|im_end|>"),
    "qwen3": ("Qwen-Qwen3-0.6B.jinja", (), None, "<|im_end|>"),
    "gemma": ("google-gemma-2-2b-it.jinja", ("<start_of_turn>", "<end_of_turn>"), "<bos>", "<eos>"),
    "gemma2": ("google-gemma-2-2b-it.jinja", ("<start_of_turn>", "<end_of_turn>"), "<bos>", "<eos>"),
    "gemma3_text": ("google-gemma-2-2b-it.jinja", ("<start_of_turn>", "<end_of_turn>"), "<bos>", "<eos>"),
    "phi3": ("microsoft-Phi-3.5-mini-instruct.jinja", ("<|endoftext|>",), None, "<|endoftext|>"),
    "olmo2": (None, (), None, "<|im_end|>"),
    "granite": ("ibm-granite-granite-3.3-2B-Instruct.jinja", (), None, "<|end_of_text|>"),
    "smollm3": ("HuggingFaceTB-SmolLM3-3B.jinja", (), None, "<|im_end|>"),
    "gpt2": (None, (), None, "<|im_end|>"),
}


def chat_template(family: str) -> str:
    name = CHAT[family][0]
    return (TEMPLATES_DIR / name).read_text(encoding="utf-8") if name else CHATML_TEMPLATE


def family_tokenizer(family: str) -> Any:
    """The app's byte-level BPE with `family`'s chat template, its special tokens, bos and eos."""
    _, extra, bos, eos = CHAT[family]
    template = chat_template(family)
    tok = make_tokenizer()
    specials = list(dict.fromkeys([*spelled_tokens(template), *extra, *(t for t in (bos, eos) if t)]))
    if family in ("olmo2", "gpt2"):
        specials = list(dict.fromkeys(["<|im_start|>", "<|im_end|>", *specials]))
    tok.add_special_tokens({"additional_special_tokens": specials})
    if bos:
        tok.bos_token = bos
    tok.eos_token = eos
    tok.chat_template = template
    return tok


def family_config(family: str, vocab: int, **extra: Any) -> Any:
    """A tiny config of `family` from transformers' own class (Gemma's query scale = its head size, as llama.cpp
    assumes; a sliding window shorter than the test texts, so the sliding layers matter; a context that holds the
    long default system prompts SmolLM3's and Granite's templates insert)."""
    from transformers import CONFIG_MAPPING

    if family == "gpt2":
        return CONFIG_MAPPING["gpt2"](vocab_size=vocab, n_embd=32, n_layer=2, n_head=2, n_positions=128,
                                      n_inner=64, initializer_range=0.1, **extra)
    kwargs: dict[str, Any] = {"vocab_size": vocab, "hidden_size": 32, "intermediate_size": 64,
                              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
                              "max_position_embeddings": 2048, "initializer_range": 0.1}
    if family.startswith("gemma"):
        kwargs.update(head_dim=8, query_pre_attn_scalar=8)
    if family in ("gemma2", "gemma3_text"):
        kwargs.update(sliding_window=6)
    if family == "granite":
        kwargs.update(embedding_multiplier=2.0, residual_multiplier=0.5, attention_multiplier=0.2, logits_scaling=3.0)
    if family == "smollm3":
        kwargs.update(num_hidden_layers=4)  # its 4th layer has no RoPE
    kwargs.update(extra)
    return CONFIG_MAPPING[family](**kwargs)


def make_family_base(folder: Path, family: str, *, seed: int = 0) -> Path:
    """A tiny random `family` model with its chat tokenizer, saved as a Hugging Face folder."""
    import torch
    from transformers import AutoModelForCausalLM

    tok = family_tokenizer(family)
    cfg = family_config(family, len(tok))
    cfg.pad_token_id, cfg.bos_token_id, cfg.eos_token_id = tok.pad_token_id, tok.bos_token_id, tok.eos_token_id
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg, attn_implementation=attention_of(family))
        with torch.no_grad():  # norms and biases away from their 1 / 0 start, so a lost shift or bias shows
            for p in model.parameters():
                if p.ndim == 1:
                    p.add_(torch.randn_like(p) * 0.2)
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    return Path(folder)
