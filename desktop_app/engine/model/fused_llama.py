"""A faster training forward for transformers' LlamaForCausalLM: same parameters, same maths, fewer passes.

On a CPU a training step of a 10-30M llama is ~75% matmuls; most of the rest is element-wise passes over
activations, and transformers' modules spend several per operation (its RMSNorm is five kernels forward
and about eight in autograd's backward; RoPE builds rotate_half with a cat and a negation; the loss
materialises the full batch x context x vocab logits, then a log-softmax of it, then a zero-filled
gradient of the same size). Here, for the plain llama our model designer builds:

- RMSNorm is one autograd Function: forward saves the normalised rows and the inverse RMS; backward
  is three passes (measured 2.7x faster than the module, forward + backward, at 8 x 256 x 448).
- RoPE is one Function over [batch, time, heads, head_dim] (before the transpose to heads-first),
  written half by half with multiply/add-multiply kernels; its backward is the inverse rotation.
- The output projection and the cross-entropy are one Function over chunks of rows (fused_loss.py): each
  chunk's logits live only while its loss and its gradients (w.r.t. the hidden rows and the output matrix)
  are computed, so a step never holds the full logits (67 MB for the 28M preset, 1 GB for a 32k vocabulary
  at batch 8 x 1024) and never zero-fills a gradient of their size.
- Everything else (embeddings, q/k/v/o and MLP linears, SDPA with is_causal, SiLU) is the module or
  the torch op transformers itself calls, so LoRA-style wrappers are detected and sent to the module
  path instead (`supports`).

Numbers match transformers' forward to float rounding (tests/engine/test_fused_llama.py compares loss
and every gradient). Used for fp32 training on CPU; GPUs have their own fast path (fast_forward.py, chosen by
fast_path.py), whose forward is written for torch.compile and Liger's kernels instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from desktop_app.engine.model.architecture import is_plain_llama
from desktop_app.engine.model.fused_loss import linear_cross_entropy

if TYPE_CHECKING:
    from desktop_app.engine.protocols import CausalLM


class _RMSNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        inv_rms = torch.rsqrt(torch.linalg.vecdot(x, x).div_(x.shape[-1]).add_(eps)).unsqueeze(-1)
        normed = x * inv_rms
        ctx.save_for_backward(normed, inv_rms, weight)
        return normed * weight

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        normed, inv_rms, weight = ctx.saved_tensors
        grad_weight = (grad * normed).flatten(0, -2).sum(0)
        grad_normed = grad * weight
        # d/dx of x * r(x): r * (g - xhat * mean(g * xhat)), with xhat = x * r.
        dot = torch.linalg.vecdot(grad_normed, normed).div_(normed.shape[-1]).unsqueeze(-1)
        return grad_normed.addcmul_(normed, dot, value=-1.0).mul_(inv_rms), grad_weight, None


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """weight * x / sqrt(mean(x^2) + eps) over the last dimension (LlamaRMSNorm in fp32)."""
    return _RMSNorm.apply(x, weight, eps)


class _Rotary(torch.autograd.Function):
    # x [..., head_dim] with the half-split layout of transformers' rotate_half; cos/sin [..., head_dim / 2]
    # broadcastable to x's halves. out1 = x1 cos - x2 sin, out2 = x2 cos + x1 sin.
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(cos, sin)
        return _rotate(x, cos, sin, inverse=False)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        cos, sin = ctx.saved_tensors
        return _rotate(grad.contiguous(), cos, sin, inverse=True), None, None


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, inverse: bool) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    out = torch.empty_like(x)
    out1, out2 = out[..., :half], out[..., half:]
    sign = 1.0 if inverse else -1.0  # the inverse rotation is the rotation by -angle
    torch.mul(x1, cos, out=out1).addcmul_(x2, sin, value=sign)
    torch.mul(x2, cos, out=out2).addcmul_(x1, sin, value=-sign)
    return out


def apply_rotary(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE of x [batch, time, heads, head_dim] with cos/sin [time, 1, head_dim / 2]."""
    return _Rotary.apply(x, cos, sin)


def supports(model: CausalLM) -> bool:
    """True for a plain transformers LlamaForCausalLM (standard linears, silu, no tensor parallel)."""
    return is_plain_llama(model) and model.lm_head.bias is None


def usable(model: CausalLM, device: torch.device) -> bool:
    """Whether training `model` on `device` goes through this forward: CPU, fp32, no autocast, not sharded (FSDP's
    weights are gathered only inside each module's own forward, which this path calls around)."""
    return (device.type == "cpu" and not torch.is_autocast_enabled("cpu") and supports(model)
            and model.lm_head.weight.dtype == torch.float32 and not hasattr(model.lm_head.weight, "to_local"))


def _layer(layer: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, dropout: float) -> torch.Tensor:
    b, t, _ = x.shape
    attn, mlp = layer.self_attn, layer.mlp
    h = rms_norm(x, layer.input_layernorm.weight, layer.input_layernorm.variance_epsilon)
    q = apply_rotary(attn.q_proj(h).view(b, t, -1, attn.head_dim), cos, sin).transpose(1, 2)
    k = apply_rotary(attn.k_proj(h).view(b, t, -1, attn.head_dim), cos, sin).transpose(1, 2)
    v = attn.v_proj(h).view(b, t, -1, attn.head_dim).transpose(1, 2)
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=attn.scaling, dropout_p=dropout,
                                         enable_gqa=k.shape[1] != q.shape[1])
    x = x + attn.o_proj(out.transpose(1, 2).reshape(b, t, -1))
    h = rms_norm(x, layer.post_attention_layernorm.weight, layer.post_attention_layernorm.variance_epsilon)
    return x + mlp.down_proj(F.silu(mlp.gate_proj(h)) * mlp.up_proj(h))


def _checkpointing(model: Any) -> bool:
    for name in ("is_activation_checkpointing", "is_gradient_checkpointing"):  # transformers 5 name first
        if hasattr(type(model), name):
            return bool(getattr(model, name))
    return False


def final_hidden(model: CausalLM, ids: torch.Tensor) -> torch.Tensor:
    """The normed last hidden states [batch, time, d] of unpadded rows `ids` [batch, time]."""
    core = model.model
    x = core.embed_tokens(ids)
    positions = torch.arange(ids.shape[1], device=ids.device)[None]
    cos, sin = core.rotary_emb(x, positions)  # [1, time, head_dim], halves duplicated
    half = cos.shape[-1] // 2
    cos, sin = cos[0, :, None, :half].contiguous(), sin[0, :, None, :half].contiguous()
    dropout = float(model.config.attention_dropout or 0.0) if model.training else 0.0
    recompute = model.training and torch.is_grad_enabled() and _checkpointing(model)
    for layer in core.layers:
        if recompute:  # gradient checkpointing: keep only each layer's input, recompute inside in backward
            x = checkpoint(_layer, layer, x, cos, sin, dropout, use_reentrant=False)
        else:
            x = _layer(layer, x, cos, sin, dropout)
    return rms_norm(x, core.norm.weight, core.norm.variance_epsilon)


def causal_lm_loss(model: CausalLM, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy of `model` on inputs/targets [batch, time] (fp32)."""
    hidden = final_hidden(model, inputs)
    return linear_cross_entropy(hidden.reshape(-1, hidden.shape[-1]), model.lm_head.weight, targets.reshape(-1))
