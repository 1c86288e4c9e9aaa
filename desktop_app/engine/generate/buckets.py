"""Batch and length buckets of the static decode path: the few fixed shapes its steps are captured at.

A CUDA graph replays one fixed shape. Decoding 13 rows runs the graph of the 16-row bucket (3 rows idle);
a step whose cache holds 300 columns attends over the 384-column bucket (masked past the real end). Few
buckets mean few captures (each costs a warm-up and some graph memory); fine ones waste less work per step.
Batch: powers of two up to 32, then steps of 1.5x-1.33x (48, 64, 96, 128, 192, 256): an idle row costs a
row of every matmul, cheap at small batch, and the big buckets are where rollouts live. Length: multiples
of 64 up to 256, then ~1.5x steps: attention over the cache is a small share of a step at these sizes, so
a bucket up to ~50% longer than needed costs little, and a 16-token prompt + 256 new tokens crosses 5.
"""

from __future__ import annotations

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 48, 64, 96, 128, 192, 256)
_LENGTH_STEP = 64


def batch_bucket(rows: int) -> int:
    """The smallest batch bucket holding `rows` rows (beyond the last bucket: a multiple of 64)."""
    if rows < 1:
        raise ValueError(f"a batch needs at least one row, got {rows}")
    for bucket in BATCH_BUCKETS:
        if rows <= bucket:
            return bucket
    return -(-rows // 64) * 64


def bucket_at_most(rows: int) -> int:
    """The largest batch bucket of at most `rows` rows (0 when not even one row fits)."""
    if rows < 1:
        return 0
    if rows > BATCH_BUCKETS[-1]:
        return rows // 64 * 64
    return max(b for b in BATCH_BUCKETS if b <= rows)


def length_buckets(max_len: int) -> list[int]:
    """Every length bucket up to `max_len` (the last one is max_len itself)."""
    out: list[int] = []
    size = _LENGTH_STEP
    while size < max_len:
        out.append(size)
        size = size + _LENGTH_STEP if size < 256 else _round_up(size * 3 // 2, _LENGTH_STEP)
    out.append(max_len)
    return out


def length_bucket(columns: int, max_len: int) -> int:
    """The smallest length bucket covering `columns` cache columns (never past `max_len`)."""
    if columns > max_len:
        raise ValueError(f"{columns} columns do not fit a cache of {max_len}")
    for size in length_buckets(max_len):
        if columns <= size:
            return size
    return max_len


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step
