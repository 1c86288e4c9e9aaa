"""How big a ModelSpec is: exact parameter count, memory estimate, FLOPs, compute-optimal budget.

Stdlib only (no torch), so the model designer can show these figures instantly while the user types.
Parameter names in `layer_table` are the Hugging Face state-dict names of the model `build_model`
builds (LlamaForCausalLM / GPT2LMHeadModel), so the table and the real model agree line by line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from desktop_app.engine.errors import UserError
from desktop_app.engine.specs import ModelSpec, SpecError

BYTES_PER_ELEMENT = {"fp32": 4, "bf16": 2, "fp16": 2}
# A 4-bit (NF4) weight: half a byte, plus an fp32 scale per block of 64 weights (bitsandbytes' default block).
NF4_BYTES_PER_WEIGHT = 0.5 + 4 / 64


def _tensors(spec: ModelSpec) -> list[tuple[str, tuple[int, ...], str]]:
    """Every parameter tensor as (HF name, shape, group), in state-dict order; tied lm_head omitted."""
    d, f, v, L = spec.d_model, spec.ffn_dim, spec.vocab_size, spec.n_layers
    rows: list[tuple[str, tuple[int, ...], str]] = []
    if spec.family == "llama":
        kv = spec.n_kv_heads * spec.head_dim  # width of K and V (smaller than d with GQA)
        rows.append(("model.embed_tokens.weight", (v, d), "embeddings"))
        for i in range(L):
            p = f"model.layers.{i}."
            rows += [
                (p + "self_attn.q_proj.weight", (d, d), "attention"),
                (p + "self_attn.k_proj.weight", (kv, d), "attention"),
                (p + "self_attn.v_proj.weight", (kv, d), "attention"),
                (p + "self_attn.o_proj.weight", (d, d), "attention"),
                (p + "mlp.gate_proj.weight", (f, d), "mlp"),
                (p + "mlp.up_proj.weight", (f, d), "mlp"),
                (p + "mlp.down_proj.weight", (d, f), "mlp"),
                (p + "input_layernorm.weight", (d,), "norms"),
                (p + "post_attention_layernorm.weight", (d,), "norms"),
            ]
        rows.append(("model.norm.weight", (d,), "norms"))
    elif spec.family == "gpt2":
        # GPT-2 uses Conv1D: weights are stored (in, out), the transpose of nn.Linear.
        rows.append(("transformer.wte.weight", (v, d), "embeddings"))
        rows.append(("transformer.wpe.weight", (spec.context_length, d), "position_embeddings"))
        for i in range(L):
            p = f"transformer.h.{i}."
            rows += [
                (p + "ln_1.weight", (d,), "norms"),
                (p + "ln_1.bias", (d,), "norms"),
                (p + "attn.c_attn.weight", (d, 3 * d), "attention"),
                (p + "attn.c_attn.bias", (3 * d,), "attention"),
                (p + "attn.c_proj.weight", (d, d), "attention"),
                (p + "attn.c_proj.bias", (d,), "attention"),
                (p + "ln_2.weight", (d,), "norms"),
                (p + "ln_2.bias", (d,), "norms"),
                (p + "mlp.c_fc.weight", (d, f), "mlp"),
                (p + "mlp.c_fc.bias", (f,), "mlp"),
                (p + "mlp.c_proj.weight", (f, d), "mlp"),
                (p + "mlp.c_proj.bias", (d,), "mlp"),
            ]
        rows.append(("transformer.ln_f.weight", (d,), "norms"))
        rows.append(("transformer.ln_f.bias", (d,), "norms"))
    else:
        raise ValueError(f"unknown model family {spec.family!r}")
    if not spec.tie_embeddings:
        rows.append(("lm_head.weight", (v, d), "lm_head"))
    return rows


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def count_parameters(spec: ModelSpec) -> int:
    """Exact number of parameters of `build_model(spec)` (tied embeddings counted once)."""
    return sum(_numel(shape) for _, shape, _ in _tensors(spec))


def parameter_breakdown(spec: ModelSpec) -> dict[str, int]:
    """Parameters per group: embeddings, position_embeddings (gpt2), attention, mlp, norms, lm_head
    (0 when tied), plus `non_embedding` (everything but token/position embeddings and an untied
    lm_head, the N of scaling-law papers) and `total`."""
    out = {"embeddings": 0, "position_embeddings": 0, "attention": 0, "mlp": 0, "norms": 0, "lm_head": 0}
    for _, shape, group in _tensors(spec):
        out[group] += _numel(shape)
    out["non_embedding"] = out["attention"] + out["mlp"] + out["norms"]
    out["total"] = sum(out[g] for g in ("embeddings", "position_embeddings", "attention", "mlp", "norms", "lm_head"))
    return out


def layer_table(spec: ModelSpec) -> list[dict[str, Any]]:
    """One row per parameter tensor for the UI: {name (HF state-dict name), shape (list), params}."""
    return [{"name": name, "shape": list(shape), "params": _numel(shape)} for name, shape, _ in _tensors(spec)]


def _matmul_params(spec: ModelSpec) -> int:
    """Weights that take part in a matrix multiply per token: all linear layers plus the output
    projection (which is a matmul even when tied); embedding lookups, norms and biases are excluded."""
    b = parameter_breakdown(spec)
    linear = b["attention"] + b["mlp"]
    if spec.family == "gpt2":  # biases are adds, not multiply-accumulates
        linear -= spec.n_layers * (3 * spec.d_model + spec.d_model + spec.ffn_dim + spec.d_model)
    return linear + spec.vocab_size * spec.d_model


def flops_per_token(spec: ModelSpec, seq_len: int | None = None, *, training: bool = True) -> int:
    """Floating-point operations per token (a multiply-add counts as 2).

    forward  = 2 * M + 4 * n_layers * T * d_model
    training = 3 * forward = 6 * M + 12 * n_layers * T * d_model  (backward ~ 2x forward)

    where M is the number of weights used in matrix multiplies (every linear layer plus the output
    projection; embedding lookups, norms and biases excluded) and T the sequence length (default: the
    context length). The attention term counts Q·K^T and attn·V over the full T (the PaLM convention);
    causal masking halves the useful work, so this is an upper bound for kernels that skip masked blocks.
    """
    t = spec.context_length if seq_len is None else int(seq_len)
    forward = 2 * _matmul_params(spec) + 4 * spec.n_layers * t * spec.d_model
    return 3 * forward if training else forward


def compute_optimal_tokens(spec: ModelSpec, tokens_per_param: float = 20.0) -> int:
    """Training tokens for a compute-optimal run (Chinchilla: ~20 tokens per parameter, all parameters)."""
    return round(tokens_per_param * count_parameters(spec))


def _activation_elements_per_token(spec: ModelSpec) -> int:
    """Elements kept for the backward pass per token (all layers + output), without recomputation.

    Per llama block: norm in/out (2d) twice, q/k/v before and after RoPE (2d + 3kv), attention output
    (d), and the SwiGLU intermediates gate, up, silu(gate), product (4f). Per gpt2 block: norm in/out
    (2d) twice, qkv (3d), attention output (d), fc output and GELU intermediates (~4f: gelu_new is a
    chain of elementwise ops). Attention itself uses fused SDPA kernels that keep only a per-head
    log-sum-exp, so there is no T x T term. Plus the final norm and the logits (which count twice:
    logits and the softmax gradient of the loss).
    """
    d, f = spec.d_model, spec.ffn_dim
    if spec.family == "llama":
        kv = spec.n_kv_heads * spec.head_dim
        per_layer = 4 * d + 2 * d + 3 * kv + d + 4 * f
    else:
        per_layer = 4 * d + 3 * d + d + 4 * f
    if spec.dropout > 0:  # dropout masks after attention and MLP (stored as bytes, ~1/4 of an fp32 each)
        per_layer += d // 2
    return spec.n_layers * per_layer + 2 * d + 2 * spec.vocab_size


def estimate_memory(spec: ModelSpec, *, batch_size: int = 1, seq_len: int | None = None,
                    precision: str = "fp32", training: bool = True) -> dict[str, int]:
    """Approximate memory in bytes: weights, gradients, optimizer, activations, total.

    Assumptions (an estimate, about ±40%: against peak RSS of a real CPU training step it read 108 MiB
    for 144 measured (tiny, batch 16) and 519 MiB for 370 measured (mini, batch 8); framework overhead,
    allocator slack and temporary buffers are not modelled):
    - Training uses autocast mixed precision, as our trainer does: weights and gradients stay fp32
      whatever `precision` is; AdamW keeps two fp32 states per parameter (8 bytes/param);
      activations are stored at `precision` (2 bytes for bf16/fp16, 4 for fp32), except the logits,
      which the loss computes in fp32.
    - Activations are per token x batch_size x seq_len tokens (seq_len defaults to the context
      length), without gradient checkpointing; see `_activation_elements_per_token`.
    - Inference: weights at `precision`, no gradients or optimizer; "activations" is the KV cache for
      batch_size x seq_len tokens (2 x n_layers x kv-width per token, at `precision`) plus one
      layer's transient buffers and the logits of the last position.
    """
    if precision not in BYTES_PER_ELEMENT:
        raise ValueError(f"precision must be one of {', '.join(BYTES_PER_ELEMENT)}, got {precision!r}")
    n = count_parameters(spec)
    t = spec.context_length if seq_len is None else int(seq_len)
    b = int(batch_size)
    act_bytes = BYTES_PER_ELEMENT[precision]
    tokens = b * t
    if training:
        weights, gradients, optimizer = 4 * n, 4 * n, 8 * n
        per_token = _activation_elements_per_token(spec)
        logits = 2 * spec.vocab_size
        activations = tokens * ((per_token - logits) * act_bytes + logits * 4)
    else:
        weights, gradients, optimizer = act_bytes * n, 0, 0
        kv_width = (spec.n_kv_heads if spec.family == "llama" else spec.n_heads) * spec.head_dim
        kv_cache = 2 * spec.n_layers * kv_width * tokens * act_bytes
        transient = tokens * (4 * spec.d_model + 2 * spec.ffn_dim) * act_bytes + b * spec.vocab_size * 4
        activations = kv_cache + transient
    return {"weights": weights, "gradients": gradients, "optimizer": optimizer, "activations": activations,
            "total": weights + gradients + optimizer + activations}


@dataclass(frozen=True)
class TrainingShape:
    """How a model trains, for `estimate_training_memory`: sequences per forward pass (the micro-batch) of
    `seq_len` tokens (None: the context length), activations at `precision`, and what trains: every weight
    (adapter "none"), LoRA adapters of `lora_rank` on a frozen base, or QLoRA (LoRA on a 4-bit base)."""

    batch_size: int = 1
    seq_len: int | None = None
    precision: str = "fp32"
    gradient_checkpointing: bool = False
    adapter: str = "none"
    lora_rank: int = 8
    attention: str = "sdpa"  # the family's attention implementation (model/families.py): "eager" keeps T x T scores


def adapted_weights(spec: ModelSpec) -> int:
    """Parameters in the matrices that get LoRA adapters by default (every linear projection of the blocks)."""
    return sum(_numel(shape) for _, shape, group in _tensors(spec) if group in ("attention", "mlp") and len(shape) == 2)


def lora_parameters(spec: ModelSpec, rank: int) -> int:
    """Trainable parameters of LoRA adapters of `rank` on every linear projection: rank x (in + out) each."""
    return sum(int(rank) * (shape[0] + shape[1]) for _, shape, group in _tensors(spec)
               if group in ("attention", "mlp") and len(shape) == 2)


def checkpointed_activations(spec: ModelSpec, *, tokens: int, precision: str) -> int:
    """Activation bytes with gradient checkpointing: each layer's input is kept, one layer's activations are
    recomputed at a time in the backward pass, plus the final norm and the fp32 logits (never recomputed)."""
    act_bytes = BYTES_PER_ELEMENT[precision]
    d, v = spec.d_model, spec.vocab_size
    per_layer = (_activation_elements_per_token(spec) - 2 * d - 2 * v) // max(1, spec.n_layers)
    kept = spec.n_layers * d + per_layer + 2 * d
    return tokens * (kept * act_bytes + 2 * v * 4)


def estimate_training_memory(spec: ModelSpec, shape: TrainingShape) -> dict[str, int]:
    """`estimate_memory` of a training step as `shape` trains it: weights, gradients, optimizer, activations,
    total (bytes, about +-40%).

    With adapters the base is frozen: its weights stay (fp32, or NF4 for the adapted matrices under QLoRA) but
    have no gradients or optimizer state; only the adapters' parameters get those (4 + 8 bytes each). Activations
    are those of the whole model either way (the backward pass runs through every layer to reach the adapters),
    or `checkpointed_activations` with gradient checkpointing, plus what the adapters' path keeps
    (`adapter_activation_bytes`).
    """
    one = estimate_memory(spec, batch_size=shape.batch_size, seq_len=shape.seq_len, precision=shape.precision)
    out = dict(one)
    if shape.gradient_checkpointing:
        t = spec.context_length if shape.seq_len is None else int(shape.seq_len)
        out["activations"] = checkpointed_activations(spec, tokens=int(shape.batch_size) * t,
                                                      precision=shape.precision)
    if shape.attention == "eager":
        out["activations"] += attention_score_bytes(spec, shape)
    if shape.adapter in ("lora", "qlora"):
        out["activations"] += adapter_activation_bytes(spec, shape)
        lora = lora_parameters(spec, shape.lora_rank)
        weights = one["weights"]
        if shape.adapter == "qlora":
            linear = adapted_weights(spec)
            weights = round(4 * (count_parameters(spec) - linear) + NF4_BYTES_PER_WEIGHT * linear)
        out.update(weights=weights + 4 * lora, gradients=4 * lora, optimizer=8 * lora)
    out["total"] = out["weights"] + out["gradients"] + out["optimizer"] + out["activations"]
    return out


def adapter_activation_bytes(spec: ModelSpec, shape: TrainingShape) -> int:
    """What a LoRA step keeps beyond the plain forward's activations: adapter wrappers send the model through
    transformers' own modules (fused_llama.py serves only a plain llama), whose RMSNorm keeps about 2d more per
    norm and whose RoPE keeps rotate_half's copies of q and k; each adapted linear keeps its (dropped-out) input
    for its A matrix (q, k, v, o, gate, up: 6d; down: f); and the loss holds the full logits' log-softmax and its
    gradient besides (fused_loss.py's chunks never do). Measured
    on the CPU (tests/engine/test_memory_estimate.py): a LoRA step's activations were 1.9x the plain estimate,
    a full step's 0.8x. Under gradient checkpointing one layer's worth is kept."""
    t = spec.context_length if shape.seq_len is None else int(shape.seq_len)
    d, f = spec.d_model, spec.ffn_dim
    kv = spec.n_kv_heads * spec.head_dim if spec.family == "llama" else d
    layers = 1 if shape.gradient_checkpointing else spec.n_layers
    per_token = layers * (4 * d + 2 * d + 2 * kv + 6 * d + f) + 2 * spec.vocab_size
    return int(shape.batch_size) * t * per_token * BYTES_PER_ELEMENT[shape.precision]


def attention_score_bytes(spec: ModelSpec, shape: TrainingShape) -> int:
    """What eager attention keeps for the backward pass that fused SDPA kernels do not: per layer and head, the T x T
    scores and their softmax (Gemma 2's soft-capping computes them this way); one layer's worth under gradient
    checkpointing, which recomputes the others."""
    t = spec.context_length if shape.seq_len is None else int(shape.seq_len)
    layers = 1 if shape.gradient_checkpointing else spec.n_layers
    return 2 * int(shape.batch_size) * layers * spec.n_heads * t * t * BYTES_PER_ELEMENT[shape.precision]


def spec_for_estimate(config: dict[str, Any]) -> ModelSpec | None:
    """The ModelSpec a config.json's memory is estimated with: exact for llama and gpt2; for the many families that
    name their shapes as Llama does (qwen2, mistral, gemma, phi3, ...) a Llama of those shapes (the same weights up
    to biases and norms); None when the shapes are not there (the estimate is then unknown, never invented)."""
    from desktop_app.engine.model.architecture import spec_from_hf_config  # lazy: start-up

    try:
        return spec_from_hf_config(config)
    except (UserError, SpecError, TypeError, ValueError):
        pass
    keys = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
    if not all(isinstance(config.get(k), int) and config[k] > 0 for k in keys):
        return None
    heads = config["num_attention_heads"]
    kv = config.get("num_key_value_heads") or heads
    return ModelSpec("llama", config["vocab_size"], config["hidden_size"], config["num_hidden_layers"], heads,
                     kv if isinstance(kv, int) and kv > 0 and heads % kv == 0 else heads,
                     config["intermediate_size"], int(config.get("max_position_embeddings") or 4096),
                     tie_embeddings=bool(config.get("tie_word_embeddings", False)))


def human_count(n: float) -> str:
    """1234567 -> '1.23M' (for tables)."""
    for unit, scale in (("E", 1e18), ("P", 1e15), ("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{unit}"
    return str(int(n))


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    for unit, scale in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"
