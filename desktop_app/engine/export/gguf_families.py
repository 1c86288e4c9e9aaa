"""What each model family becomes in llama.cpp: its GGUF architecture, hyperparameter keys and tensor names.

Following llama.cpp's own converter (convert_hf_to_gguf.py) family by family:
- llama, mistral -> "llama": Q and K projection rows permuted per head, because llama.cpp's LLAMA rotates
  *adjacent* pairs (x0,x1),(x2,x3)... while Hugging Face rotates the two halves of each head.
- qwen2 -> "qwen2": llama.cpp rotates halves there (NEOX), so no permutation; Q/K/V carry biases.
- gpt2 -> "gpt2": learned positions (position_embd), LayerNorm with biases, one fused QKV projection; HF's
  Conv1D stores weights as (in, out), so every projection is transposed to (out, in).
Shapes are written reversed (GGML order) by the gguf writer; 1-D tensors (norms, biases) stay f32.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from desktop_app.engine.errors import UserError

EXPORTABLE = ("llama", "mistral", "qwen2", "gpt2")


def permute_for_rope(weight: np.ndarray, n_head: int) -> np.ndarray:
    """HF (rotate-half) Q/K rows -> llama.cpp (interleaved pairs) order, per head (n_head of this projection)."""
    return (weight.reshape(n_head, 2, weight.shape[0] // n_head // 2, *weight.shape[1:])
            .swapaxes(1, 2)
            .reshape(weight.shape))


@dataclass(frozen=True)
class Family:
    """How one model family is written: `arch` (general.architecture), its hyperparameters as (gguf writer method,
    value) pairs, `rename` from an HF state-dict name to its GGUF name (None: not written) and `transform` of
    that tensor's data (permutations, transpositions)."""

    arch: str
    hparams: list[tuple[str, Any]]
    rename: Callable[[str], str | None]
    transform: Callable[[str, np.ndarray], np.ndarray]
    tied: bool


def _rope_theta(config: dict[str, Any]) -> float:
    params = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if isinstance(params, dict) and params.get("rope_type", params.get("type", "default")) not in ("default", None):
        raise UserError(f"GGUF export does not support rope scaling ({params.get('rope_type') or params.get('type')}) "
                        "yet: export this model as a Hugging Face folder (--format hf)")
    theta = params.get("rope_theta") if isinstance(params, dict) else None
    return float(theta or config.get("rope_theta") or 10000.0)


def _renamer(fixed: dict[str, str], layers: list[str], block: dict[str, str]) -> Callable[[str], str | None]:
    """HF name -> GGUF name: the `fixed` (whole-model) names, else `LAYERS.i.MODULE.weight|bias` of a module in
    `block` -> blk.i.NAME.weight|bias; None (not written) for anything else."""

    def rename(name: str) -> str | None:
        if name in fixed:
            return fixed[name]
        parts = name.split(".")
        if len(parts) < 5 or parts[:2] != layers:
            return None
        module, kind = ".".join(parts[3:-1]), parts[-1]
        if module not in block or kind not in ("weight", "bias"):
            return None
        return f"blk.{parts[2]}.{block[module]}.{kind}"

    return rename


_LLAMA_BLOCK = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down", "input_layernorm": "attn_norm", "post_attention_layernorm": "ffn_norm",
}


def _llama_like(config: dict[str, Any], arch: str, permute: bool) -> Family:
    d, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
    kv = int(config.get("num_key_value_heads") or heads)
    head_dim = int(config.get("head_dim") or d // heads)
    if arch == "llama" and (config.get("attention_bias") or config.get("mlp_bias")):
        raise UserError("GGUF export does not support llama models with linear-layer biases: export it as a Hugging "
                        "Face folder (--format hf)")
    hparams: list[tuple[str, Any]] = [
        ("add_context_length", int(config.get("max_position_embeddings") or 2048)),
        ("add_embedding_length", d), ("add_block_count", int(config["num_hidden_layers"])),
        ("add_feed_forward_length", int(config["intermediate_size"])), ("add_head_count", heads),
        ("add_head_count_kv", kv), ("add_rope_freq_base", _rope_theta(config)),
        ("add_layer_norm_rms_eps", float(config.get("rms_norm_eps") or 1e-6)),
        ("add_rope_dimension_count", head_dim), ("add_vocab_size", int(config["vocab_size"])),
    ]
    if head_dim != d // heads:
        hparams += [("add_key_length", head_dim), ("add_value_length", head_dim)]
    rename = _renamer({"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
                       "lm_head.weight": "output.weight"}, ["model", "layers"], _LLAMA_BLOCK)

    def transform(name: str, array: np.ndarray) -> np.ndarray:
        if permute and ".self_attn.q_proj." in name:
            return permute_for_rope(array, heads)
        if permute and ".self_attn.k_proj." in name:
            return permute_for_rope(array, kv)
        return array

    return Family(arch, hparams, rename, transform, bool(config.get("tie_word_embeddings", False)))


_GPT2_BLOCK = {"ln_1": "attn_norm", "attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output", "ln_2": "ffn_norm",
               "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"}
_GPT2_CONV1D = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")


def _gpt2(config: dict[str, Any]) -> Family:
    d = int(config["n_embd"])
    if config.get("activation_function", "gelu_new") not in ("gelu_new", "gelu_pytorch_tanh", "gelu"):
        raise UserError(f"GGUF export of gpt2 needs a GELU activation, not {config.get('activation_function')!r}")
    hparams: list[tuple[str, Any]] = [
        ("add_context_length", int(config["n_positions"])), ("add_embedding_length", d),
        ("add_feed_forward_length", int(config.get("n_inner") or 4 * d)), ("add_block_count", int(config["n_layer"])),
        ("add_head_count", int(config["n_head"])),
        ("add_layer_norm_eps", float(config.get("layer_norm_epsilon", 1e-5))),
        ("add_vocab_size", int(config["vocab_size"])),
    ]
    # attn.bias / masked_bias (causal-mask buffers of old checkpoints) are in no block table: not written
    rename = _renamer({"transformer.wte.weight": "token_embd.weight", "transformer.wpe.weight": "position_embd.weight",
                       "transformer.ln_f.weight": "output_norm.weight", "transformer.ln_f.bias": "output_norm.bias",
                       "lm_head.weight": "output.weight"}, ["transformer", "h"], _GPT2_BLOCK)

    def transform(name: str, array: np.ndarray) -> np.ndarray:
        if name.endswith(".weight") and any(f".{m}." in name for m in _GPT2_CONV1D):
            return np.ascontiguousarray(array.T)
        return array

    return Family("gpt2", hparams, rename, transform, bool(config.get("tie_word_embeddings", True)))


def family_of(config: dict[str, Any]) -> Family:
    """How a model with this config.json (dict) is written as GGUF; UserError naming the supported families."""
    model_type = config.get("model_type")
    if model_type in ("llama", "mistral"):
        return _llama_like(config, "llama", permute=True)
    if model_type == "qwen2":
        return _llama_like(config, "qwen2", permute=False)
    if model_type == "gpt2":
        return _gpt2(config)
    raise UserError(f"GGUF export supports {', '.join(EXPORTABLE)} models; this is a {model_type!r} model: export it "
                    "as a Hugging Face folder (--format hf) or zip instead")
