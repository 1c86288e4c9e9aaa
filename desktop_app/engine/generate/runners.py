"""Decode runners: one forward per new token over a KV cache. `prefill(ids, mask)` -> last-position logits;
`step(next_ids)` -> logits of the new token; `extend(ids, mask)` -> more prompt tokens after the cached ones (rows
that share a prefix: it is prefilled once, `expand`ed, then each row's rest); `expand` / `reorder` repeat or move
cache rows (samples, beams).

Why not transformers' forward for every model: decoding a small model on a CPU is a long chain of tiny
ops, and every Python-level call costs microseconds. transformers' forward adds module calls, mask and
cache objects per token; the lean runners need about half the calls. What remains at ~10M+ parameters is
mostly the weight matmuls, which are memory-bound at batch 1 (profiled here: ~60-70% of a token of the
12M `mini` preset is `aten::mm`).

- The llama and gpt2 families run through `_LeanLlama` / `_LeanGPT2`: the same weights and the same
  math as transformers' modules, written as a flat sequence of torch ops over a preallocated KV cache
  (q/k/v and gate/up projections fused into one matmul each, cached per model and rebuilt when any
  weight changes; RoPE on q and k in one op; plain matmul attention for the single new query). Any
  other architecture, or a model the lean path cannot vouch for, runs through transformers' own
  forward with a `DynamicCache` (`_HFRunner`). Tests check both paths against `generate()` token for token.
- Prompts of different lengths are padded on the LEFT with an attention mask and position ids counted
  from each row's first real token, so each row computes what it would compute alone.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from desktop_app.engine.generate.static_models import GPT2_ACTIVATIONS, is_plain_gpt2, rope_tables
from desktop_app.engine.generate.threads import count_parameters
from desktop_app.engine.model.architecture import is_plain_llama

BACKENDS = ("auto", "lean", "hf")
# Models up to this many parameters get fused q/k/v and gate/up copies (extra memory = those weights).
_FUSE_MAX_PARAMS = 400_000_000


class Runner:
    """Base of the decode runners (make_runner): cache length, per-row next position, which cache slots hold
    real tokens."""

    def __init__(self, batch: int, max_len: int, device: torch.device):
        self.batch, self.max_len, self.device = batch, max_len, device
        self.length = 0  # tokens in the cache (the same column for every row: padding is on the left)
        self.positions = torch.zeros(batch, dtype=torch.long, device=device)  # next position per row
        self.valid: torch.Tensor | None = None  # [batch, max_len] bool; None = no padding anywhere

    def _start(self, ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Position ids of the prompt [batch, T]: counted from each row's first real token."""
        t = ids.shape[1]
        if mask is None:
            pos = torch.arange(t, device=self.device).expand(ids.shape[0], t)
            self.positions.fill_(t)
        else:
            self.valid = torch.zeros(self.batch, self.max_len, dtype=torch.bool, device=self.device)
            self.valid[:, :t] = mask.bool()
            self.valid[:, t:] = True
            pos = (mask.long().cumsum(-1) - 1).clamp_(min=0)
            self.positions.copy_(mask.long().sum(-1))
        return pos

    def _continue(self, ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """Position ids [batch, t] of `t` more prompt tokens per row after the cached ones (`extend`); mask marks
        the real ones (padding on the left of the new part)."""
        t = ids.shape[1]
        if mask is None:
            pos = self.positions[:, None] + torch.arange(t, device=self.device)
            self.positions += t
            return pos
        if self.valid is None:
            self.valid = torch.ones(self.batch, self.max_len, dtype=torch.bool, device=self.device)
        self.valid[:, self.length:self.length + t] = mask.bool()
        pos = self.positions[:, None] + (mask.long().cumsum(-1) - 1).clamp_(min=0)
        self.positions += mask.long().sum(-1)
        return pos

    def expand(self, repeats: int) -> None:
        """Repeat every row `repeats` times (row i -> rows i*r .. i*r+r-1) after the prefill.

        Several samples of one prompt share its prefill: computing it once instead of per sample keeps
        the time to first token of `samples=8` close to that of one sample.
        """
        self.batch *= repeats
        self.positions = self.positions.repeat_interleave(repeats)
        if self.valid is not None:
            self.valid = self.valid.repeat_interleave(repeats, dim=0)

    def reorder(self, indices: torch.Tensor) -> None:
        """Row i becomes what row indices[i] was (beam search: each beam continues from its parent).

        `indices` is a 1-D long tensor on the runner's device; rows may repeat or vanish, and its length is
        the new batch size.
        """
        self.batch = int(indices.numel())
        self.positions = self.positions.index_select(0, indices)
        if self.valid is not None:
            self.valid = self.valid.index_select(0, indices)


def cache_keyword(model: Any) -> str:
    """The name a model's forward takes its KV cache by: `cache` in newer transformers (5.24 here; `past_key_values`
    warns there and goes in 5.40), `past_key_values` before."""
    target = model.get_base_model() if hasattr(model, "get_base_model") else model  # a peft model: its base's
    try:
        names = inspect.signature(target.forward).parameters
    except (TypeError, ValueError):
        return "past_key_values"
    return "cache" if "cache" in names else "past_key_values"


class _HFRunner(Runner):
    """Any causal LM through transformers' own forward and DynamicCache (the reference path)."""

    def __init__(self, model: Any, batch: int, max_len: int):
        super().__init__(batch, max_len, next(model.parameters()).device)
        from transformers import DynamicCache

        self.model = model
        self.cache = DynamicCache(config=model.config)
        self.cache_name = cache_keyword(model)

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        pos = self._start(ids, mask)
        self.length = ids.shape[1]
        out = self.model(input_ids=ids, attention_mask=None if mask is None else mask.long(), position_ids=pos,
                         use_cache=True, logits_to_keep=1, **{self.cache_name: self.cache})
        return out.logits[:, -1, :]

    def extend(self, ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """More prompt tokens per row after the cached ones (a shared prefix's rows, each with its own rest)."""
        pos = self._continue(ids, mask)
        self.length += ids.shape[1]
        attention = None if self.valid is None else self.valid[:, : self.length].long()
        out = self.model(input_ids=ids, attention_mask=attention, position_ids=pos, use_cache=True,
                         logits_to_keep=1, **{self.cache_name: self.cache})
        return out.logits[:, -1, :]

    def expand(self, repeats: int) -> None:
        super().expand(repeats)
        self.cache.batch_repeat_interleave(repeats)

    def reorder(self, indices: torch.Tensor) -> None:
        super().reorder(indices)
        self.cache.reorder_cache(indices)

    def step(self, next_ids: torch.Tensor) -> torch.Tensor:
        self.length += 1
        mask = None if self.valid is None else self.valid[:, : self.length].long()
        out = self.model(input_ids=next_ids.view(-1, 1), attention_mask=mask, position_ids=self.positions.view(-1, 1),
                         use_cache=True, **{self.cache_name: self.cache})
        self.positions += 1
        return out.logits[:, -1, :]


def _attention_mask(valid: torch.Tensor | None, start: int, t: int, device: torch.device) -> torch.Tensor | None:
    """Boolean SDPA mask [batch, 1, t, start + t] (True = attend) for queries at cache slots start..start+t-1.

    None when no row is padded and t == 1 (attend to everything). A padded query attends at least to
    itself, so its (ignored) output stays finite: a fully masked row would give NaN, and NaN values in
    the cache poison even masked-out slots (0 x NaN = NaN).
    """
    if valid is None and t == 1:
        return None
    total = start + t
    causal = torch.ones(t, total, dtype=torch.bool, device=device).tril_(diagonal=start)
    if valid is None:
        return causal
    mask = causal & valid[:, None, None, :total]
    eye = torch.zeros(t, total, dtype=torch.bool, device=device)
    eye[:, start:].fill_diagonal_(True)
    return mask | eye


# model -> (weights signature, prepared layer weights): preparing copies the weights, which would add
# to every call's time to first token; the signature (storage + in-place version of every parameter)
# notices training steps, .to() and load_state_dict, so stale copies are never used.
_LAYER_CACHE: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _weights_signature(model: Any) -> tuple:
    return tuple((p.data_ptr(), p._version, p.dtype) for p in model.parameters())


def forget_prepared_weights(model: Any) -> None:
    """Drop the decode copies of `model`'s weights. Call it after updating weights in a way that does not
    bump tensor versions (fused optimizers write in place without it), e.g. before each RL rollout. (The
    static path's decoder, static_cache.py, rewrites its copies in place at the start of every call.)"""
    _LAYER_CACHE.pop(model, None)


def _cached_layers(model: Any, fuse: bool, build: Any) -> list[tuple]:
    signature = (fuse, _weights_signature(model))
    hit = _LAYER_CACHE.get(model)
    if hit is not None and hit[0] == signature:
        return hit[1]
    layers = build(model, fuse)
    _LAYER_CACHE[model] = (signature, layers)
    return layers


def _decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None,
                      scale: float | None) -> torch.Tensor:
    """Attention of one new query per row over the cache: q [b, h, 1, d], k/v [b, kv, L, d] -> [b, h, 1, d].

    The h query heads are viewed as [kv, h / kv]: the heads of a group become the rows of one query block over
    their shared kv head (head i uses kv head i // group), so the kernel neither repeats k/v per head nor copies
    the cache's keys transposed (plain matmul + softmax did: ~45% of a bf16 step at 25 rows). mask [b, 1, 1, L].
    scale=None: q is already scaled.
    """
    b, h, _, d = q.shape
    kv = k.shape[1]
    out = F.scaled_dot_product_attention(q.view(b, kv, h // kv, d), k, v, attn_mask=mask,
                                         scale=1.0 if scale is None else scale)
    return out.view(b, h, 1, d)


class _LeanRunner(Runner):
    k_cache: torch.Tensor  # [layers, batch, kv heads, max_len, head_dim]
    v_cache: torch.Tensor

    def _alloc_cache(self, layers: int, heads: int, head_dim: int, dtype: torch.dtype) -> None:
        shape = (layers, self.batch, heads, self.max_len, head_dim)
        self.k_cache = torch.zeros(shape, dtype=dtype, device=self.device)
        self.v_cache = torch.zeros(shape, dtype=dtype, device=self.device)
        self._layer_views()

    def _layer_views(self) -> None:
        self.k_layers, self.v_layers = list(self.k_cache.unbind(0)), list(self.v_cache.unbind(0))
        self._rows_viewed = -1  # use_rows: the rows its narrowed layer views cover (-1: the whole cache)

    def cache_view(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The key and value caches [layers, batch, kv heads, max_len, head_dim]: the tensors themselves, so a
        caller moving or filling rows writes the cache (engine/generate/slot_cache.py)."""
        return self.k_cache, self.v_cache

    def use_rows(self, rows: int, length: int, positions: torch.Tensor, valid: torch.Tensor | None) -> None:
        """Run the next steps on the first `rows` cache rows (continuous batching, generate/slot_cache.py): the next
        one writes column `length`, each row's position comes from `positions` (advanced in place) and its real
        columns from `valid` (None: no row is padded, the fast path without a mask)."""
        if rows != self._rows_viewed:
            self.k_layers = list(self.k_cache[:, :rows].unbind(0))
            self.v_layers = list(self.v_cache[:, :rows].unbind(0))
            self._rows_viewed = rows
        self.batch, self.length, self.positions, self.valid = rows, length, positions, valid

    def expand(self, repeats: int) -> None:
        super().expand(repeats)
        self.k_cache = self.k_cache.repeat_interleave(repeats, dim=1)
        self.v_cache = self.v_cache.repeat_interleave(repeats, dim=1)
        self._layer_views()

    def reorder(self, indices: torch.Tensor) -> None:
        same_size = indices.numel() == self.batch
        super().reorder(indices)
        if same_size:  # in place, and only the filled slots: the cache is preallocated to max_len
            for cache in (self.k_cache, self.v_cache):
                used = cache.narrow(3, 0, self.length)
                used.copy_(used.index_select(1, indices))
            return
        self.k_cache = self.k_cache.index_select(1, indices)
        self.v_cache = self.v_cache.index_select(1, indices)
        self._layer_views()

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        pos = self._start(ids, mask)
        return self._forward(ids, pos, _attention_mask(self.valid, 0, ids.shape[1], self.device))

    def extend(self, ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        """More prompt tokens per row after the cached ones (a shared prefix's rows, each with its own rest)."""
        pos = self._continue(ids, mask)
        return self._forward(ids, pos, _attention_mask(self.valid, self.length, ids.shape[1], self.device))

    def step(self, next_ids: torch.Tensor) -> torch.Tensor:
        mask = _attention_mask(self.valid, self.length, 1, self.device)
        logits = self._forward(next_ids.view(-1, 1), self.positions.view(-1, 1), mask)
        self.positions += 1
        return logits


class _LeanLlama(_LeanRunner):
    """LlamaForCausalLM's math as a flat op sequence over a preallocated KV cache.

    With `fuse` (models up to _FUSE_MAX_PARAMS), every matrix is a prepared copy: q/k/v and gate/up
    concatenated, stored transposed ([in, out]: at batch 1 this layout streams ~20% faster through
    MKL than nn.Linear's [out, in]), each RMSNorm weight folded into the matrix that reads its output,
    and the attention scale folded into the q columns. Residual adds ride on addmm. The prompt's
    prefill (many rows) runs on the original weights: there nn.Linear's layout is the faster one
    (88M preset, 34-token prompt: 75 vs 84 ms). Without `fuse` (huge models) every step does.
    """

    def __init__(self, model: Any, batch: int, max_len: int, fuse: bool):
        p = next(model.parameters())
        super().__init__(batch, max_len, p.device)
        cfg, core = model.config, model.model
        first = core.layers[0].self_attn
        self.n_heads, self.head_dim = cfg.num_attention_heads, first.head_dim
        self.n_kv = cfg.num_key_value_heads or self.n_heads
        self.hidden = cfg.hidden_size
        self.eps = float(cfg.rms_norm_eps)
        self.scale = float(getattr(first, "scaling", self.head_dim ** -0.5))
        self.fused = False  # which weights the current forward uses (set per call)
        self.embed = core.embed_tokens.weight
        self.plain = self._prepare(model, False)  # references, no copies
        self.prepared = _cached_layers(model, True, self._prepare) if fuse else None
        # cos/sin [max_len, head_dim] for every position, and rot: for one new token per row, RoPE is x @ R(pos)
        # with R = diag(cos) + rot * sin, one small batched matmul per layer, R built once per token.
        self.cos, self.sin, self.rot = rope_tables(core.rotary_emb, max_len, self.head_dim, p.dtype, self.device)
        self._alloc_cache(len(core.layers), self.n_kv, self.head_dim, p.dtype)
        self.gqa = self.n_kv != self.n_heads

    @staticmethod
    def _prepare(model: Any, fuse: bool) -> tuple[list[tuple], tuple]:
        """Per layer (norm1, qkv, o, norm2, gate_up, down) as (weight, bias) pairs, and the output head.
        Fused: norms are None (folded), matrices [in, out]; else nn.Linear's own [out, in] weights."""
        core = model.model
        if not fuse:
            layers = []
            for layer in core.layers:
                a, mlp = layer.self_attn, layer.mlp
                qkv = [(m.weight, m.bias) for m in (a.q_proj, a.k_proj, a.v_proj)]
                layers.append((layer.input_layernorm.weight, qkv, (a.o_proj.weight, a.o_proj.bias),
                               layer.post_attention_layernorm.weight,
                               [(m.weight, m.bias) for m in (mlp.gate_proj, mlp.up_proj)],
                               (mlp.down_proj.weight, mlp.down_proj.bias)))
            return layers, (core.norm.weight, model.lm_head.weight, model.lm_head.bias)

        def prepared(mods: list[Any], norm: torch.Tensor | None, col_scale: list[float] | None = None) -> tuple:
            scales = col_scale or [1.0] * len(mods)
            weight = torch.cat([m.weight * s for m, s in zip(mods, scales, strict=True)])  # [out, in]
            if norm is not None:
                weight = weight * norm  # w * (x * r) @ W^T == (x * r) @ (W * w)^T
            bias = None if mods[0].bias is None else torch.cat([m.bias * s for m, s in zip(mods, scales, strict=True)])
            return weight.t().contiguous(), bias

        scale = float(getattr(core.layers[0].self_attn, "scaling", 1.0))
        layers = []
        for layer in core.layers:
            a, mlp = layer.self_attn, layer.mlp
            layers.append((None, prepared([a.q_proj, a.k_proj, a.v_proj], layer.input_layernorm.weight,
                                          [scale, 1.0, 1.0]),
                           prepared([a.o_proj], None), None,
                           prepared([mlp.gate_proj, mlp.up_proj], layer.post_attention_layernorm.weight),
                           prepared([mlp.down_proj], None)))
        head_w, head_b = prepared([model.lm_head], core.norm.weight)
        return layers, (None, head_w, head_b)

    @staticmethod
    def supports(model: Any) -> bool:
        return is_plain_llama(model)

    def _linear(self, x: torch.Tensor, wb: tuple, residual: torch.Tensor | None = None) -> torch.Tensor:
        """x @ W (+ bias) (+ residual) on 2-D rows; W prepared [in, out] when fused, else [out, in]."""
        w, bias = wb
        if not self.fused:
            y = F.linear(x, w, bias)
            return y if residual is None else residual + y
        if residual is not None:
            y = torch.addmm(residual, x, w)
            return y if bias is None else y.add_(bias)
        return torch.mm(x, w) if bias is None else torch.addmm(bias, x, w)

    def _norm(self, x: torch.Tensor, weight: torch.Tensor | None) -> torch.Tensor:
        # transformers' LlamaRMSNorm (F.rms_norm costs ~4x more per call here on CPU for one row).
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return h if weight is None else weight * h

    def _forward(self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        b, t = ids.shape
        start = self.length
        end = start + t
        nh, nkv, hd = self.n_heads, self.n_kv, self.head_dim
        x = F.embedding(ids, self.embed).view(b * t, self.hidden)  # rows = tokens
        self.fused = t == 1 and self.prepared is not None
        layers, (norm_w, head_w, head_b) = self.prepared if self.fused else self.plain  # type: ignore[misc]
        if t == 1:
            rope = torch.diag_embed(self.cos[pos[:, 0]]).addcmul_(self.rot, self.sin[pos[:, 0]].unsqueeze(1))
        else:
            cos, sin = self.cos[pos].unsqueeze(2), self.sin[pos].unsqueeze(2)  # [b, t, 1, hd]
        causal = mask is None and t > 1
        scale = 1.0 if self.fused else self.scale  # the fused q columns are pre-scaled
        for i, (ln1, qkv, o, ln2, gate_up, down) in enumerate(layers):
            h = self._norm(x, ln1)
            if self.fused:
                heads = self._linear(h, qkv).view(b, t, nh + 2 * nkv, hd)
            else:
                heads = torch.cat([self._linear(h, wb) for wb in qkv], dim=-1).view(b, t, nh + 2 * nkv, hd)
            # RoPE on q and k heads at once. (narrow() instead of slice indexing: same views, a fraction
            # of the per-call cost.)
            qk = heads.narrow(2, 0, nh + nkv)
            if t == 1:
                qk = torch.bmm(qk.view(b, nh + nkv, hd), rope).view(b, 1, nh + nkv, hd)
            else:
                half = hd // 2  # rotate_half as a concatenation: `qk @ self.rot` broadcast a copy of the 64x64
                # matrix to every token and head (a fifth of a chat prompt's prefill on a CPU)
                qk = torch.addcmul(qk * cos, torch.cat((-qk[..., half:], qk[..., :half]), dim=-1), sin)
            q = qk.narrow(2, 0, nh).transpose(1, 2)
            kc, vc = self.k_layers[i], self.v_layers[i]
            kc.narrow(2, start, t).copy_(qk.narrow(2, nh, nkv).transpose(1, 2))
            vc.narrow(2, start, t).copy_(heads.narrow(2, nh + nkv, nkv).transpose(1, 2))
            keys, values = kc.narrow(2, 0, end), vc.narrow(2, 0, end)
            if t == 1:
                att = _decode_attention(q, keys, values, mask, None if self.fused else self.scale)
            else:
                att = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, is_causal=causal,
                                                     enable_gqa=self.gqa, scale=scale)
            x = self._linear(att.transpose(1, 2).reshape(b * t, nh * hd), o, x)
            h = self._norm(x, ln2)
            if self.fused:
                g, u = self._linear(h, gate_up).chunk(2, dim=-1)
            else:
                g, u = (self._linear(h, wb) for wb in gate_up)
            x = self._linear(F.silu(g) * u, down, x)
        self.length = end
        last = self._norm(x.view(b, t, self.hidden)[:, -1], norm_w)
        return self._linear(last, (head_w, head_b))


class _LeanGPT2(_LeanRunner):
    """GPT2LMHeadModel's math as a flat op sequence over a preallocated KV cache."""

    def __init__(self, model: Any, batch: int, max_len: int, fuse: bool):
        p = next(model.parameters())
        super().__init__(batch, max_len, p.device)
        cfg, core = model.config, model.transformer
        self.n_heads = cfg.n_head
        self.hidden = cfg.n_embd
        self.head_dim = self.hidden // self.n_heads
        self.eps = float(cfg.layer_norm_epsilon)
        self.approx = GPT2_ACTIVATIONS[cfg.activation_function]
        self.scale = None if cfg.scale_attn_weights else 1.0
        self.attn_scale = self.head_dim ** -0.5 if cfg.scale_attn_weights else 1.0
        self.wte, self.wpe = core.wte.weight, core.wpe.weight
        self.ln_f = (core.ln_f.weight, core.ln_f.bias)
        self.lm_head_w = model.lm_head.weight
        # Conv1D stores weight as [in, out] and computes addmm(bias, x, weight), as we do.
        self.layers = [((blk.ln_1.weight, blk.ln_1.bias), (blk.attn.c_attn.weight, blk.attn.c_attn.bias),
                        (blk.attn.c_proj.weight, blk.attn.c_proj.bias), (blk.ln_2.weight, blk.ln_2.bias),
                        (blk.mlp.c_fc.weight, blk.mlp.c_fc.bias), (blk.mlp.c_proj.weight, blk.mlp.c_proj.bias))
                       for blk in core.h]
        self._alloc_cache(len(self.layers), self.n_heads, self.head_dim, p.dtype)

    @staticmethod
    def supports(model: Any) -> bool:
        return is_plain_gpt2(model)

    @staticmethod
    def _conv1d(x: torch.Tensor, wb: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        w, bias = wb
        return torch.addmm(bias, x.reshape(-1, x.shape[-1]), w).view(*x.shape[:-1], w.shape[1])

    def _forward(self, ids: torch.Tensor, pos: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        b, t = ids.shape
        start = self.length
        end = start + t
        x = F.embedding(ids, self.wte) + F.embedding(pos, self.wpe)
        shape_d = (self.hidden,)
        causal = mask is None and t > 1
        for i, (ln1, attn, proj, ln2, fc, fc_proj) in enumerate(self.layers):
            h = F.layer_norm(x, shape_d, *ln1, self.eps)
            q, k, v = self._conv1d(h, attn).split(self.hidden, dim=-1)
            q = q.view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
            kc, vc = self.k_layers[i], self.v_layers[i]
            kc.narrow(2, start, t).copy_(k.view(b, t, self.n_heads, self.head_dim).transpose(1, 2))
            vc.narrow(2, start, t).copy_(v.view(b, t, self.n_heads, self.head_dim).transpose(1, 2))
            keys, values = kc.narrow(2, 0, end), vc.narrow(2, 0, end)
            if t == 1:
                att = _decode_attention(q, keys, values, mask, self.attn_scale)
            else:
                att = F.scaled_dot_product_attention(q, keys, values, attn_mask=mask, is_causal=causal,
                                                     scale=self.scale)
            x = x + self._conv1d(att.transpose(1, 2).reshape(b, t, self.hidden), proj)
            h = F.layer_norm(x, shape_d, *ln2, self.eps)
            x = x + self._conv1d(F.gelu(self._conv1d(h, fc), approximate=self.approx), fc_proj)
        self.length = end
        x = F.layer_norm(x[:, -1], shape_d, *self.ln_f, self.eps)
        return F.linear(x, self.lm_head_w)


def lean_supported(model: Any) -> bool:
    """True when the lean decode path covers this model (llama / gpt2 with standard layers)."""
    return _LeanLlama.supports(model) or _LeanGPT2.supports(model)


def left_padded(rows: Sequence[Sequence[int]], pad_id: int, device: torch.device) -> tuple[torch.Tensor,
                                                                                           torch.Tensor | None]:
    """Rows padded on the left into one [n, longest] tensor, and the mask of real tokens (None: no padding)."""
    longest = max(len(r) for r in rows)
    ids = torch.tensor([[pad_id] * (longest - len(r)) + list(r) for r in rows], dtype=torch.long, device=device)
    if all(len(r) == longest for r in rows):
        return ids, None
    mask = torch.tensor([[0] * (longest - len(r)) + [1] * len(r) for r in rows], dtype=torch.long, device=device)
    return ids, mask


def make_runner(model: Any, batch: int, max_len: int, backend: str = "auto") -> Runner:
    """The decode runner for `model`: the lean path when it supports the model, else transformers'."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    if backend != "hf":
        fuse = count_parameters(model) <= _FUSE_MAX_PARAMS
        if _LeanLlama.supports(model):
            return _LeanLlama(model, batch, max_len, fuse)
        if _LeanGPT2.supports(model):
            return _LeanGPT2(model, batch, max_len, fuse)
        if backend == "lean":
            raise ValueError(f"the lean decode path does not support {type(model).__name__}")
    return _HFRunner(model, batch, max_len)
