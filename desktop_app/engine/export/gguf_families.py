"""What each model family becomes in llama.cpp: its GGUF architecture, hyperparameter keys and tensor names.

Tensor names come from the gguf package's own maps (`gguf.get_tensor_name_map`: Hugging Face name -> GGUF name per
architecture) and are checked against the architecture's tensor list (`gguf.MODEL_TENSORS`), so a tensor llama.cpp
would not read is refused here rather than failing in llama.cpp. The family table (model/families.py) says which
architecture a model type becomes and how its weights change, following llama.cpp's converter (convert_hf_to_gguf.py
and its conversion/ modules) family by family:
- llama, mistral, granite, smollm3: Q and K projection rows (and biases) permuted per head, because llama.cpp's
  LLAMA RoPE rotates *adjacent* pairs (x0,x1),(x2,x3)... while Hugging Face rotates the two halves of each head.
  The other families use llama.cpp's NEOX RoPE (halves), as Hugging Face does: no permutation.
- gemma2, gemma3: every RMSNorm weight + 1 (Hugging Face's Gemma norm multiplies by 1 + w); their tied output
  layer is not written; soft-capping, the sliding-window layers and the local RoPE base as keys.
- phi3: fused QKV and gate-up projections pass as they are (llama.cpp's phi3 reads them fused); partial rotary
  dimensions; long-RoPE factors as tensors.
- granite: its four multipliers (embedding, residual, attention, logits) as keys.
- Llama 3.1+ RoPE scaling ("llama3"): the per-frequency factors as the rope_freqs tensor.
- gpt2: learned positions, LayerNorm with biases, one fused QKV projection; HF's Conv1D stores weights as (in, out),
  so every projection is transposed to (out, in).
Shapes are written reversed (GGML order) by the gguf writer; 1-D tensors (norms, biases) stay f32.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from desktop_app.engine.errors import UserError
from desktop_app.engine.model.families import FAMILIES, ModelFamily, gguf_families, no_gguf_reason

EXPORTABLE = tuple(gguf_families())
_SKIPPED = ("rotary_emb.inv_freq", ".attn.bias", ".attn.masked_bias")  # buffers, not weights
_HF_TO_GGUF_ROPE = ("default", "linear", "yarn", "llama3", "longrope", "su")


def permute_for_rope(weight: np.ndarray, n_head: int) -> np.ndarray:
    """HF (rotate-half) Q/K rows -> llama.cpp (interleaved pairs) order, per head (n_head of this projection)."""
    return (weight.reshape(n_head, 2, weight.shape[0] // n_head // 2, *weight.shape[1:])
            .swapaxes(1, 2)
            .reshape(weight.shape))


@dataclass(frozen=True)
class Family:
    """How one model is written: `arch` (general.architecture), its hyperparameters as (gguf writer method, value)
    pairs, `rename` from an HF state-dict name to its GGUF name (None: not written), `transform` of that tensor's
    data (permutations, transpositions, norm shifts), whether the output layer is tied to the embeddings, and
    `extra` tensors llama.cpp needs that the model has no weight for (RoPE factors)."""

    arch: str
    hparams: list[tuple[str, Any]]
    rename: Callable[[str], str | None]
    transform: Callable[[str, np.ndarray], np.ndarray]
    tied: bool
    extra: dict[str, np.ndarray] = field(default_factory=dict)


def family_of(config: dict[str, Any]) -> Family:
    """How a model with this config.json (dict) is written as GGUF; UserError (one line) for a family or a variant
    llama.cpp would not read the same way."""
    model_type = config.get("model_type")
    family = FAMILIES.get(str(model_type))
    if family is None or family.gguf_arch is None:
        raise UserError(no_gguf_reason(model_type))
    if model_type == "gpt2":
        return _gpt2(config)
    return _decoder(config, family)


# --- the shared pieces -----------------------------------------------------------------------------------------


def _arch_enum(arch: str) -> Any:
    import gguf

    return next(a for a, name in gguf.MODEL_ARCH_NAMES.items() if name == arch)


def _tensor_renamer(arch: str, n_layers: int) -> Callable[[str], str | None]:
    """HF name -> GGUF name by the gguf package's map for `arch`; None for a name it does not map or a tensor
    llama.cpp's `arch` does not read."""
    import gguf

    enum = _arch_enum(arch)
    tensor_map = gguf.get_tensor_name_map(enum, n_layers)
    known = {gguf.TENSOR_NAMES[t] for t in gguf.MODEL_TENSORS[enum]}

    def rename(name: str) -> str | None:
        mapped = tensor_map.get_name(name, try_suffixes=(".weight", ".bias"))
        if mapped is None:
            return None
        stem = mapped.rsplit(".", 1)[0]
        generic = ".".join("{bid}" if part.isdigit() else part for part in stem.split("."))
        return mapped if generic in known else None

    return rename


def _rope_parameters(config: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(global layers' RoPE parameters, sliding layers' RoPE parameters) from transformers' rope_parameters (5.x,
    nested per layer type for Gemma 3) or the older rope_scaling + rope_theta."""
    params = config.get("rope_parameters") or config.get("rope_scaling") or {}
    if not isinstance(params, dict):
        params = {}
    full = params.get("full_attention", params)
    local = params.get("sliding_attention", {})
    full = {"rope_theta": config.get("rope_theta", 10000.0), **full}
    if isinstance(local, dict) and "rope_theta" not in local and config.get("rope_local_base_freq"):
        local = {**local, "rope_theta": config["rope_local_base_freq"]}
    return full, local if isinstance(local, dict) else {}


def _rope_type(params: dict[str, Any]) -> str:
    return str(params.get("rope_type") or params.get("type") or "default").lower()


def _rope_scaling(params: dict[str, Any], head_dim: int) -> tuple[list[tuple[str, Any]], dict[str, np.ndarray]]:
    """The RoPE scaling keys and tensors llama.cpp reads, as its converter writes them; UserError for a kind it
    does not have."""
    import gguf

    kind, factor = _rope_type(params), params.get("factor")
    if kind not in _HF_TO_GGUF_ROPE:
        raise UserError(f"GGUF export does not support RoPE scaling {kind!r} (llama.cpp has no such kind): export this "
                        "model as a Hugging Face folder (--format hf)")
    if kind == "linear" and factor is not None:
        return [("add_rope_scaling_type", gguf.RopeScalingType.LINEAR), ("add_rope_scaling_factor", float(factor))], {}
    if kind == "yarn" and factor is not None:
        keys: list[tuple[str, Any]] = [
            ("add_rope_scaling_type", gguf.RopeScalingType.YARN), ("add_rope_scaling_factor", float(factor)),
            ("add_rope_scaling_orig_ctx_len", int(params["original_max_position_embeddings"]))]
        for key, method in (("extrapolation_factor", "add_rope_scaling_yarn_ext_factor"),
                            ("attention_factor", "add_rope_scaling_yarn_attn_factor"),
                            ("beta_fast", "add_rope_scaling_yarn_beta_fast"),
                            ("beta_slow", "add_rope_scaling_yarn_beta_slow")):
            if params.get(key) is not None:
                keys.append((method, float(params[key])))
        return keys, {}
    if kind == "llama3":
        return [], {"rope_freqs.weight": llama3_rope_factors(params, head_dim)}
    return [], {}


def llama3_rope_factors(params: dict[str, Any], head_dim: int) -> np.ndarray:
    """Llama 3.1's per-frequency RoPE scaling as the factors llama.cpp multiplies its wavelengths by (rope_freqs)."""
    base = float(params.get("rope_theta", 10000.0))
    factor = float(params.get("factor", 8.0))
    low, high = float(params.get("low_freq_factor", 1.0)), float(params.get("high_freq_factor", 4.0))
    old_context = float(params.get("original_max_position_embeddings", 8192))
    factors = []
    for i in range(0, head_dim, 2):
        wavelength = 2 * math.pi * base ** (i / head_dim)
        if wavelength < old_context / high:
            factors.append(1.0)
        elif wavelength > old_context / low:
            factors.append(factor)
        else:
            smooth = (old_context / wavelength - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return np.asarray(factors, dtype=np.float32)


# --- decoder-only transformers with RMSNorm (every family but gpt2) ---------------------------------------------


def _decoder(config: dict[str, Any], family: ModelFamily) -> Family:
    arch = str(family.gguf_arch)
    shape = _Shape.of(config, family)
    full, local = _rope_parameters(config)
    if family.model_type in ("llama", "mistral") and config.get("mlp_bias"):
        raise UserError("GGUF export does not support llama models with MLP biases: export it as a Hugging Face "
                        "folder (--format hf)")
    scaling, extra = _rope_scaling(full, shape.rope_dims)
    hparams = [*shape.hparams(config, float(full.get("rope_theta") or 10000.0)), *scaling]
    hparams += _FAMILY_KEYS.get(family.model_type, _no_keys)(config, shape, local)
    if family.model_type == "phi3":
        extra = {**extra, **_phi3_long_rope(config, full, shape, hparams)}
    transform = _weight_transform(family, shape)
    tied = bool(config.get("tie_word_embeddings", family.model_type.startswith("gemma")))
    return Family(arch, hparams, _tensor_renamer(arch, shape.layers), transform, tied, extra)


@dataclass(frozen=True)
class _Shape:
    d: int
    heads: int
    kv: int
    head_dim: int
    rope_dims: int
    layers: int

    @classmethod
    def of(cls, config: dict[str, Any], family: ModelFamily) -> _Shape:
        d, heads = int(config["hidden_size"]), int(config["num_attention_heads"])
        kv = int(config.get("num_key_value_heads") or heads)
        explicit = config.get("head_dim")
        head_dim = int(explicit) if explicit and family.model_type != "granite" else d // heads
        rotary = float((config.get("rope_parameters") or {}).get("partial_rotary_factor")
                       or config.get("partial_rotary_factor") or 1.0)
        rope_dims = int(rotary * d) // heads if family.model_type == "phi3" else head_dim
        return cls(d, heads, kv, head_dim, rope_dims, int(config["num_hidden_layers"]))

    def hparams(self, config: dict[str, Any], rope_theta: float) -> list[tuple[str, Any]]:
        out: list[tuple[str, Any]] = [
            ("add_context_length", int(config.get("max_position_embeddings") or 2048)),
            ("add_embedding_length", self.d), ("add_block_count", self.layers),
            ("add_feed_forward_length", int(config["intermediate_size"])), ("add_head_count", self.heads),
            ("add_head_count_kv", self.kv), ("add_rope_freq_base", rope_theta),
            ("add_layer_norm_rms_eps", float(config.get("rms_norm_eps") or 1e-6)),
            ("add_rope_dimension_count", self.rope_dims), ("add_vocab_size", int(config["vocab_size"])),
        ]
        if self.head_dim != self.d // self.heads:
            out += [("add_key_length", self.head_dim), ("add_value_length", self.head_dim)]
        return out


def _weight_transform(family: ModelFamily, shape: _Shape) -> Callable[[str, np.ndarray], np.ndarray]:
    def transform(name: str, array: np.ndarray) -> np.ndarray:
        if family.rope_permute and ".self_attn.q_proj." in name:
            return permute_for_rope(array, shape.heads)
        if family.rope_permute and ".self_attn.k_proj." in name:
            return permute_for_rope(array, shape.kv)
        if family.norm_shift and name.endswith("norm.weight"):
            return array + np.float32(family.norm_shift)
        return array

    return transform


def _no_keys(config: dict[str, Any], shape: _Shape, local: dict[str, Any]) -> list[tuple[str, Any]]:
    return []


def _sliding_keys(config: dict[str, Any], local: dict[str, Any]) -> list[tuple[str, Any]]:
    """The sliding window, which layers use it (from layer_types, written as llama.cpp's per-layer pattern) and
    the sliding layers' own RoPE base."""
    window = config.get("sliding_window")
    if not window:
        return []
    out: list[tuple[str, Any]] = [("add_sliding_window", int(window))]
    types = config.get("layer_types")
    if isinstance(types, list) and types:
        out.append(("add_sliding_window_pattern", [t == "sliding_attention" for t in types]))
    if local.get("rope_theta"):
        out.append(("add_rope_freq_base_swa", float(local["rope_theta"])))
    return out


def _check_gemma_scale(config: dict[str, Any], shape: _Shape) -> None:
    """llama.cpp scales Gemma's queries by 1/sqrt(head_dim) (1/sqrt(d / heads) for the 46-layer 27B); Hugging Face by
    query_pre_attn_scalar: a model where the two differ would not compute the same."""
    scalar = config.get("query_pre_attn_scalar")
    expected = shape.d // shape.heads if shape.layers == 46 else shape.head_dim
    if scalar is not None and int(scalar) != expected:
        raise UserError(f"GGUF export: this Gemma model scales attention by query_pre_attn_scalar={scalar}, where "
                        f"llama.cpp uses {expected}: export it as a Hugging Face folder (--format hf)")


def _gemma2_keys(config: dict[str, Any], shape: _Shape, local: dict[str, Any]) -> list[tuple[str, Any]]:
    _check_gemma_scale(config, shape)
    out = [("add_attn_logit_softcapping", float(config.get("attn_logit_softcapping") or 0.0)),
           ("add_final_logit_softcapping", float(config.get("final_logit_softcapping") or 0.0))]
    return out + _sliding_keys(config, local)


def _gemma3_keys(config: dict[str, Any], shape: _Shape, local: dict[str, Any]) -> list[tuple[str, Any]]:
    _check_gemma_scale(config, shape)
    if config.get("attn_logit_softcapping"):
        raise UserError("GGUF export: llama.cpp's Gemma 3 has no attention soft-capping, which this model sets")
    out = [("add_final_logit_softcapping", float(config["final_logit_softcapping"]))] \
        if config.get("final_logit_softcapping") else []
    return out + _sliding_keys(config, local)


def _olmo2_keys(config: dict[str, Any], shape: _Shape, local: dict[str, Any]) -> list[tuple[str, Any]]:
    return _sliding_keys(config, local)


def _phi3_keys(config: dict[str, Any], shape: _Shape, local: dict[str, Any]) -> list[tuple[str, Any]]:
    full, _ = _rope_parameters(config)
    original = full.get("original_max_position_embeddings") or config.get("original_max_position_embeddings") \
        or config.get("max_position_embeddings") or 4096
    # llama.cpp runs Phi's sliding window as full attention, as Phi-3 itself does within its context
    return [("add_rope_scaling_orig_ctx_len", int(original)),
            ("add_sliding_window", int(config.get("sliding_window") or 0))]


def _phi3_long_rope(config: dict[str, Any], full: dict[str, Any], shape: _Shape,
                    hparams: list[tuple[str, Any]]) -> dict[str, np.ndarray]:
    """Phi-3's long-context RoPE: the long and short factors as tensors, and its attention factor (appended to
    `hparams`), as llama.cpp's converter computes them."""
    long, short = full.get("long_factor"), full.get("short_factor")
    if not long:
        return {}
    if not short or len(long) != len(short) or len(long) != shape.rope_dims // 2:
        raise UserError(f"GGUF export: this Phi-3 model's long and short RoPE factors must each have "
                        f"{shape.rope_dims // 2} values")
    original = int(dict(hparams)["add_rope_scaling_orig_ctx_len"])
    scale = int(config.get("max_position_embeddings") or original) / original
    kind = _rope_type(full)
    if kind in ("su", "longrope"):
        attn = math.sqrt(1 + math.log(scale) / math.log(original)) if scale > 1.0 else 1.0
    else:
        attn = 0.1 * math.log(scale) + 1.0 if scale > 1.0 else 1.0
    hparams.append(("add_rope_scaling_attn_factors", attn))
    return {"rope_factors_long.weight": np.asarray(long, dtype=np.float32),
            "rope_factors_short.weight": np.asarray(short, dtype=np.float32)}


def _granite_keys(config: dict[str, Any], shape: _Shape, local: dict[str, Any]) -> list[tuple[str, Any]]:
    out = []
    for key, method in (("attention_multiplier", "add_attention_scale"), ("embedding_multiplier",
                        "add_embedding_scale"), ("residual_multiplier", "add_residual_scale"),
                        ("logits_scaling", "add_logit_scale")):
        if config.get(key):
            out.append((method, float(config[key])))
    return out


def _smollm3_keys(config: dict[str, Any], shape: _Shape, local: dict[str, Any]) -> list[tuple[str, Any]]:
    """llama.cpp's SmolLM3 skips RoPE on every 4th layer, which is what the model must do too."""
    used = config.get("no_rope_layers")
    expected = [int((i + 1) % 4 != 0) for i in range(shape.layers)]
    if isinstance(used, list) and [int(u) for u in used] != expected:
        raise UserError("GGUF export: llama.cpp's SmolLM3 skips RoPE on every 4th layer; this model skips it on "
                        f"others ({used})")
    return []


_FAMILY_KEYS: dict[str, Callable[[dict[str, Any], _Shape, dict[str, Any]], list[tuple[str, Any]]]] = {
    "gemma2": _gemma2_keys, "gemma3_text": _gemma3_keys, "olmo2": _olmo2_keys, "phi3": _phi3_keys,
    "granite": _granite_keys, "smollm3": _smollm3_keys,
}


# --- gpt2 ---------------------------------------------------------------------------------------------------------

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

    def transform(name: str, array: np.ndarray) -> np.ndarray:
        if name.endswith(".weight") and any(f".{m}." in name for m in _GPT2_CONV1D):
            return np.ascontiguousarray(array.T)
        return array

    return Family("gpt2", hparams, _tensor_renamer("gpt2", int(config["n_layer"])), transform,
                  bool(config.get("tie_word_embeddings", True)))


def is_skipped(name: str) -> bool:
    """A state-dict entry that is a buffer, not a weight llama.cpp reads (RoPE caches, GPT-2's causal masks)."""
    return name.endswith(_SKIPPED)
