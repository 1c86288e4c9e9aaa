"""The output projection and the loss as one chunked step, so no full logits tensor (let alone an fp32 one) exists.

A language model's last matmul makes a [rows, vocab] logits tensor: at batch 16 x 1024 and a 32k vocabulary that is
1 GiB in bf16 and 2 GiB once upcast to fp32 for the softmax, plus a gradient of the same size (measured on an H100:
the gpt2-small preset peaked at 22.8 GiB with the upcast, 16.0 without). Here the rows go through in chunks: each
chunk's logits live only while its loss and its gradients are computed.

- `linear_cross_entropy`: mean (or summed) cross-entropy. Its result ends the graph (the loss), so the gradients
  with respect to the hidden rows and the output matrix are computed in the forward, chunk by chunk, and the
  backward only scales them: the logits are made once.
- `linear_token_logps`: per-row log-probabilities of the targets (DPO's and the RL methods' sums, ratios and KL),
  optionally each row's entropy (a metric, no gradient). Their upstream gradient is a vector known only in the
  backward, so the backward makes each chunk's logits again (one more matmul, no stored logits).

Precision: the matmuls run in the compute dtype (the autocast dtype when autocast is on, else the inputs' dtype);
the softmax of each chunk runs in fp32. On the CPU in fp32 the cross-entropy is the very sequence of operations the
fused llama forward always used (fused_llama.py), so its numbers and speed do not move.

`chunk_kernel="compiled"` (CUDA, the compiled fast path) runs each chunk's softmax and gradient as one torch.compile'd
function, which inductor fuses into a reduction and one pointwise pass over the bf16 logits; `liger_cross_entropy`
calls Liger Kernel's fused linear cross-entropy (Triton) when it is installed.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
import torch.nn.functional as F

# Rows per chunk: ~64 MB of fp32 logits on the CPU (cache-friendly, measured with the fused llama forward); on a
# GPU ~128M logits (4096 rows at a 32k vocabulary: 256 MiB in bf16), big enough for full-speed matmuls.
_CPU_CHUNK_ELEMENTS = (64 << 20) // 4
_GPU_CHUNK_ELEMENTS = 1 << 27

CHUNK_KERNELS = ("eager", "compiled")


def chunk_rows(vocab: int, device: torch.device) -> int:
    """Rows of hidden states per chunk for a vocabulary of `vocab` on `device`."""
    budget = _GPU_CHUNK_ELEMENTS if device.type == "cuda" else _CPU_CHUNK_ELEMENTS
    return max(1, budget // max(1, vocab))


def compute_dtype(tensor: torch.Tensor) -> torch.dtype:
    """The dtype a matmul of `tensor` runs in here: the autocast dtype when autocast is on for its device."""
    kind = tensor.device.type
    if kind in ("cuda", "cpu") and torch.is_autocast_enabled(kind):
        return torch.get_autocast_dtype(kind)
    return tensor.dtype


def _no_autocast(device: torch.device) -> Any:
    # The casts are done by hand (compute dtype in, fp32 softmax), so autocast must not add its own.
    return torch.autocast(device.type, enabled=False) if device.type in ("cuda", "cpu") else contextlib.nullcontext()


# --- one chunk -----------------------------------------------------------------------------------------------

def _chunk_ce_eager(h: torch.Tensor, w: torch.Tensor, t: torch.Tensor, need_grad: bool
                    ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(summed negative log-likelihood in float64, d(sum)/d logits in h's dtype or None) of one chunk."""
    log_probs = torch.log_softmax((h @ w.t()).float(), dim=-1)
    nll = -log_probs.gather(1, t[:, None]).sum(dtype=torch.float64)
    if not need_grad:
        return nll, None
    # d(sum CE)/d logits = softmax - onehot
    probs = log_probs.exp_()
    probs[torch.arange(len(t), device=t.device), t] -= 1.0
    return nll, probs.to(h.dtype)


def _chunk_ce_fusable(h: torch.Tensor, w: torch.Tensor, t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    # Written for inductor: one reduction (logsumexp) and one pointwise pass from the logits to their gradient.
    logits = (h @ w.t()).float()
    lse = torch.logsumexp(logits, dim=-1)
    nll = (lse - logits.gather(1, t[:, None])[:, 0]).sum()
    grad = torch.exp(logits - lse[:, None]) - F.one_hot(t, logits.shape[1]).to(logits.dtype)
    return nll.double(), grad.to(h.dtype)


@functools.lru_cache(maxsize=1)
def _compiled_chunk() -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    return torch.compile(_chunk_ce_fusable, dynamic=None)


class _CrossEntropyPlan(NamedTuple):
    """How _LinearCrossEntropy goes through its rows (one argument of its forward: no gradient flows to it)."""

    chunk: int  # rows per chunk
    dtype: torch.dtype  # the matmuls' compute dtype
    total_rows: int  # the summed loss is divided by this: the rows for a mean, 1 for a sum
    kernel: str  # each chunk's softmax and gradient: "eager" or "compiled"


class _LinearCrossEntropy(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                plan: _CrossEntropyPlan) -> torch.Tensor:
        chunk, dtype, total_rows, kernel = plan
        rows = hidden.shape[0]
        need_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        with _no_autocast(hidden.device):
            h_all, w = hidden.to(dtype), weight.to(dtype)
            grad_hidden = torch.empty_like(h_all) if need_grad else None
            # fp32 accumulation of the output matrix's gradient (the compute dtype's when it is fp32 already)
            grad_weight = torch.zeros_like(weight, dtype=torch.float32) if need_grad else None
            total = hidden.new_zeros((), dtype=torch.float64)
            for start in range(0, rows, chunk):
                h, t = h_all[start:start + chunk], targets[start:start + chunk]
                if kernel == "compiled" and need_grad:
                    nll, g = _compiled_chunk()(h, w, t)
                else:
                    nll, g = _chunk_ce_eager(h, w, t, need_grad)
                total += nll
                if g is not None:
                    torch.mm(g, w, out=grad_hidden[start:start + chunk])  # type: ignore[index]
                    if grad_weight.dtype == g.dtype:  # type: ignore[union-attr]
                        grad_weight.addmm_(g.t(), h)  # type: ignore[union-attr]
                    else:
                        grad_weight += (g.t() @ h).float()  # type: ignore[operator]
        ctx.total_rows, ctx.dtypes = total_rows, (hidden.dtype, weight.dtype)
        ctx.save_for_backward(grad_hidden, grad_weight)
        return (total / total_rows).to(hidden.dtype)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Any, ...]:
        grad_hidden, grad_weight = ctx.saved_tensors
        hidden_dtype, weight_dtype = ctx.dtypes
        scale = grad / ctx.total_rows
        return ((grad_hidden * scale.to(grad_hidden.dtype)).to(hidden_dtype),
                (grad_weight * scale.to(grad_weight.dtype)).to(weight_dtype), None, None)


def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, *,
                         reduction: str = "mean", chunk: int | None = None, chunk_kernel: str = "eager"
                         ) -> torch.Tensor:
    """Cross-entropy of logits = hidden @ weight.T against targets, without holding all logits.

    hidden [rows, d], weight [vocab, d], targets [rows] (int64, every one a real id: select the loss-bearing rows
    first). reduction "mean" or "sum". The result has hidden's dtype. The gradients are computed chunk by chunk in
    the forward: use the result as (a scaled part of) the loss, not as an input to more computation."""
    if reduction not in ("mean", "sum"):
        raise ValueError(f"reduction must be 'mean' or 'sum', not {reduction!r}")
    if chunk_kernel not in CHUNK_KERNELS:
        raise ValueError(f"chunk_kernel must be one of {CHUNK_KERNELS}, not {chunk_kernel!r}")
    rows = hidden.shape[0]
    if rows == 0:
        return hidden.sum() * 0.0 + weight.sum() * 0.0
    chunk = chunk or chunk_rows(weight.shape[0], hidden.device)
    plan = _CrossEntropyPlan(chunk, compute_dtype(hidden), rows if reduction == "mean" else 1, chunk_kernel)
    return _LinearCrossEntropy.apply(hidden, weight, targets, plan)


# --- per-row log-probabilities ----------------------------------------------------------------------------------

class _LogpsPlan(NamedTuple):
    """How _LinearTokenLogps goes through its rows (one argument of its forward: no gradient flows to it)."""

    chunk: int  # rows per chunk
    dtype: torch.dtype  # the matmuls' compute dtype
    with_entropy: bool  # each row's entropy too (a metric, no gradient)


class _LinearTokenLogps(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
                plan: _LogpsPlan) -> tuple[torch.Tensor, torch.Tensor]:
        chunk, dtype, with_entropy = plan
        rows = hidden.shape[0]
        logps = torch.empty(rows, dtype=torch.float32, device=hidden.device)
        lse_all = torch.empty(rows, dtype=torch.float32, device=hidden.device)
        entropy = torch.zeros(rows if with_entropy else 0, dtype=torch.float32, device=hidden.device)
        with _no_autocast(hidden.device):
            w = weight.to(dtype)
            for start in range(0, rows, chunk):
                h, t = hidden[start:start + chunk].to(dtype), targets[start:start + chunk]
                logits = (h @ w.t()).float()
                lse = torch.logsumexp(logits, dim=-1)
                lse_all[start:start + chunk] = lse
                logps[start:start + chunk] = logits.gather(1, t[:, None])[:, 0] - lse
                if with_entropy:  # H = lse - sum p * logit
                    probs = torch.exp(logits - lse[:, None])
                    entropy[start:start + chunk] = lse - (probs * logits).sum(-1)
        ctx.chunk, ctx.dtype = chunk, dtype
        ctx.save_for_backward(hidden, weight, targets, lse_all)
        ctx.mark_non_differentiable(entropy)
        return logps, entropy

    @staticmethod
    def backward(ctx: Any, grad_logps: torch.Tensor, _grad_entropy: torch.Tensor) -> tuple[Any, ...]:
        hidden, weight, targets, lse_all = ctx.saved_tensors
        chunk, dtype = ctx.chunk, ctx.dtype
        need_h, need_w = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        grad_hidden = torch.empty_like(hidden) if need_h else None
        grad_weight = torch.zeros_like(weight, dtype=torch.float32) if need_w else None
        with _no_autocast(hidden.device):
            w = weight.to(dtype)
            for start in range(0, hidden.shape[0], chunk):
                h, t = hidden[start:start + chunk].to(dtype), targets[start:start + chunk]
                g = grad_logps[start:start + chunk].float()
                # d logp_t / d logits = onehot(t) - softmax
                probs = torch.exp((h @ w.t()).float() - lse_all[start:start + chunk, None])
                grad_logits = probs.mul_(-g[:, None])
                grad_logits[torch.arange(len(t), device=t.device), t] += g
                grad_logits = grad_logits.to(dtype)
                if grad_hidden is not None:
                    grad_hidden[start:start + chunk] = (grad_logits @ w).to(hidden.dtype)
                if grad_weight is not None:
                    grad_weight += (grad_logits.t() @ h).float()
        return grad_hidden, grad_weight.to(weight.dtype) if grad_weight is not None else None, None, None


def linear_token_logps(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, *,
                       with_entropy: bool = False, chunk: int | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log softmax(hidden @ weight.T)[row, target] for every row ([rows] fp32, differentiable), and with_entropy each
    row's entropy ([rows] fp32, no gradient; None otherwise), without holding all logits."""
    if hidden.shape[0] == 0:
        empty = hidden.new_zeros(0, dtype=torch.float32) + (hidden.sum() + weight.sum()).float() * 0.0
        return empty, (empty.detach() if with_entropy else None)
    chunk = chunk or chunk_rows(weight.shape[0], hidden.device)
    logps, entropy = _LinearTokenLogps.apply(hidden, weight, targets, _LogpsPlan(chunk, compute_dtype(hidden),
                                                                                 with_entropy))
    return logps, (entropy if with_entropy else None)


# --- Liger Kernel ------------------------------------------------------------------------------------------------

def liger_available() -> bool:
    """Liger Kernel (the optional `gpu` extra) importable, with a CUDA device to run its Triton kernels on."""
    if not torch.cuda.is_available():
        return False
    try:
        import liger_kernel.transformers.functional  # noqa: F401
    except Exception:  # ImportError, or triton failing to initialise
        return False
    return True


def liger_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, *,
                        reduction: str = "mean") -> torch.Tensor:
    """Liger's fused linear cross-entropy (Triton; CUDA only), with the same contract as linear_cross_entropy.

    Its matmuls would otherwise run under the caller's autocast with fp32 accumulators it did not expect, so the
    inputs are cast to the compute dtype here and autocast is off inside."""
    from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

    dtype = compute_dtype(hidden)
    with _no_autocast(hidden.device):
        loss = liger_fused_linear_cross_entropy(hidden.to(dtype), weight.to(dtype), targets, reduction=reduction)
    return loss.to(hidden.dtype)
