"""The largest micro-batch that fits in memory (TrainSpec.auto_micro_batch); accumulation keeps the batch.

Only divisors of a process's rows per step are candidates, so micro x accumulation is exactly the batch and the
maths of a step do not change. On CUDA the answer is searched (a forward and backward per candidate, an
out-of-memory error meaning "too big"); on the CPU a memory model decides, since a CPU out-of-memory is the
operating system killing the process, not an exception to catch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
        from desktop_app.engine.model.sizing import estimate_memory

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
