"""Named model specs from ~1M to ~1B parameters (stdlib only). Counts are exact; see `model --list-presets`.

Every vocabulary is a multiple of 64 (model/architecture.VOCAB_MULTIPLE: GPUs multiply such matrices on their fast
kernels); fitted to a dataset, a preset takes the tokenizer's size rounded up the same way."""

from __future__ import annotations

from desktop_app.engine.errors import UserError
from desktop_app.engine.specs import ModelSpec

PRESETS: dict[str, tuple[str, ModelSpec]] = {
    "tiny": ("~0.9M llama: trains in seconds on a laptop CPU; the first-launch default",
             ModelSpec("llama", 4096, 128, 2, 4, 4, 344, 128)),
    "tiny-gpt2": ("~0.9M gpt2-family twin of tiny",
                  ModelSpec("gpt2", 4096, 128, 2, 4, 4, 512, 128)),
    "mini": ("~12M llama with grouped-query attention: minutes per epoch on CPU",
             ModelSpec("llama", 8192, 320, 8, 8, 4, 864, 256)),
    "small": ("~28M llama: the largest that trains comfortably on a CPU",
              ModelSpec("llama", 8192, 448, 10, 8, 8, 1216, 256)),
    "base-88m": ("~88M llama with GQA: needs a GPU for reasonable speed",
                 ModelSpec("llama", 16384, 768, 12, 12, 4, 2048, 512)),
    "gpt2-small": ("124M, the GPT-2 small architecture (1024 context; its 50257 tokens padded to 50304, a multiple "
                   "of 64, for fast GPU matmuls)",
                   ModelSpec("gpt2", 50304, 768, 12, 12, 12, 3072, 1024)),
    "llama-316m": ("~316M llama with GQA, 2048 context",
                   ModelSpec("llama", 32000, 1024, 24, 16, 8, 2816, 2048)),
    "llama-1b": ("~1.1B, the TinyLlama shape (untied embeddings, 4 KV heads)",
                 ModelSpec("llama", 32000, 2048, 22, 32, 4, 5632, 2048, tie_embeddings=False)),
}

DEFAULT_PRESET = "tiny"


def preset(name: str) -> ModelSpec:
    """A copy of the named preset (callers may change it freely)."""

    if name not in PRESETS:
        raise UserError(f"unknown preset {name!r}; choose one of: {', '.join(PRESETS)}")
    return PRESETS[name][1].replace()

