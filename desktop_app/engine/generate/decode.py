"""Streaming text generation: our own decode loop with a KV cache, batch sampling and stop handling.

Why not `model.generate()`: decoding a small model on a CPU is a long chain of tiny ops, and every
Python-level call costs microseconds. transformers' forward + generate() add module calls, mask and
cache objects and a list of logits processors per token; the lean path below needs about half the
calls. What remains at ~10M+ parameters is mostly the weight matmuls, which are memory-bound at
batch 1 (profiled here: ~60-70% of a token of the 12M `mini` preset is `aten::mm`).

- The llama and gpt2 families run through `_LeanLlama` / `_LeanGPT2`: the same weights and the same
  math as transformers' modules, written as a flat sequence of torch ops over a preallocated KV cache
  (q/k/v and gate/up projections fused into one matmul each, cached per model and rebuilt when any
  weight changes; RoPE on q and k in one op; plain matmul attention for the single new query). Any
  other architecture, or a model the lean path cannot vouch for, runs through transformers' own
  forward with a `DynamicCache` (`_HFRunner`). Either way each new token costs one forward of one
  position. Tests check both paths against `generate()` token for token.
- The sampler (sampling.py) applies only the processors that are enabled, and one `.tolist()` per step
  moves all new token ids to Python at once.
- Text is decoded incrementally (text_stream.py): never half a character, never part of a stop string.
- Several samples run as one batch; each distinct prompt is prefilled once and its cache rows repeated.
  Prompts of different lengths are padded on the LEFT with an attention mask and position ids counted
  from each row's first real token, so each row computes what it would compute alone (greedy batch ==
  greedy single, tested).
- Thread policy: with small work a second torch thread mostly adds synchronisation, and when another
  thread (the GUI, a training run) keeps a core busy it makes decoding several times slower; on an
  idle machine it makes a memory-bound 12M-28M model ~1.6x faster. So "auto" starts on the safe
  choice (`decode_threads()`: 1 thread for small work on CPU) and a ThreadTuner times it against all
  cores while decoding, keeps the faster and re-checks (thread_tuner.py). In this torch
  build (OpenMP) `torch.set_num_threads` applies to the calling thread only (checked: other threads keep
  their count); we restore it anyway. While generating, the GIL switch interval is lowered to 50 us
  (`short_gil_switch`) so a busy Python thread delays each GIL hand-back by at most that.
"""


from __future__ import annotations

import contextlib
import sys
import threading
import time
import weakref
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from desktop_app.engine.devices import cpu_cores
from desktop_app.engine.errors import UserError
from desktop_app.engine.events import GenerationStats, TextDelta
from desktop_app.engine.generate.beam_search import stream_beams
from desktop_app.engine.generate.sampling import Sampler
from desktop_app.engine.generate.text_stream import TextStream
from desktop_app.engine.generate.thread_tuner import ThreadTuner
from desktop_app.engine.model.architecture import is_plain_llama
from desktop_app.engine.specs import GenerateSpec

if TYPE_CHECKING:
    from desktop_app.engine.model.loading import LoadedModel

BACKENDS = ("auto", "lean", "hf")
# Models up to this many parameters get fused q/k/v and gate/up copies (extra memory = those weights).
_FUSE_MAX_PARAMS = 400_000_000
# parameters x batch rows up to which decoding starts on one thread on CPU (see decode_threads).
_ONE_THREAD_WORK = 1_000_000_000
# Below this much work (parameters x rows) one thread is as fast as two even when idle (the 0.9M preset:
# 2,164 vs 2,048 tokens/s), so "auto" stays on one thread without timing anything.
_TUNE_MIN_WORK = 10_000_000


# ----------------------------------------------------------------------------------------------------
# Thread policy


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def decode_threads(model: torch.nn.Module, batch: int) -> int | None:
    """The torch threads decoding `batch` rows with `model` starts with: 1 on CPU unless parameters x
    batch exceed ~1e9 (then None: all cores); None on GPUs. With threads="auto", stream_text then lets a
    ThreadTuner (thread_tuner.py) time 1 thread against all cores and keep the faster.

    Why start on 1: with small work a second thread mostly adds synchronisation, and when another thread
    keeps a core busy, 2 threads decoded the 0.9M and 12M presets 7-20x SLOWER than 1 (measured with
    tests/bench/bench_generate.py on the shared 2-core machine). On an idle machine, 2 threads decode a
    12M-28M model ~1.6x faster (the weight matmuls are memory-bound and 2 cores stream faster): the
    tuner finds that within a few tokens.
    """
    device = next(model.parameters()).device
    if device.type != "cpu":
        return None
    return 1 if count_parameters(model) * max(1, batch) <= _ONE_THREAD_WORK else None


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run the block with `n` torch threads (None = unchanged), then restore the previous setting."""
    if not n:
        yield
        return
    previous = torch.get_num_threads()
    torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(previous)


# While decoding, the loop hands the GIL back and forth with any other busy Python thread (the GUI):
# each torch op releases it, and getting it back can take a whole switch interval (5 ms by default).
# Measured here with a Python thread spinning beside decoding of the 12M preset: 5 tokens/s at 1 ms,
# 23 at 0.2 ms, 42 at 50 us (the spinner kept 84% of its own speed), 52 at 20 us (79%). 50 us.
_GIL_SWITCH_S = 0.00005
_gil_lock = threading.Lock()
_gil_users = 0
_gil_saved = 0.0


@contextlib.contextmanager
def short_gil_switch() -> Iterator[None]:
    """Lower sys.setswitchinterval to 1 ms while any generation runs (restored when the last one ends)."""
    global _gil_users, _gil_saved
    with _gil_lock:
        if _gil_users == 0:
            _gil_saved = sys.getswitchinterval()
            sys.setswitchinterval(min(_gil_saved, _GIL_SWITCH_S))
        _gil_users += 1
    try:
        yield
    finally:
        with _gil_lock:
            _gil_users -= 1
            if _gil_users == 0:
                sys.setswitchinterval(_gil_saved)


# ----------------------------------------------------------------------------------------------------
# Decode runners: prefill(ids, mask) -> last-position logits; step(next_ids) -> logits of the new token.


class _Runner:
    """Shared bookkeeping: cache length, per-row next position, which cache slots hold real tokens."""

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


class _HFRunner(_Runner):
    """Any causal LM through transformers' own forward and DynamicCache (the reference path)."""

    def __init__(self, model: Any, batch: int, max_len: int):
        super().__init__(batch, max_len, next(model.parameters()).device)
        from transformers import DynamicCache

        self.model = model
        self.cache = DynamicCache(config=model.config)

    def prefill(self, ids: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        pos = self._start(ids, mask)
        self.length = ids.shape[1]
        out = self.model(input_ids=ids, attention_mask=None if mask is None else mask.long(), position_ids=pos,
                         past_key_values=self.cache, use_cache=True, logits_to_keep=1)
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
                         past_key_values=self.cache, use_cache=True)
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
    bump tensor versions (fused optimizers write in place without it), e.g. before each RL rollout."""
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

    For a single query, plain matmul + softmax beats the SDPA kernel's fixed cost on CPU. Grouped-query
    heads are handled by viewing the h query heads as [kv, h / kv] (head i uses kv head i // group).
    scale=None: q is already scaled.
    """
    b, h, _, d = q.shape
    kv = k.shape[1]
    qg = q.view(b, kv, h // kv, d)
    scores = torch.matmul(qg, k.transpose(-1, -2))  # [b, kv, group, L]
    if scale is not None:
        scores = scores * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))  # mask [b, 1, 1, L]
    return torch.matmul(scores.softmax(dim=-1), v).view(b, h, 1, d)


class _LeanRunner(_Runner):
    k_cache: torch.Tensor  # [layers, batch, kv heads, max_len, head_dim]
    v_cache: torch.Tensor

    def _alloc_cache(self, layers: int, heads: int, head_dim: int, dtype: torch.dtype) -> None:
        shape = (layers, self.batch, heads, self.max_len, head_dim)
        self.k_cache = torch.zeros(shape, dtype=dtype, device=self.device)
        self.v_cache = torch.zeros(shape, dtype=dtype, device=self.device)
        self._layer_views()

    def _layer_views(self) -> None:
        self.k_layers, self.v_layers = list(self.k_cache.unbind(0)), list(self.v_cache.unbind(0))

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
        # cos/sin for every position from the model's own rotary module (honours any rope scaling).
        positions = torch.arange(max_len, device=self.device)[None]
        cos, sin = core.rotary_emb(torch.zeros(1, dtype=p.dtype, device=self.device), positions)
        self.cos, self.sin = cos[0].to(p.dtype), sin[0].to(p.dtype)  # [max_len, head_dim]
        # rotate_half(x) = cat(-x2, x1) = x @ rot. For one new token per row, RoPE is x @ R(pos) with
        # R = diag(cos) + rot * sin: one small batched matmul per layer, R built once per token.
        half = self.head_dim // 2
        eye = torch.eye(half, dtype=p.dtype, device=self.device)
        self.rot = torch.zeros(self.head_dim, self.head_dim, dtype=p.dtype, device=self.device)
        self.rot[half:, :half] = -eye
        self.rot[:half, half:] = eye
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
                qk = torch.addcmul(qk * cos, qk @ self.rot, sin)
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

    _ACTS = {"gelu_new": "tanh", "gelu_pytorch_tanh": "tanh", "gelu": "none"}

    def __init__(self, model: Any, batch: int, max_len: int, fuse: bool):
        p = next(model.parameters())
        super().__init__(batch, max_len, p.device)
        cfg, core = model.config, model.transformer
        self.n_heads = cfg.n_head
        self.hidden = cfg.n_embd
        self.head_dim = self.hidden // self.n_heads
        self.eps = float(cfg.layer_norm_epsilon)
        self.approx = self._ACTS[cfg.activation_function]
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

    @classmethod
    def supports(cls, model: Any) -> bool:
        cfg = model.config
        if getattr(cfg, "model_type", None) != "gpt2" or cfg.activation_function not in cls._ACTS:
            return False
        if cfg.scale_attn_by_inverse_layer_idx or cfg.reorder_and_upcast_attn or getattr(cfg, "add_cross_attention",
                                                                                         False):
            return False
        return type(model.lm_head) is torch.nn.Linear and model.lm_head.bias is None

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


def make_runner(model: Any, batch: int, max_len: int, backend: str = "auto") -> _Runner:
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


# ----------------------------------------------------------------------------------------------------
# Prompt handling


def context_length(model: Any) -> int | None:
    cfg = model.config
    for key in ("max_position_embeddings", "n_positions"):
        value = getattr(cfg, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


class NoChatTemplateError(UserError):
    """The tokenizer has no chat template, so a conversation cannot be rendered (callers may word it their way)."""


def check_messages(messages: Any) -> list[dict[str, str]]:
    """The conversation as plain {"role", "content"} dicts (roles system/user/assistant, "developer" read as
    system; text content), or a UserError naming the first bad message."""
    # The same reading as fine-tuning data's "messages" (one validator, one set of error messages).
    from desktop_app.engine.finetune.data import _messages

    return _messages(list(messages) if isinstance(messages, tuple) else messages, "conversation")


def encode_messages(tokenizer: Any, messages: Sequence[Mapping[str, str]]) -> list[int]:
    """Token ids of a conversation (system/user/assistant messages, in order) rendered by the tokenizer's chat
    template with the assistant's turn opened (add_generation_prompt), ready for the model's reply.

    The one renderer of conversations: the Generate tab's chat, `generate --chat` and the server's
    /v1/chat/completions all come here. It renders what it is given; fitting a long conversation into the
    model's context is fit_messages' job. The rendered text already holds the template's special tokens,
    so the tokenizer adds none (as apply_chat_template(tokenize=True) does).
    """
    conversation = check_messages(messages)
    if not getattr(tokenizer, "chat_template", None):
        raise NoChatTemplateError("this model's tokenizer has no chat template, so chat mode cannot be used; "
                                  "turn chat mode off to continue the prompt as plain text")
    try:
        text = tokenizer.apply_chat_template(conversation, tokenize=False, add_generation_prompt=True)
    except Exception as exc:  # the template itself refused (e.g. roles must alternate)
        raise UserError(f"the model's chat template refused this conversation: {exc}") from None
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if not ids:
        raise UserError("the conversation renders to no tokens")
    return [int(i) for i in ids]


def fit_messages(tokenizer: Any, messages: Sequence[Mapping[str, str]], context: int | None, *,
                 reply_tokens: int = 0) -> tuple[list[dict[str, str]], int]:
    """The newest part of a conversation whose rendering fits the model's context with room for the reply.

    Over-long conversations lose their OLDEST non-system turns (a user message with the replies after it, so
    what is kept still starts with a user turn) until the rendered ids leave min(reply_tokens, context // 2)
    tokens free (at least 1). Cutting the ids instead, as plain prompts are cut, would cut the system prompt
    and the template's markup. System messages and the newest message are always kept: a UserError says so
    when even they do not fit. Returns (kept messages, how many were dropped) so the caller can say so.
    """
    kept = check_messages(messages)
    if not context:
        return kept, 0
    room = max(1, min(reply_tokens, context // 2))
    dropped = 0
    # One render per dropped message: conversations that fit a context are short, so linear is fine.
    while (length := len(encode_messages(tokenizer, kept))) > context - room:
        turns = [i for i, m in enumerate(kept) if m["role"] != "system"]
        if len(turns) <= 1:
            raise UserError(f"the conversation does not fit the model's context: the system prompt and the last "
                            f"message take {length} tokens, the context holds {context} and {room} are kept for "
                            "the reply; shorten them (or lower the new-token limit)")
        # The oldest turn with its replies up to the next user message (never the newest message), so the
        # kept part opens with a user message as templates expect.
        end = 1
        while end < len(turns) - 1 and kept[turns[end]]["role"] != "user":
            end += 1
        for i in reversed(turns[:end]):
            del kept[i]
        dropped += end
    return kept, dropped


def encode_prompt(tokenizer: Any, prompt: str | Sequence[Mapping[str, str]], *, chat: bool = False) -> list[int]:
    """Token ids of the prompt. Chat mode renders it with the chat template (encode_messages): a string as one
    user turn, or a whole conversation (a list of {"role", "content"} messages; stream_text takes one as a
    one-item list of prompts, `[messages]`). Plain mode takes a string only."""
    if chat:
        return encode_messages(tokenizer, [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt)
    if not isinstance(prompt, str):
        raise UserError("a conversation (a list of messages) needs chat mode: turn chat mode on")
    ids = tokenizer(prompt)["input_ids"]
    if not ids:
        start = tokenizer.bos_token_id if tokenizer.bos_token_id is not None else tokenizer.eos_token_id
        if start is None:
            raise UserError("the prompt is empty and the tokenizer has no start token: type a prompt")
        ids = [int(start)]
    return [int(i) for i in ids]


def stop_token_ids(model: Any, tokenizer: Any, *, chat: bool = False) -> set[int]:
    """Ids that end a sample (finish_reason "eos"): the tokenizer's and the model's end-of-sequence ids,
    plus the end-of-turn token in chat mode."""
    ids: set[int] = set()
    candidates: list[Any] = [tokenizer.eos_token_id]
    gen_cfg = getattr(model, "generation_config", None)
    candidates.append(getattr(gen_cfg, "eos_token_id", None))
    candidates.append(getattr(model.config, "eos_token_id", None))
    for c in candidates:
        if isinstance(c, int):
            ids.add(c)
        elif isinstance(c, (list, tuple)):
            ids.update(int(x) for x in c if isinstance(x, int))
    if chat:
        for token in ("<|end|>", "<|im_end|>", "<|eot_id|>"):
            tid = tokenizer.convert_tokens_to_ids(token)
            if isinstance(tid, int) and tid != tokenizer.unk_token_id and tid >= 0:
                ids.add(tid)
    return ids


def _decoder(tokenizer: Any) -> Any:
    """ids -> text through the Rust tokenizer directly (the Python wrapper adds per-call overhead)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        return lambda ids: backend.decode(list(ids), skip_special_tokens=True)
    return lambda ids: tokenizer.decode(list(ids), skip_special_tokens=True)


# ----------------------------------------------------------------------------------------------------
# The decode loop


def stream_text(loaded: LoadedModel, prompt: str | Sequence[str], spec: GenerateSpec,
                stop_event: Any = None, *, threads: int | str | None = "auto",
                backend: str = "auto") -> Iterator[TextDelta | GenerationStats]:
    """Generate `spec.samples` completions of `prompt`, yielding text as it comes.

    Yields TextDelta(sample, text) pieces (never half a character or part of a stop string) and, when
    a sample ends, its GenerationStats (full text, generated token ids incl. a final EOS id, TTFT,
    tokens/s, finish_reason length|stop|eos|cancelled). `prompt` may also be a list of prompts: each
    gets `spec.samples` rows, numbered prompt-major (sample = prompt_index * samples + k).
    With spec.num_beams > 1 it runs beam search (beam_search.py) instead: samples = the best beams, best
    first, each yielded whole (one TextDelta, then its GenerationStats) when the search ends.
    `stop_event` (a threading.Event) is checked before every token. `threads`: torch threads while
    decoding ("auto" = decode_threads(), None = leave unchanged, or a number). `backend`: auto|lean|hf.
    """
    t0 = time.perf_counter()
    spec.check()
    model, tokenizer = loaded.model, loaded.tokenizer
    prompts = [prompt] if isinstance(prompt, str) else list(prompt)
    if not prompts:
        raise UserError("no prompt given")
    encoded = [encode_prompt(tokenizer, p, chat=spec.chat) for p in prompts]
    vocab = getattr(model.config, "vocab_size", None)
    if isinstance(vocab, int) and any(i >= vocab for ids in encoded for i in ids):
        raise UserError(f"the prompt uses tokens the model does not know (its vocabulary has {vocab} tokens, "
                        "the tokenizer more): the tokenizer does not belong to this model")
    ctx = context_length(model)
    if ctx:
        # Keep the end of an over-long prompt: the model cannot attend past its context.
        encoded = [r[-(ctx - 1):] if len(r) > ctx - 1 else r for r in encoded]
    longest = max(len(r) for r in encoded)
    budget = spec.max_new_tokens if not ctx else max(1, min(spec.max_new_tokens, ctx - longest))
    if spec.num_beams > 1:  # beam search: its own loop (beam_search.py); the text comes when the search ends
        n_threads = decode_threads(model, len(encoded) * spec.num_beams) if threads == "auto" else threads
        with torch_threads(n_threads), short_gil_switch():  # type: ignore[arg-type]
            yield from stream_beams(model, tokenizer, encoded, budget, spec, stop_event, backend, t0,
                                    _decoder(tokenizer), stop_token_ids(model, tokenizer, chat=spec.chat))
        return
    tuner, n_threads = _thread_tuner(model, len(encoded) * spec.samples) if threads == "auto" else (None, threads)
    try:
        with torch_threads(n_threads), short_gil_switch():  # type: ignore[arg-type]
            yield from _decode(model, tokenizer, encoded, budget, spec, stop_event, backend, t0, tuner)
    finally:
        if tuner is not None:
            _TUNING[(count_parameters(model), len(encoded) * spec.samples)] = tuner.state()


# (parameters, rows) -> the last ThreadTuner state for that work: later calls continue from it.
_TUNING: dict[tuple[int, int], dict[str, int]] = {}


def _thread_tuner(model: Any, rows: int) -> tuple[ThreadTuner | None, int | None]:
    """The tuner for decoding `rows` rows with `model` on CPU (None on GPUs or one core), and the
    thread count to start with."""
    start = decode_threads(model, rows)
    cores = cpu_cores()
    if next(model.parameters()).device.type != "cpu" or cores < 2 or count_parameters(model) * rows < _TUNE_MIN_WORK:
        return None, start
    check = _quick_check(model)
    saved = _TUNING.get((count_parameters(model), rows))
    if saved is not None and {saved["current"], saved["other"]} == {1, cores}:
        tuner = ThreadTuner.resume(saved, quick_check=check)
    else:
        first = start or cores
        tuner = ThreadTuner(first, 1 if first > 1 else cores, quick_check=check)
    return tuner, tuner.threads


def _quick_check(model: Any) -> Any:
    """A small parallel op shaped like decoding (one row times the output matrix, memory-bound) for the
    tuner to time at 1 and at all threads before it risks real steps on more threads."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    if not isinstance(weight, torch.Tensor) or weight.dim() != 2:
        return None
    row = torch.zeros(1, weight.shape[1], dtype=weight.dtype, device=weight.device)

    def check() -> None:
        with torch.no_grad():
            F.linear(row, weight)

    return check


def _decode(model: Any, tokenizer: Any, prompts: list[list[int]], budget: int, spec: GenerateSpec,
            stop_event: Any, backend: str, t0: float,
            tuner: ThreadTuner | None = None) -> Iterator[TextDelta | GenerationStats]:
    rows = [ids for ids in prompts for _ in range(spec.samples)]  # prompt-major sample numbering
    n = len(rows)
    device = next(model.parameters()).device
    eos = stop_token_ids(model, tokenizer, chat=spec.chat)
    decode = _decoder(tokenizer)
    streams = [TextStream(decode, spec.stop, context_ids=r) for r in rows]
    generated: list[list[int]] = [[] for _ in rows]
    first_t: list[float] = [0.0] * n
    last_t: list[float] = [0.0] * n
    active = list(range(n))
    longest = max(len(r) for r in rows)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else next(iter(eos), 0)

    def stats(b: int, reason: str) -> GenerationStats:
        count = len(generated[b])
        ttft = (first_t[b] - t0) if count else (time.perf_counter() - t0)
        if count > 1 and last_t[b] > first_t[b]:
            rate = (count - 1) / (last_t[b] - first_t[b])
        else:
            rate = count / ttft if ttft > 0 else 0.0
        return GenerationStats(sample=b, text=streams[b].text, token_ids=list(generated[b]), ttft_ms=ttft * 1e3,
                               tokens_per_s=rate, finish_reason=reason)

    with torch.inference_mode():
        # Prefill each distinct prompt once, then repeat its cache rows for its samples.
        ids = torch.tensor([[pad] * (longest - len(r)) + r for r in prompts], dtype=torch.long, device=device)
        mask = None
        if any(len(r) != longest for r in prompts):
            mask = torch.tensor([[0] * (longest - len(r)) + [1] * len(r) for r in prompts], dtype=torch.long,
                                device=device)
        vocab = int(getattr(model.config, "vocab_size", 0) or 0)
        sampler = Sampler(temperature=spec.temperature, top_k=spec.top_k, top_p=spec.top_p, min_p=spec.min_p,
                          repetition_penalty=spec.repetition_penalty, seed=spec.seed, batch=n, vocab_size=vocab,
                          device=device)
        sampler.observe_prompt(rows)
        runner = make_runner(model, len(prompts), longest + budget, backend)
        logits = runner.prefill(ids, mask)
        if spec.samples > 1:
            runner.expand(spec.samples)
            logits = logits.repeat_interleave(spec.samples, dim=0)
    cancelled = False
    try:
        for step in range(budget):
            if stop_event is not None and stop_event.is_set():
                cancelled = True
                break
            with torch.inference_mode():
                next_ids = sampler(logits)
                chosen = next_ids.tolist()
            now = time.perf_counter()
            still: list[int] = []
            for b in active:
                token = chosen[b]
                generated[b].append(token)
                if len(generated[b]) == 1:
                    first_t[b] = now
                last_t[b] = now
                if token in eos:
                    piece = streams[b].finish()
                    if piece:
                        yield TextDelta(sample=b, text=piece)
                    yield stats(b, "eos")
                    continue
                piece = streams[b].push(token)
                if piece:
                    yield TextDelta(sample=b, text=piece)
                if streams[b].stopped:
                    yield stats(b, "stop")
                    continue
                still.append(b)
            active = still
            if not active or step == budget - 1:
                break
            with torch.inference_mode():
                if tuner is None:
                    logits = runner.step(next_ids)
                else:
                    tuner.apply()
                    t_step = time.perf_counter()
                    logits = runner.step(next_ids)
                    tuner.record(time.perf_counter() - t_step)
        reason = "cancelled" if cancelled else "length"
        for b in active:
            piece = streams[b].finish()
            if piece:
                yield TextDelta(sample=b, text=piece)
            yield stats(b, reason)
        active = []
    finally:
        del runner  # free the KV cache promptly even when the consumer abandons the stream
