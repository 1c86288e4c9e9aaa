"""AdamW with sensible parameter groups, and the learning-rate schedule (a pure function of the step).

The schedule is a pure function of (step, TrainSpec, scale) rather than a stateful torch scheduler,
so its "state" in a checkpoint is just the step and the rollback scale: nothing to drift on resume.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from torch import nn

from desktop_app.engine.errors import UserError
from desktop_app.engine.specs import TrainSpec


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Two AdamW groups: decayed matrices, and no decay for norms, biases and embeddings.

    Decaying norm gains pulls them toward 0 (not toward their init of 1) and decaying embeddings
    shrinks rare tokens' vectors; both hurt small models, so only the dense matrices decay.
    """
    embedding_ids = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    decay, no_decay = [], []
    decay_names, no_decay_names = [], []
    for name, p in model.named_parameters():  # named_parameters de-duplicates tied weights
        if not p.requires_grad:
            continue
        if p.ndim < 2 or id(p) in embedding_ids:
            no_decay.append(p)
            no_decay_names.append(name)
        else:
            decay.append(p)
            decay_names.append(name)
    return [
        {"params": decay, "weight_decay": weight_decay, "names": decay_names},
        {"params": no_decay, "weight_decay": 0.0, "names": no_decay_names},
    ]


def resolve_optimizer(requested: str, device: torch.device, *, quantized: bool = False) -> tuple[str, str]:
    """(optimizer kind, why) for TrainSpec.optimizer. "auto" is AdamW, except on a 4-bit (QLoRA) base: 8-bit
    AdamW there (paged on CUDA, where spikes of optimizer memory can spill to host memory instead of failing)."""
    if requested == "auto":
        if not quantized:
            return "adamw", "AdamW"
        if device.type == "cuda":
            return "paged_adamw8bit", "paged 8-bit AdamW (QLoRA default on CUDA)"
        return "adamw8bit", "8-bit AdamW (QLoRA default; paged AdamW needs CUDA)"
    if requested == "paged_adamw8bit" and device.type != "cuda":
        return "adamw8bit", "8-bit AdamW (paged AdamW needs CUDA; not paged here)"
    return requested, {"adamw": "AdamW", "adamw8bit": "8-bit AdamW"}.get(requested, requested)


def build_optimizer(model: nn.Module, spec: TrainSpec, device: torch.device | None = None, *,
                    kind: str = "adamw") -> torch.optim.Optimizer:
    """AdamW over the trainable parameters (decay groups as param_groups); kind adamw | adamw8bit |
    paged_adamw8bit (bitsandbytes; same update rule with 8-bit blockwise-quantized moments)."""

    groups = param_groups(model, spec.weight_decay)
    for g in groups:
        g.pop("names")  # AdamW would keep unknown keys in param_groups; keep its state JSON-clean
    groups = [g for g in groups if g["params"]]
    if not groups:
        raise UserError("nothing to train: every parameter of the model is frozen")
    device = device or next(model.parameters()).device
    if kind in ("adamw8bit", "paged_adamw8bit"):
        if device.type == "mps":
            raise UserError("8-bit AdamW (bitsandbytes) does not run on Apple GPUs (MPS): set optimizer to adamw")
        try:
            import bitsandbytes as bnb
        except ImportError as exc:
            raise UserError(f"8-bit AdamW needs bitsandbytes, which cannot be loaded here ({exc}); set optimizer to "
                            "adamw") from None
        cls = bnb.optim.PagedAdamW8bit if kind == "paged_adamw8bit" else bnb.optim.AdamW8bit
        return cls(groups, lr=spec.lr, betas=(spec.beta1, spec.beta2), eps=1e-8)
    kwargs: dict[str, Any] = {}
    if device.type in ("cuda", "cpu"):
        # One kernel over all parameters; same maths. On CPU the per-tensor loop cost ~2.6 ms per step
        # (4% of a 0.9M-preset step) against ~0.3 ms fused.
        kwargs["fused"] = True
    return torch.optim.AdamW(groups, lr=spec.lr, betas=(spec.beta1, spec.beta2), eps=1e-8, **kwargs)


def lr_at(step: int, spec: TrainSpec, scale: float = 1.0, time_share: float = 0.0) -> float:
    """Learning rate of optimizer step `step` (1-based: the first update is step 1).

    Linear warm-up from lr/warmup to lr over `warmup_steps`, then cosine / linear decay to
    lr * min_lr_ratio at the end of the run, or constant. The end is the last step, or the time limit when
    that comes first: `time_share` is the share of the time limit spent (0 without one), and the decay
    follows whichever is further on, as the progress bar does. `scale` is the rollback factor (halved after a
    non-finite step under the rollback policy).
    """
    peak = spec.lr * scale
    if spec.warmup_steps and step <= spec.warmup_steps:
        return peak * step / spec.warmup_steps
    if spec.schedule == "constant":
        return peak
    floor = peak * spec.min_lr_ratio
    span = max(1, spec.steps - spec.warmup_steps)
    progress = min(1.0, max(0.0, (step - spec.warmup_steps) / span, time_share))
    if spec.schedule == "linear":
        return peak - (peak - floor) * progress
    return floor + (peak - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


# --- optimizer state without pickle: tensors -> safetensors, the rest -> JSON -------------------------

def optimizer_state_to_flat(optimizer: torch.optim.Optimizer | dict[str, Any]
                            ) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Split `optimizer.state_dict()` (or such a dict) into flat tensors ("state.<i>.<key>") and JSON-safe metadata.

    Every tensor (exp_avg, exp_avg_sq and AdamW's 0-d `step` tensor) goes to safetensors bit-exact;
    plain Python values (param group hyperparameters) go to JSON. Nested dicts (bitsandbytes keeps its
    8-bit state under one key) become dotted names ("state.<i>.<key>.<subkey>").
    """
    sd = optimizer if isinstance(optimizer, dict) else optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    seen: set[int] = set()

    def put(idx: Any, key: str, value: Any) -> None:
        if isinstance(value, dict):
            for sub, v in value.items():
                put(idx, f"{key}.{sub}", v)
        elif isinstance(value, torch.Tensor):
            t = value.detach().to("cpu").contiguous()
            ptr = t.untyped_storage().data_ptr()
            if ptr in seen and t.numel():  # shared by several parameters (bitsandbytes' quantization maps):
                t = t.clone()  # safetensors stores each name's own copy
            seen.add(ptr)
            tensors[f"state.{idx}.{key}"] = t
        else:
            scalars.setdefault(str(idx), {})[key] = value

    for idx, entry in sd["state"].items():
        for key, value in entry.items():
            put(idx, key, value)
    meta = {"param_groups": sd["param_groups"], "scalars": scalars}
    return tensors, meta


def optimizer_state_from_flat(tensors: dict[str, torch.Tensor], meta: dict[str, Any]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}

    def put(entry: dict[str, Any], key: str, value: Any) -> None:
        *outer, last = key.split(".")
        for part in outer:
            entry = entry.setdefault(part, {})
        entry[last] = value

    for name, value in tensors.items():
        _, idx, key = name.split(".", 2)
        put(state.setdefault(int(idx), {}), key, value)
    for idx, entries in meta.get("scalars", {}).items():
        for key, value in entries.items():
            put(state.setdefault(int(idx), {}), key, value)
    groups = meta["param_groups"]
    for g in groups:  # JSON turned the betas tuple into a list
        if "betas" in g and isinstance(g["betas"], list):
            g["betas"] = tuple(g["betas"])
    return {"state": state, "param_groups": groups}
