"""The math of the static decode step: llama and gpt2 over a preallocated cache, fixed shapes only.

Unlike the lean CPU runners (runners.py), every tensor a step touches has a shape fixed by its bucket
(rows, attended columns), and nothing in a step depends on a value the host would have to read back: the
column a step writes is a 1-element device tensor, positions are a device tensor, and the attention mask
is built on the device from the row's valid columns and the current column. So a step can be captured
once as a CUDA graph (cuda_graphs.py) and replayed with no launch overhead, and it runs unchanged on the
CPU, where the tests check it against transformers' generate() token for token.

Kernels per layer and step (what bounds small-batch decoding on a GPU, ~2-4 us each inside a graph):
llama: norm, q/k/v in one matmul, RoPE as one batched matmul by a per-row rotation (built once per step),
two cache writes, scores with scale and mask in one baddbmm, softmax, weights x values, output projection
with the residual add in one addmm, norm, gate/up in one matmul, silu, multiply, down projection + residual.

Weights: gpt2's are the model's own tensors (its q/k/v is already one matrix). llama's q/k/v and gate/up
are concatenated into copies that `refresh()` rewrites in place at the start of every call (no allocation,
so captured graphs stay valid): a device-to-device copy of ~2/3 of the weights, ~0.1 ms at 124M on an
H100, instead of 2-3 more kernels per layer on every token.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from desktop_app.engine.model.architecture import is_plain_llama

# gpt2's activation_function -> F.gelu's `approximate` (the ones whose math both gpt2 paths repeat)
GPT2_ACTIVATIONS = {"gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu": "none"}
KVSink = Callable[[int, torch.Tensor, torch.Tensor], None]  # (layer, keys [R, kv, T, hd], values [R, kv, T, hd])


def is_plain_gpt2(model: Any) -> bool:
    """A GPT2LMHeadModel with standard layers: the math both the lean runner and the static step repeat."""
    cfg = model.config
    if getattr(cfg, "model_type", None) != "gpt2" or cfg.activation_function not in GPT2_ACTIVATIONS:
        return False
    if cfg.scale_attn_by_inverse_layer_idx or cfg.reorder_and_upcast_attn or getattr(cfg, "add_cross_attention",
                                                                                     False):
        return False
    return type(model.lm_head) is torch.nn.Linear and model.lm_head.bias is None


def rope_tables(rotary_emb: Any, positions: int, head_dim: int, dtype: torch.dtype,
                device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A llama's RoPE tables: cos and sin [positions, head_dim] from its own rotary module (so any rope scaling is
    honoured), and the rotate-half matrix `rot` [head_dim, head_dim]: rotate_half(x) = cat(-x2, x1) = x @ rot."""
    cos, sin = rotary_emb(torch.zeros(1, dtype=dtype, device=device), torch.arange(positions, device=device)[None])
    half = head_dim // 2
    eye = torch.eye(half, dtype=dtype, device=device)
    rot = torch.zeros(head_dim, head_dim, dtype=dtype, device=device)
    rot[half:, :half] = -eye
    rot[:half, half:] = eye
    return cos[0].to(dtype), sin[0].to(dtype), rot


def prompt_mask(mask: torch.Tensor | None, t: int, device: torch.device) -> tuple[torch.Tensor | None, bool]:
    """SDPA mask [R, 1, t, t] (True = attend) for left-padded prompts, and whether plain causal suffices.

    A padded query attends at least to itself so its (ignored) output stays finite: NaN keys or values in
    the cache would poison later steps even where masked out (0 x NaN = NaN)."""
    if mask is None:
        return None, True
    causal = torch.ones(t, t, dtype=torch.bool, device=device).tril_()
    eye = torch.eye(t, dtype=torch.bool, device=device)
    return (causal & mask.bool()[:, None, None, :]) | eye, False


def decode_attention(q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, bias: torch.Tensor,
                     scale: float) -> torch.Tensor:
    """One new query per row over L cached columns: q [b, h, d], keys/values [b, kv, L, d] (views of the
    cache), bias [b * kv, 1, L] additive (0 or -inf) -> [b, h * d]. Grouped-query heads share their kv head.

    Three kernels: scores = bias + scale * q k^T (one baddbmm), softmax, weights x values."""
    b, h, d = q.shape
    kv, length = keys.shape[1], keys.shape[2]
    qg = q.reshape(b * kv, h // kv, d)
    scores = torch.baddbmm(bias, qg, keys.reshape(b * kv, length, d).transpose(1, 2), alpha=scale)
    return torch.bmm(scores.softmax(dim=-1), values.reshape(b * kv, length, d)).view(b, h * d)


class StaticModel:
    """A family's static step and prefill. Subclasses set the cache geometry (layers, kv_heads, head_dim)."""

    layers: int
    kv_heads: int
    head_dim: int
    vocab: int
    max_positions: int | None

    def __init__(self, model: Any):
        p = next(model.parameters())
        self.model, self.device, self.dtype = model, p.device, p.dtype

    def refresh(self) -> None:
        """Re-read the model's weights after they changed in place (prepared copies are rewritten in place)."""

    def tables(self, columns: int) -> None:
        """Prepare per-position tables for a cache of `columns` columns (llama: RoPE's cos and sin)."""

    def step(self, tokens: torch.Tensor, positions: torch.Tensor, column: torch.Tensor, k_layers: list[torch.Tensor],
             v_layers: list[torch.Tensor], bias: torch.Tensor) -> torch.Tensor:
        """Logits [b, vocab] of one new token per row; writes its keys/values at `column` of k/v_layers
        ([b, kv, L, d] views). bias: the additive attention mask [b * kv, 1, L]."""
        raise NotImplementedError

    def prefill(self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None, sink: KVSink) -> torch.Tensor:
        """Logits [R, vocab] of the last position of each (left-padded) prompt; hands every layer's keys and
        values to `sink`."""
        raise NotImplementedError


class StaticLlama(StaticModel):
    def __init__(self, model: Any):
        super().__init__(model)
        cfg, core = model.config, model.model
        first = core.layers[0].self_attn
        self.n_heads, self.head_dim = cfg.num_attention_heads, first.head_dim
        self.kv_heads = cfg.num_key_value_heads or self.n_heads
        self.hidden, self.eps = cfg.hidden_size, float(cfg.rms_norm_eps)
        self.scale = float(getattr(first, "scaling", self.head_dim ** -0.5))
        self.layers, self.vocab = len(core.layers), int(model.lm_head.weight.shape[0])
        self.max_positions = getattr(cfg, "max_position_embeddings", None)
        with torch.inference_mode(False), torch.no_grad():
            self.fused = [(self._cat([a.q_proj, a.k_proj, a.v_proj]), self._cat([m.gate_proj, m.up_proj]))
                          for a, m in ((layer.self_attn, layer.mlp) for layer in core.layers)]
        self.rot: torch.Tensor | None = None
        self.cos = self.sin = torch.empty(0)

    @staticmethod
    def _cat(mods: list[Any]) -> tuple[torch.Tensor, torch.Tensor | None]:
        weight = torch.cat([m.weight for m in mods])
        bias = None if mods[0].bias is None else torch.cat([m.bias for m in mods])
        return weight, bias

    def refresh(self) -> None:
        with torch.inference_mode(False), torch.no_grad():
            for layer, ((qkv_w, qkv_b), (gu_w, gu_b)) in zip(self.model.model.layers, self.fused, strict=True):
                a, m = layer.self_attn, layer.mlp
                torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight], out=qkv_w)
                torch.cat([m.gate_proj.weight, m.up_proj.weight], out=gu_w)
                if qkv_b is not None:
                    torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias], out=qkv_b)
                if gu_b is not None:
                    torch.cat([m.gate_proj.bias, m.up_proj.bias], out=gu_b)

    def tables(self, columns: int) -> None:
        """cos/sin of every position a cache of `columns` columns can hold (the model's own rotary module, so
        any rope scaling is honoured), and the rotate-half matrix."""
        if self.cos.shape[0] >= columns:
            return
        with torch.inference_mode(False), torch.no_grad():
            self.cos, self.sin, self.rot = rope_tables(self.model.model.rotary_emb, columns, self.head_dim, self.dtype,
                                                       self.device)

    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (self.hidden,), weight, self.eps)

    def step(self, tokens: torch.Tensor, positions: torch.Tensor, column: torch.Tensor, k_layers: list[torch.Tensor],
             v_layers: list[torch.Tensor], bias: torch.Tensor) -> torch.Tensor:
        core = self.model.model
        b = tokens.shape[0]
        nh, nkv, hd = self.n_heads, self.kv_heads, self.head_dim
        x = F.embedding(tokens, core.embed_tokens.weight)  # [b, hidden]
        # RoPE for one token per row is x @ R(pos), R = diag(cos) + rot * sin: one batched matmul per layer.
        rope = torch.diag_embed(self.cos[positions]).addcmul_(self.rot, self.sin[positions].unsqueeze(1))
        for layer, (qkv, gate_up), kc, vc in zip(core.layers, self.fused, k_layers, v_layers, strict=True):
            a, m = layer.self_attn, layer.mlp
            heads = F.linear(self._norm(x, layer.input_layernorm.weight), *qkv).view(b, nh + 2 * nkv, hd)
            qk = torch.bmm(heads.narrow(1, 0, nh + nkv), rope)
            kc.index_copy_(2, column, qk.narrow(1, nh, nkv).unsqueeze(2))
            vc.index_copy_(2, column, heads.narrow(1, nh + nkv, nkv).unsqueeze(2))
            att = decode_attention(qk.narrow(1, 0, nh), kc, vc, bias, self.scale)
            x = torch.addmm(x, att, a.o_proj.weight.t())
            if a.o_proj.bias is not None:
                x = x + a.o_proj.bias
            g, u = F.linear(self._norm(x, layer.post_attention_layernorm.weight), *gate_up).chunk(2, dim=-1)
            x = torch.addmm(x, F.silu(g) * u, m.down_proj.weight.t())
            if m.down_proj.bias is not None:
                x = x + m.down_proj.bias
        return F.linear(self._norm(x, core.norm.weight), self.model.lm_head.weight, self.model.lm_head.bias)

    def prefill(self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None, sink: KVSink) -> torch.Tensor:
        core = self.model.model
        r, t = ids.shape
        nh, nkv, hd = self.n_heads, self.kv_heads, self.head_dim
        attn_mask, causal = prompt_mask(mask, t, self.device)
        cos, sin = self.cos[pos].unsqueeze(2), self.sin[pos].unsqueeze(2)  # [r, t, 1, hd]
        x = F.embedding(ids, core.embed_tokens.weight).view(r * t, self.hidden)
        for i, (layer, (qkv, gate_up)) in enumerate(zip(core.layers, self.fused, strict=True)):
            a, m = layer.self_attn, layer.mlp
            heads = F.linear(self._norm(x, layer.input_layernorm.weight), *qkv).view(r, t, nh + 2 * nkv, hd)
            qk = heads.narrow(2, 0, nh + nkv)
            qk = torch.addcmul(qk * cos, qk @ self.rot, sin).transpose(1, 2)  # [r, nh + nkv, t, hd]
            keys, values = qk.narrow(1, nh, nkv), heads.narrow(2, nh + nkv, nkv).transpose(1, 2)
            sink(i, keys, values)
            att = F.scaled_dot_product_attention(qk.narrow(1, 0, nh), keys, values, attn_mask=attn_mask,
                                                 is_causal=causal, enable_gqa=nkv != nh, scale=self.scale)
            x = a.o_proj(att.transpose(1, 2).reshape(r * t, nh * hd)) + x
            g, u = F.linear(self._norm(x, layer.post_attention_layernorm.weight), *gate_up).chunk(2, dim=-1)
            x = m.down_proj(F.silu(g) * u) + x
        last = x.view(r, t, self.hidden)[:, -1]
        return self.model.lm_head(self._norm(last, core.norm.weight))


class StaticGPT2(StaticModel):

    def __init__(self, model: Any):
        super().__init__(model)
        cfg = model.config
        self.n_heads, self.hidden = cfg.n_head, cfg.n_embd
        self.kv_heads, self.head_dim = self.n_heads, self.hidden // self.n_heads
        self.eps = float(cfg.layer_norm_epsilon)
        self.approx = GPT2_ACTIVATIONS[cfg.activation_function]
        self.scale = self.head_dim ** -0.5 if cfg.scale_attn_weights else 1.0
        self.layers, self.vocab = len(model.transformer.h), int(model.lm_head.weight.shape[0])
        self.max_positions = getattr(cfg, "n_positions", None)

    @staticmethod
    def supports(model: Any) -> bool:
        return is_plain_gpt2(model)

    def _ln(self, x: torch.Tensor, ln: Any) -> torch.Tensor:
        return F.layer_norm(x, (self.hidden,), ln.weight, ln.bias, self.eps)

    def step(self, tokens: torch.Tensor, positions: torch.Tensor, column: torch.Tensor, k_layers: list[torch.Tensor],
             v_layers: list[torch.Tensor], bias: torch.Tensor) -> torch.Tensor:
        core = self.model.transformer
        b, nh, hd = tokens.shape[0], self.n_heads, self.head_dim
        x = F.embedding(tokens, core.wte.weight) + F.embedding(positions, core.wpe.weight)
        for blk, kc, vc in zip(core.h, k_layers, v_layers, strict=True):
            attn, mlp = blk.attn, blk.mlp
            heads = torch.addmm(attn.c_attn.bias, self._ln(x, blk.ln_1), attn.c_attn.weight).view(b, 3 * nh, hd)
            kc.index_copy_(2, column, heads.narrow(1, nh, nh).unsqueeze(2))
            vc.index_copy_(2, column, heads.narrow(1, 2 * nh, nh).unsqueeze(2))
            att = decode_attention(heads.narrow(1, 0, nh), kc, vc, bias, self.scale)
            x = torch.addmm(attn.c_proj.bias, att, attn.c_proj.weight).add_(x)
            h = F.gelu(torch.addmm(mlp.c_fc.bias, self._ln(x, blk.ln_2), mlp.c_fc.weight), approximate=self.approx)
            x = torch.addmm(mlp.c_proj.bias, h, mlp.c_proj.weight).add_(x)
        return F.linear(self._ln(x, core.ln_f), self.model.lm_head.weight)

    def prefill(self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None, sink: KVSink) -> torch.Tensor:
        core = self.model.transformer
        r, t = ids.shape
        nh, hd = self.n_heads, self.head_dim
        attn_mask, causal = prompt_mask(mask, t, self.device)
        x = F.embedding(ids, core.wte.weight) + F.embedding(pos, core.wpe.weight)
        for i, blk in enumerate(core.h):
            attn, mlp = blk.attn, blk.mlp
            heads = attn.c_attn(self._ln(x, blk.ln_1)).view(r, t, 3 * nh, hd).transpose(1, 2)  # [r, 3nh, t, hd]
            q, keys, values = heads.narrow(1, 0, nh), heads.narrow(1, nh, nh), heads.narrow(1, 2 * nh, nh)
            sink(i, keys, values)
            att = F.scaled_dot_product_attention(q, keys, values, attn_mask=attn_mask, is_causal=causal,
                                                 scale=self.scale)
            x = x + attn.c_proj(att.transpose(1, 2).reshape(r, t, self.hidden))
            x = x + mlp.c_proj(F.gelu(mlp.c_fc(self._ln(x, blk.ln_2)), approximate=self.approx))
        return F.linear(self._ln(x[:, -1], core.ln_f), self.model.lm_head.weight)


def static_model(model: Any) -> StaticModel | None:
    """The static-step math for `model`, or None when neither family's standard layers cover it."""
    if is_plain_llama(model):
        return StaticLlama(model)
    if StaticGPT2.supports(model):
        return StaticGPT2(model)
    return None


def static_supported(model: Any) -> bool:
    """True when the static decode path covers this model (llama / gpt2 with standard layers)."""
    return is_plain_llama(model) or StaticGPT2.supports(model)
