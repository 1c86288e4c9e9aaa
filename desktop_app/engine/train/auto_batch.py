"""The largest micro-batch that fits in memory (TrainSpec.auto_micro_batch); accumulation keeps the batch.

Only divisors of a process's rows per step are candidates, so micro x accumulation is exactly the batch and the
maths of a step do not change. On CUDA the answer is searched (a forward and backward per candidate, an
out-of-memory error meaning "too big"); on the CPU a memory model decides, since a CPU out-of-memory is the
operating system killing the process, not an exception to catch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from desktop_app.engine.generate.prompts import context_length
from desktop_app.engine.model.sizing import estimate_memory

if TYPE_CHECKING:
    from desktop_app.engine.train.distributed import DistContext
    from desktop_app.engine.train.setup import Parts

# Share of the free memory a run may plan to use: the estimate is about +-40% (sizing.estimate_memory), and the
# allocator, the window and the rest of the machine need room too.
CPU_MEMORY_SHARE = 0.6


def divisors(n: int) -> list[int]:
    """The divisors of n, largest first."""
    return sorted({d for i in range(1, int(n ** 0.5) + 1) if n % i == 0 for d in (i, n // i)}, reverse=True)


def largest_fitting(rows: int, fits: Callable[[int], bool]) -> int:
    """The largest divisor m of `rows` with fits(m), by binary search over the divisors (fits is assumed
    monotone: what fits at m fits below it). 1 when nothing larger fits (the loop's own OOM handling says the
    rest)."""
    options = divisors(rows)[::-1]  # ascending
    lo, hi = 0, len(options) - 1  # options[lo] is assumed to fit; search the largest that does
    if fits(options[hi]):
        return options[hi]
    hi -= 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(options[mid]):
            lo = mid
        else:
            hi = mid - 1
    return options[lo]


def cpu_micro_batch(rows: int, *, fixed_bytes: float, bytes_per_row: float, available_bytes: float,
                    processes: int = 1) -> tuple[int, str]:
    """(micro-batch, why) from the memory model: weights, gradients and optimizer state (`fixed_bytes`, this
    process's share) plus activations of `bytes_per_row` per sequence within CPU_MEMORY_SHARE of the free memory,
    which `processes` processes on this machine share."""
    budget = available_bytes * CPU_MEMORY_SHARE / max(1, processes) - fixed_bytes
    micro = largest_fitting(rows, lambda m: m * bytes_per_row <= budget)
    gib = 1 << 30
    why = (f"auto micro-batch {micro} of {rows} (memory model: {fixed_bytes / gib:.2f} GiB of weights, gradients and "
           f"optimizer state + {bytes_per_row / gib:.3f} GiB of activations per sequence, within "
           f"{CPU_MEMORY_SHARE:.0%} of {available_bytes / gib:.1f} GiB free"
           + (f" shared by {processes} processes" if processes > 1 else "") + ")")
    if micro == 1 and bytes_per_row > budget:
        why += "; even one sequence may not fit: expect swapping, or use a smaller model or context"
    return micro, why


def estimate_cpu_bytes(model_spec: Any, model: Any, *, seq_len: int, precision: str, trainable_share: float,
                       shards: int) -> tuple[float, float]:
    """(fixed bytes of this process, activation bytes per sequence). With a ModelSpec the sizing model; without
    one (a base model of another family) a rough per-parameter rule."""
    if model_spec is not None:

        one = estimate_memory(model_spec, batch_size=1, seq_len=seq_len, precision=precision)
        fixed = one["weights"] + (one["gradients"] + one["optimizer"]) * trainable_share
        return fixed / shards, float(one["activations"])
    params = sum(p.numel() for p in model.parameters())
    hidden = int(getattr(getattr(model, "config", None), "hidden_size", 0) or 1024)
    layers = int(getattr(getattr(model, "config", None), "num_hidden_layers", 0) or 12)
    fixed = 4 * params * (1 + 3 * trainable_share)
    per_row = seq_len * layers * hidden * 34 * 4  # ~34 saved values per hidden unit per layer (fp32)
    return fixed / shards, float(per_row)


def search_micro_batch(rows: int, try_micro: Callable[[int], bool]) -> tuple[int, str]:
    """(micro-batch, why) by trying candidates (CUDA): try_micro(m) runs one forward and backward of m rows and
    returns False on out-of-memory."""
    tried: list[str] = []

    def fits(m: int) -> bool:
        ok = try_micro(m)
        tried.append(f"{m} {'fits' if ok else 'out of memory'}")
        return ok

    micro = largest_fitting(rows, fits)
    return micro, f"auto micro-batch {micro} of {rows} (tried: {', '.join(tried)})"


def choose_micro_batch(parts: Parts, dist: DistContext | None, rows: int, current: int,
                       precision: str) -> tuple[int, str]:
    """TrainSpec.auto_micro_batch for a run's parts: searched on CUDA (a trial step per candidate), a memory model
    elsewhere. `rows`: this process's rows per step; `current`: the micro-batch the run has now."""
    import torch

    from desktop_app.engine.devices import free_device_memory, is_out_of_memory  # lazy: torch
    from desktop_app.engine.train.sync import rows_for_rank  # lazy: torch

    ctx, model = parts.ctx, parts.model
    device, spec = ctx.device, ctx.train_spec
    if device.type != "cuda":
        import psutil


        total = sum(p.numel() for p in model.parameters())
        trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        seq_len = ctx.store.context_length if ctx.store is not None else (context_length(model) or 1024)
        fixed, per_row = estimate_cpu_bytes(ctx.model_spec, model, seq_len=seq_len, precision=precision,
                                            trainable_share=trainable / max(1, total),
                                            shards=dist.world if dist is not None and dist.fsdp else 1)
        return cpu_micro_batch(rows, fixed_bytes=fixed, bytes_per_row=per_row,
                               available_bytes=psutil.virtual_memory().available,
                               processes=dist.local_world if dist is not None else 1)
    if ctx.config.is_rl:
        return current, "auto micro-batch: not searched for rollout methods (their batches are made by the model)"
    state = parts.source.state_dict()
    batch, _ = parts.source.take(spec.batch_size)
    batch = rows_for_rank(dist, parts.objective, batch, source_shards=parts.source_shards, batch_size=spec.batch_size)
    parts.source.load_state_dict(state)  # the trial steps must not move the data order

    fell_back: list[str] = []

    def try_micro(m: int) -> bool:
        ok = True
        try:
            with torch.random.fork_rng(devices=[device]), parts.wrapped.no_sync(), ctx.autocast():
                piece = parts.objective.to_device(parts.objective.split(batch, m)[0], device)
                parts.wrapped.loss(piece)[0].backward()
        except Exception as exc:
            if not is_out_of_memory(exc):
                # the fast path's compilation or kernel failed: search again on transformers' modules (once)
                message = parts.fast.fall_back(exc) if parts.fast is not None else ""
                if not message:
                    raise
                fell_back.append(message)
                return try_micro(m)
            ok = False
        finally:
            parts.optimizer.zero_grad(set_to_none=True)
            free_device_memory(device)
        return dist.agree(ok, "searching the micro-batch") if dist is not None else ok

    micro, why = search_micro_batch(rows, try_micro)
    return micro, "; ".join([why, *fell_back])
