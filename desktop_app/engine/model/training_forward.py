"""From token ids to a training loss or log-probabilities, without a full logits tensor.

The objectives (causal LM, SFT, DPO, the RL methods) call `next_token_loss` and `next_token_logps`. Both take the last
hidden states and put only the rows that count through the output projection, chunk by chunk (fused_loss.py). The
hidden states come from the fast path the loop chose on this device (`TrainingModel`, made by fast_path.py: a fused
forward, compiled or with Liger's kernels) or, for a plain model, from transformers' own decoder.

`TrainingModel` is what the loop hands an objective's loss on a GPU: the model with its chosen kernels, and a way
back (`fall_back`) to transformers' own modules when compilation or a kernel fails. Everything else about the model
(its config, generate, adapters) is the wrapped model's.

Models whose output layer is not a plain matrix (a LoRA or 4-bit output layer, logit soft-capping or scaling,
weights sharded by FSDP outside their module's forward) keep transformers' full forward and a loss on the rows that
count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F

from desktop_app.engine.errors import UserError
from desktop_app.engine.model.fast_forward import (
    FastForward,
    block_causal_mask,
    document_block_mask,
    inner_model,
)
from desktop_app.engine.model.fused_loss import (
    liger_cross_entropy,
    linear_cross_entropy,
    linear_token_logps,
)

if TYPE_CHECKING:
    from desktop_app.engine.protocols import CausalLM

MODES = ("compile", "liger", "eager")
_LOGIT_TRANSFORMS = ("final_logit_softcapping", "logit_scale", "logits_scaling", "output_multiplier_scale")


@dataclass(frozen=True)
class Kernels:
    """How a TrainingModel computes: its mode, and what that means piece by piece."""

    mode: str  # compile | liger | eager
    fused_forward: bool  # fast_forward.FastForward (else transformers' own modules)
    loss: str  # compiled | liger | chunked: the kernel of the chunked output projection + loss
    flex: bool  # packed rows through FlexAttention (else a dense block-causal mask)


EAGER = Kernels("eager", fused_forward=False, loss="chunked", flex=False)


class _DecoderBody(torch.nn.Module):
    """transformers' own decoder as a hidden-state function (for models without a fused forward, and the fallback)."""

    def __init__(self, model: Any):
        super().__init__()
        self.inner = inner_model(model)

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor | None = None,
                dense_mask: torch.Tensor | None = None, block_mask: Any = None) -> torch.Tensor:
        kwargs: dict[str, Any] = {}
        if position_ids is not None:
            kwargs = {"position_ids": position_ids,
                      "attention_mask": dense_mask if dense_mask is not None else block_causal_mask(position_ids)}
        return self.inner.base_model(input_ids=input_ids, use_cache=False, **kwargs).last_hidden_state


class TrainingModel(torch.nn.Module):
    """A model with the kernels the loop chose for training it. Calling it calls the model; `hidden` runs the chosen
    forward. The parameters are the model's own."""

    def __init__(self, model: Any, kernels: Kernels):
        super().__init__()
        self.model = model
        self.kernels = kernels
        self._build()

    def _build(self) -> None:
        k = self.kernels
        body: torch.nn.Module = FastForward(self.model, "liger" if k.mode == "liger" else "torch") \
            if k.fused_forward else _DecoderBody(self.model)
        run = torch.compile(body) if k.mode == "compile" else body
        # Not registered as submodules: they share the model's modules, which `self.model` registers once.
        object.__setattr__(self, "_run", run)

    def hidden(self, input_ids: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The normed last hidden states [B, T, d]; packed rows (position_ids restarting at each example) never
        attend across examples."""
        kwargs: dict[str, Any] = {}
        if position_ids is not None:
            if self.kernels.flex and not self._attention_dropout():
                kwargs["block_mask"] = document_block_mask(position_ids)
            else:
                kwargs["dense_mask"] = block_causal_mask(position_ids)
        if self.kernels.fused_forward:
            kind = input_ids.device.type
            if kind in ("cuda", "cpu") and torch.is_autocast_enabled(kind):  # the compiled graph gets a constant
                kwargs["dtype"] = torch.get_autocast_dtype(kind)
        return self._run(input_ids, position_ids, **kwargs)  # type: ignore[operator]

    def _attention_dropout(self) -> bool:
        cfg = inner_model(self.model).config  # FlexAttention has no dropout
        return bool(self.model.training and (getattr(cfg, "attention_dropout", 0.0) or getattr(cfg, "attn_pdrop", 0.0)))

    def fall_back(self, exc: BaseException) -> str:
        """Switch to transformers' own modules after `exc` (a failed compilation or kernel); returns the message
        to log, or "" when already there (nothing left to fall back to) or `exc` is the user's to fix."""
        if self.kernels == EAGER or isinstance(exc, UserError):
            return ""
        old = self.kernels.mode
        first = (str(exc).strip().splitlines() or [""])[0][:300]
        self.kernels = EAGER
        self._build()
        return (f"the {old} fast path failed ({type(exc).__name__}: {first}); training continues with transformers' "
                "own modules and the chunked loss (kernels eager), which are slower")

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self.model(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            model = self.__dict__.get("_modules", {}).get("model")
            if model is None:
                raise
            return getattr(model, name)


# --- what the objectives call -------------------------------------------------------------------------------------

def uses_fused_loss(model: CausalLM, device: torch.device) -> bool:
    """Whether the objectives train `model` through hidden states and the chunked loss: on CUDA, and wherever the loop
    chose a fast path. (The CPU keeps its own exact paths: fused_llama.py for a plain fp32 llama, else the module
    forward, so its numbers stay those of earlier versions.)"""
    return isinstance(model, TrainingModel) or device.type == "cuda"


def output_weight(model: CausalLM) -> torch.Tensor | None:
    """The output projection's [vocab, d] matrix when the logits are exactly hidden @ it.T, else None."""
    inner = inner_model(model.model if isinstance(model, TrainingModel) else model)
    cfg = getattr(inner, "config", None)
    if any(getattr(cfg, name, None) not in (None, 1, 1.0) for name in _LOGIT_TRANSFORMS):
        return None
    head = inner.get_output_embeddings() if hasattr(inner, "get_output_embeddings") else None
    if type(head) is not torch.nn.Linear or head.bias is not None:
        return None
    if hasattr(head.weight, "to_local"):  # FSDP: a shard, whole only inside the module's own forward
        return None
    return head.weight


def hidden_states(model: CausalLM, input_ids: torch.Tensor, position_ids: torch.Tensor | None = None) -> torch.Tensor:
    """The normed last hidden states [B, T, d] (packed rows isolated by their position ids)."""
    if isinstance(model, TrainingModel):
        return model.hidden(input_ids, position_ids)
    return _DecoderBody(model)(input_ids, position_ids)


def _logits(model: Any, input_ids: torch.Tensor, position_ids: torch.Tensor | None) -> torch.Tensor:
    kwargs: dict[str, Any] = {}
    if position_ids is not None:
        kwargs = {"position_ids": position_ids, "attention_mask": block_causal_mask(position_ids)}
    target = model.model if isinstance(model, TrainingModel) else model
    return target(input_ids=input_ids, use_cache=False, **kwargs).logits


def _rows(t: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    return t[mask] if mask is not None else t.reshape(-1, *t.shape[2:])


def next_token_loss(model: CausalLM, inputs: torch.Tensor, targets: torch.Tensor, *, mask: torch.Tensor | None = None,
                    position_ids: torch.Tensor | None = None, reduction: str = "mean") -> torch.Tensor:
    """Cross-entropy of predicting targets [B, T] from inputs [B, T] at the positions `mask` selects (all when None),
    mean or summed over them; the softmax runs in fp32 on one chunk of rows at a time."""
    weight = output_weight(model)
    if weight is None:
        logits = _rows(_logits(model, inputs, position_ids), mask)
        return F.cross_entropy(logits.float(), _rows(targets, mask), reduction=reduction)
    rows, wanted = _rows(hidden_states(model, inputs, position_ids), mask), _rows(targets, mask)
    kind = model.kernels.loss if isinstance(model, TrainingModel) else "chunked"
    if kind == "liger":
        return liger_cross_entropy(rows, weight, wanted, reduction=reduction)
    return linear_cross_entropy(rows, weight, wanted, reduction=reduction,
                                chunk_kernel="compiled" if kind == "compiled" else "eager")


def next_token_logps(model: CausalLM, inputs: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor, *,
                     position_ids: torch.Tensor | None = None, with_entropy: bool = False
                     ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log p(target | inputs so far) at the positions `mask` selects, in row-major order ([n] fp32, differentiable),
    and with_entropy each position's entropy ([n] fp32, no gradient)."""
    weight = output_weight(model)
    if weight is None:
        log_probs = torch.log_softmax(_logits(model, inputs, position_ids)[mask].float(), dim=-1)
        picked = log_probs.gather(1, targets[mask][:, None])[:, 0]
        entropy = -(log_probs.exp() * log_probs).sum(-1).detach() if with_entropy else None
        return picked, entropy
    rows = hidden_states(model, inputs, position_ids)[mask]
    return linear_token_logps(rows, weight, targets[mask], with_entropy=with_entropy)
