"""Pretraining objective: next-token cross-entropy over windows of the token store."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from desktop_app.engine.data.batches import WindowBatchSource, eval_windows
from desktop_app.engine.model import fused_llama
from desktop_app.engine.model.training_forward import next_token_loss, uses_fused_loss
from desktop_app.engine.objectives.base import Objective, TrainContext


def bytes_per_token(manifest: dict[str, Any], split: str) -> float | None:
    """UTF-8 bytes per token of a split, from the dataset manifest (None when the split is empty)."""
    info = manifest.get("splits", {}).get(split, {})
    nbytes, ntok = info.get("bytes"), info.get("tokens")
    return float(nbytes) / float(ntok) if nbytes and ntok else None


def eos_id(tokenizer: Any, manifest: dict[str, Any]) -> int | None:
    """The id that ends each document: the manifest records it; else ask the tokenizer module."""
    recorded = manifest.get("tokenizer", {}).get("eos_id")
    if isinstance(recorded, int):
        return recorded
    if tokenizer is None:
        return None
    from desktop_app.engine.data.tokenization import eos_id as tokenizer_eos_id  # lazy: tokenizers

    return tokenizer_eos_id(tokenizer)


def mean_loss(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy. A plain llama in fp32 on CPU takes the fused forward (same numbers,
    3-8% faster steps here, no full logits tensor); on a GPU (or a fast path the loop chose) the hidden states go
    through the chunked output projection + loss (no full logits, let alone fp32 ones); anything else on the CPU
    transformers' forward + our CE (HF's labels path would copy and shift again; the float() keeps the softmax in
    fp32 under autocast)."""
    if uses_fused_loss(model, x.device):
        return next_token_loss(model, x, y)
    if fused_llama.usable(model, x.device):
        return fused_llama.causal_lm_loss(model, x, y)
    logits = model(input_ids=x, use_cache=False).logits
    return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))


class CausalLMObjective(Objective):
    """loss = mean cross-entropy of predicting token t+1 from tokens <= t, over full windows."""

    name = "causal_lm"

    def __init__(self) -> None:
        super().__init__()
        self._val: torch.Tensor | None = None
        self._bpt: float | None = None
        self._eos: int | None = None

    def setup(self, ctx: TrainContext, model: torch.nn.Module) -> None:
        spec = ctx.train_spec
        self._val = eval_windows(ctx.store, spec.eval_batches * spec.micro_batch)
        self._bpt = bytes_per_token(ctx.store.manifest, "val")
        self._eos = eos_id(ctx.tokenizer, ctx.store.manifest)

    def batch_source(self, ctx: TrainContext) -> WindowBatchSource:
        return WindowBatchSource(ctx.store, "train", seed=ctx.seed)

    def split(self, batch: torch.Tensor, micro_batch: int) -> list[torch.Tensor]:
        return list(batch.split(micro_batch))

    def to_device(self, micro: torch.Tensor, device: torch.device) -> torch.Tensor:
        return micro.to(device, non_blocking=True) if device.type != "cpu" else micro

    def loss(self, model: torch.nn.Module, micro: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        # micro: (B, T+1) int64 -> inputs (B, T), targets (B, T).
        x, y = micro[:, :-1], micro[:, 1:]
        return mean_loss(model, x, y), {}

    def tokens(self, micro: torch.Tensor) -> int:
        return micro.shape[0] * (micro.shape[1] - 1)

    @torch.no_grad()
    def evaluate(self, model: torch.nn.Module, ctx: TrainContext) -> dict[str, float]:
        if self._val is None or len(self._val) == 0:
            return {}
        total, count = 0.0, 0
        for micro in self._val.split(ctx.train_spec.micro_batch):
            micro = self.to_device(micro, ctx.device)
            x, y = micro[:, :-1], micro[:, 1:]
            with ctx.autocast():
                total += mean_loss(model, x, y).item() * y.numel()
            count += y.numel()
        val_loss = total / count
        out = {"val_loss": val_loss, "val_ppl": math.exp(min(val_loss, 80.0))}
        if self._bpt:
            # nats/token -> bits/token -> bits/byte: comparable across tokenizers.
            out["val_bpb"] = val_loss / math.log(2) / self._bpt
        return out

    @torch.no_grad()
    def samples(self, model: torch.nn.Module, ctx: TrainContext) -> list[tuple[str, str]]:
        spec = ctx.train_spec
        if not spec.sample_tokens or ctx.tokenizer is None or not hasattr(model, "generate"):
            return []
        out = []
        start = [self._eos] if self._eos is not None else []
        # Sampling must not move the training RNG (exact resume): fork it and seed the sampler.
        with torch.random.fork_rng(devices=[ctx.device.index or 0] if ctx.device.type == "cuda" else []):
            torch.manual_seed(ctx.seed)
            for prompt in spec.sample_prompts:
                ids = start + (ctx.tokenizer.encode(prompt, add_special_tokens=False).ids if prompt else [])
                if not ids:
                    ids = [0]
                input_ids = torch.tensor([ids], dtype=torch.long, device=ctx.device)
                room = max(1, ctx.store.context_length - len(ids))
                greedy = spec.sample_temperature <= 0  # the run config's sampling settings (TrainSpec)
                sampling = {} if greedy else {"temperature": spec.sample_temperature, "top_k": spec.sample_top_k}
                gen = model.generate(input_ids=input_ids, attention_mask=torch.ones_like(input_ids),
                                     max_new_tokens=min(spec.sample_tokens, room), do_sample=not greedy, **sampling,
                                     pad_token_id=self._eos if self._eos is not None else 0, eos_token_id=self._eos)
                new = gen[0, len(ids):].tolist()
                out.append((prompt, ctx.tokenizer.decode(new, skip_special_tokens=True)))
        return out
