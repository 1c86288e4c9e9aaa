"""Training forwards for GPUs: llama and gpt2 written as plain PyTorch over the weights of transformers' own modules.

transformers' modules are written for every use at once (caches, masks of every kind, output options); in training
on a GPU their many small element-wise kernels dominate (profile of the 110M llama on an H100: 16 ms of 77 ms in
matmuls, 17 ms in multiplies, 14 ms in copies and casts). The forward here computes the same maths the way a
hand-written model would, so torch.compile fuses it as it fuses a plain PyTorch model, and Liger's kernels can
replace its pieces one for one:

- RMSNorm / LayerNorm as the single torch op (or Liger's RMSNorm), its output cast once to the compute dtype instead
  of once per projection that reads it;
- RoPE with transformers' own cos/sin (any rope type the model was built with), or Liger's RoPE kernel;
- SDPA with is_causal (flash attention) for plain rows; for packed rows (several examples in one row, position ids
  restarting at each), FlexAttention with a block mask of the examples on CUDA, so attention never crosses an
  example and blocks between examples are skipped instead of masked; a dense block-causal mask elsewhere;
- the projections as `linear()`: F.linear for nn.Linear and GPT-2's Conv1D, and for a LoRA layer the frozen base
  plus the two small adapter matmuls (no dropout pass at dropout 0, no casts: autocast's), anything else through
  the module itself;
- the output projection is not here: the loss takes the last hidden states (fused_loss.py), so no logits exist.

Parameters are the model's own (nothing is copied), so optimizer, checkpoints and DDP see the usual model. Numbers
equal transformers' forward to float rounding (tests/engine/test_fast_forward.py compares loss and every gradient).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

KERNELS = ("torch", "liger")
_GELU = {"gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu": "none"}


# --- projections -------------------------------------------------------------------------------------------------

def _is_conv1d(module: Any) -> bool:
    return type(module).__name__ == "Conv1D" and hasattr(module, "nf")  # transformers.pytorch_utils.Conv1D


def _is_lora(module: Any) -> bool:
    return hasattr(module, "lora_A") and hasattr(module, "lora_B") and hasattr(module, "base_layer")


def projection_kind(module: Any) -> str | None:
    """'linear', 'conv1d', 'lora' (a plain LoRA layer over one of those), or None for anything else."""
    if type(module) is torch.nn.Linear:
        return "linear"
    if _is_conv1d(module):
        return "conv1d"
    if not _is_lora(module) or projection_kind(module.base_layer) not in ("linear", "conv1d"):
        return None
    active = list(getattr(module, "active_adapters", []) or [])
    if len(active) != 1 or active[0] not in module.lora_A:
        return None
    name = active[0]
    variant = getattr(module, "lora_variant", {}) or {}
    if name in variant or (getattr(module, "use_dora", {}) or {}).get(name):
        return None  # DoRA and other variants: their own maths
    if any((getattr(module, "lora_bias", {}) or {}).values()) or module.lora_B[name].bias is not None:
        return None
    return "lora"


def linear(module: Any, x: torch.Tensor) -> torch.Tensor:
    """module(x) for a projection, as a plain matmul where projection_kind knows it."""
    if type(module) is torch.nn.Linear:
        return F.linear(x, module.weight, module.bias)
    if _is_conv1d(module):  # stored [in, out]: x @ W + b
        return F.linear(x, module.weight.t(), module.bias)
    if _is_lora(module):
        y = linear(module.base_layer, x)
        if module.merged or module.disable_adapters:
            return y
        name = module.active_adapters[0]
        dropout = module.lora_dropout[name]
        a = x if isinstance(dropout, torch.nn.Identity) else dropout(x)
        return y + F.linear(F.linear(a, module.lora_A[name].weight), module.lora_B[name].weight) * module.scaling[name]
    return module(x)


# --- attention ---------------------------------------------------------------------------------------------------

def document_ids(position_ids: torch.Tensor) -> torch.Tensor:
    """[rows, T] index of the packed example each token belongs to (a new one starts where the position is 0)."""
    return torch.cumsum((position_ids == 0).int(), dim=1)


def block_causal_mask(position_ids: torch.Tensor) -> torch.Tensor:
    """[rows, 1, T, T] bool: query t sees key s when s <= t and both lie in the same packed example (a new
    example starts wherever the position id restarts at 0)."""
    seg = document_ids(position_ids)
    t = position_ids.shape[1]
    causal = torch.ones(t, t, dtype=torch.bool, device=position_ids.device).tril_()
    return ((seg[:, :, None] == seg[:, None, :]) & causal)[:, None]


def document_block_mask(position_ids: torch.Tensor) -> Any:
    """FlexAttention's BlockMask of block_causal_mask: blocks that lie across two examples are skipped."""
    from torch.nn.attention.flex_attention import create_block_mask

    docs = document_ids(position_ids)
    rows, t = docs.shape

    def same_example_causal(b: Any, h: Any, q: Any, kv: Any) -> Any:
        return (docs[b, q] == docs[b, kv]) & (q >= kv)

    return create_block_mask(same_example_causal, rows, None, t, t, device=position_ids.device,
                             _compile=position_ids.device.type == "cuda")


@functools.lru_cache(maxsize=1)
def _compiled_flex() -> Any:
    from torch.nn.attention.flex_attention import flex_attention

    # Outside a compiled graph FlexAttention only runs fused when compiled itself (else it materialises scores).
    return torch.compile(flex_attention, dynamic=False)


class Masks(NamedTuple):
    """How packed rows keep their examples apart (both None: plain causal rows). A NamedTuple: torch.compile and
    activation checkpointing take it apart as they do a tuple."""

    dense: torch.Tensor | None = None  # block_causal_mask
    block: Any = None  # document_block_mask (FlexAttention)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, scale: float, dropout: float,
              masks: Masks = Masks()) -> torch.Tensor:
    """Causal attention of [B, heads, T, head_dim] q/k/v (k/v may have fewer heads: grouped-query attention)."""
    gqa = k.shape[1] != q.shape[1]
    if masks.block is not None:
        from torch.nn.attention.flex_attention import flex_attention

        compiled = torch.compiler.is_compiling() or q.device.type != "cuda"
        flex = flex_attention if compiled else _compiled_flex()
        return flex(q, k, v, block_mask=masks.block, scale=scale, enable_gqa=gqa)
    if masks.dense is not None:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=masks.dense, dropout_p=dropout, scale=scale,
                                              enable_gqa=gqa)
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=dropout, scale=scale, enable_gqa=gqa)


# --- the families -------------------------------------------------------------------------------------------------

def inner_model(model: Any) -> Any:
    """The transformers model under a PEFT wrapper (its LoRA layers are inside it), else the model itself."""
    return model.get_base_model() if hasattr(model, "get_base_model") and hasattr(model, "peft_config") else model


def _projections(inner: Any) -> list[Any]:
    cfg = inner.config
    if cfg.model_type == "llama":
        return [m for layer in inner.model.layers for m in (
            layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj, layer.self_attn.o_proj,
            layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj)]
    return [m for block in inner.transformer.h for m in (block.attn.c_attn, block.attn.c_proj, block.mlp.c_fc,
                                                         block.mlp.c_proj)]


def unsupported_reason(model: Any) -> str | None:
    """Why this forward cannot train `model` (None: it can): only llama and gpt2 with the standard layers."""
    inner = inner_model(model)
    cfg = getattr(inner, "config", None)
    kind = getattr(cfg, "model_type", None)
    if kind == "llama":
        if getattr(cfg, "hidden_act", "silu") != "silu" or (getattr(cfg, "pretraining_tp", 1) or 1) > 1:
            return "a llama variant (activation or tensor-parallel split) the fused forward does not cover"
        core = getattr(inner, "model", None)
        if core is None or not hasattr(core, "rotary_emb") or not getattr(core, "layers", None):
            return "a llama model without the standard layers"
    elif kind == "gpt2":
        if cfg.activation_function not in _GELU:
            return f"activation {cfg.activation_function!r}"
        if getattr(cfg, "add_cross_attention", False) or getattr(cfg, "scale_attn_by_inverse_layer_idx", False) \
                or not getattr(cfg, "scale_attn_weights", True):
            return "a gpt2 variant (cross-attention or another attention scaling) the fused forward does not cover"
    else:
        return f"no fused forward for {kind or type(inner).__name__} models (llama and gpt2 have one)"
    odd = {type(m).__name__ for m in _projections(inner) if projection_kind(m) is None}
    if odd:
        return f"projection layers of a kind the fused forward does not cover ({', '.join(sorted(odd))})"
    return None


def activation_checkpointing(model: Any) -> bool:
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):  # transformers 5 name first
        if hasattr(type(model), name):
            return bool(getattr(model, name))
    return False


def _rms(x: torch.Tensor, norm: Any, liger: bool) -> torch.Tensor:
    if liger:
        from liger_kernel.transformers.functional import liger_rms_norm

        return liger_rms_norm(x, norm.weight, norm.variance_epsilon)
    return F.rms_norm(x, (x.shape[-1],), norm.weight, norm.variance_epsilon)


def _rope(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
          liger: bool) -> tuple[torch.Tensor, torch.Tensor]:
    # q/k [B, heads, T, hd]; cos/sin [B or 1, T, hd] with duplicated halves (transformers' layout).
    if liger:
        from liger_kernel.transformers.rope import liger_rotary_pos_emb

        return liger_rotary_pos_emb(q, k, cos.to(q.dtype), sin.to(q.dtype))
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)

    def rotate(x: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        return torch.cat((-x[..., half:], x[..., :half]), dim=-1)

    return q * cos + rotate(q) * sin, k * cos + rotate(k) * sin


class LlamaRun(NamedTuple):
    """What every llama layer of one forward shares: RoPE's cos/sin, the attention dropout, the masks, the compute
    dtype each norm's output is cast to, and whether Liger's kernels run."""

    cos: torch.Tensor
    sin: torch.Tensor
    dropout: float
    masks: Masks
    dtype: torch.dtype
    liger: bool


def _llama_layer(layer: Any, x: torch.Tensor, run: LlamaRun) -> torch.Tensor:
    b, t, _ = x.shape
    attn, mlp, liger = layer.self_attn, layer.mlp, run.liger
    h = _rms(x, layer.input_layernorm, liger).to(run.dtype)
    q = linear(attn.q_proj, h).view(b, t, -1, attn.head_dim).transpose(1, 2)
    k = linear(attn.k_proj, h).view(b, t, -1, attn.head_dim).transpose(1, 2)
    v = linear(attn.v_proj, h).view(b, t, -1, attn.head_dim).transpose(1, 2)
    q, k = _rope(q, k, run.cos, run.sin, liger)
    out = attention(q.to(v.dtype), k.to(v.dtype), v, scale=attn.scaling, dropout=run.dropout, masks=run.masks)
    x = x + linear(attn.o_proj, out.transpose(1, 2).reshape(b, t, -1))
    h = _rms(x, layer.post_attention_layernorm, liger).to(run.dtype)
    gate, up = linear(mlp.gate_proj, h), linear(mlp.up_proj, h)
    if liger:
        from liger_kernel.transformers.functional import liger_swiglu

        return x + linear(mlp.down_proj, liger_swiglu(gate, up))
    return x + linear(mlp.down_proj, F.silu(gate) * up)


def _gpt2_block(block: Any, x: torch.Tensor, cfg: Any, training: bool, masks: Masks,
                dtype: torch.dtype) -> torch.Tensor:
    b, t, d = x.shape
    heads = cfg.n_head
    ln1, ln2 = block.ln_1, block.ln_2
    h = F.layer_norm(x, (d,), ln1.weight, ln1.bias, ln1.eps).to(dtype)
    q, k, v = (z.view(b, t, heads, d // heads).transpose(1, 2) for z in linear(block.attn.c_attn, h).split(d, dim=2))
    dropout = cfg.attn_pdrop if training else 0.0
    out = attention(q, k, v, scale=(d // heads) ** -0.5, dropout=dropout, masks=masks)
    out = linear(block.attn.c_proj, out.transpose(1, 2).reshape(b, t, d))
    x = x + F.dropout(out, cfg.resid_pdrop, training)
    h = F.layer_norm(x, (d,), ln2.weight, ln2.bias, ln2.eps).to(dtype)
    mlp = block.mlp
    h = linear(mlp.c_proj, F.gelu(linear(mlp.c_fc, h), approximate=_GELU[cfg.activation_function]))
    return x + F.dropout(h, cfg.resid_pdrop, training)


class FastForward(torch.nn.Module):
    """forward(input_ids, position_ids=None, dense_mask=None, block_mask=None, dtype=None) -> the normed last hidden
    states [B, T, d] of a llama or gpt2 model (see unsupported_reason). Packed rows pass their position ids and one
    of the masks (dense: block_causal_mask; block: document_block_mask). dtype: the autocast dtype, into which each
    norm's output is cast once (None: no cast; autocast would still cast it before every projection that reads it)."""

    def __init__(self, model: Any, kernels: str = "torch"):
        super().__init__()
        if kernels not in KERNELS:
            raise ValueError(f"kernels must be one of {KERNELS}, not {kernels!r}")
        why = unsupported_reason(model)
        if why:
            raise ValueError(why)
        self.inner = inner_model(model)
        self.liger = kernels == "liger" and self.inner.config.model_type == "llama"

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor | None = None,
                dense_mask: torch.Tensor | None = None, block_mask: Any = None,
                dtype: torch.dtype | None = None) -> torch.Tensor:
        masks = Masks(dense_mask, block_mask)
        inner = self.inner
        training = inner.training
        recompute = training and torch.is_grad_enabled() and activation_checkpointing(inner)
        if inner.config.model_type == "llama":
            core = inner.model
            x = core.embed_tokens(input_ids)
            dtype = dtype or x.dtype
            positions = position_ids if position_ids is not None else \
                torch.arange(input_ids.shape[1], device=input_ids.device)[None]
            cos, sin = core.rotary_emb(x, positions)
            dropout = float(inner.config.attention_dropout or 0.0) if training else 0.0
            run = LlamaRun(cos, sin, dropout, masks, dtype, self.liger)
            for layer in core.layers:
                x = checkpoint(_llama_layer, layer, x, run, use_reentrant=False) if recompute else \
                    _llama_layer(layer, x, run)
            return _rms(x, core.norm, self.liger)
        core, cfg = inner.transformer, inner.config
        positions = position_ids if position_ids is not None else \
            torch.arange(input_ids.shape[1], device=input_ids.device)[None]
        x = F.dropout(core.wte(input_ids) + core.wpe(positions), cfg.embd_pdrop, training)
        dtype = dtype or x.dtype
        for block in core.h:
            args = (block, x, cfg, training, masks, dtype)
            x = checkpoint(_gpt2_block, *args, use_reentrant=False) if recompute else _gpt2_block(*args)
        ln = core.ln_f
        return F.layer_norm(x, (x.shape[-1],), ln.weight, ln.bias, ln.eps)

