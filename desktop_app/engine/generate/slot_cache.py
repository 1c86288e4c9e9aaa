"""The KV cache of the rows decoding together: requests join and leave between two decode steps.

The engine's lean runners (generate/runners.py) decode a fixed batch over one preallocated cache
[layers, batch, kv_heads, max_len, head_dim] in which every row's tokens end at the same column
(`length`): shorter prompts are padded on the left and masked out through `valid`, and each row keeps
its own position counter. That layout fits rows that start at different times just as well. A new
request's prompt is prefilled on its own (a small runner) and copied in so that it ends at the
current column, everything left of it marked invalid, which is what left padding does. So one
runner sized for `capacity` rows serves every request: before each step we point it at the first `n`
rows (narrowed views), and when a row leaves, the last row moves into its place.

Costs: a join copies the new prompt's cache (small); a leave copies one row; when the shared column
reaches the end of the buffer (2 x the model's context), every row is shifted left past the columns
no live row uses, one copy of the live cache every ~context steps.

`GraphSlotCache` keeps this layout on the engine's static decoder (CUDA graphs per batch and length
bucket): the batcher's choice on CUDA.

`FixedBatch` is the fallback for models the lean runners do not cover (transformers' own forward and
DynamicCache): requests that arrive together still decode as one batch, later ones wait for the next.

It works on the runner through the runner's own methods (`cache_view`, `use_rows`; the static decoder's
`row_state`, `feed`, `logits_step`); tests/server check that rows decoded this way give the same greedy
tokens as the engine's own stream_text.
"""

from __future__ import annotations

from typing import Any

import torch

from desktop_app.engine.generate.buckets import batch_bucket
from desktop_app.engine.generate.prompts import context_length
from desktop_app.engine.generate.runners import lean_supported, left_padded, make_runner
from desktop_app.engine.generate.static_cache import StaticDecoder
from desktop_app.engine.generate.static_models import static_supported


class SlotCache:
    """Continuous batching over one lean runner. Rows 0..n-1 are live; the caller keeps its own
    per-row lists in the same order and applies the moves `remove` returns."""

    continuous = True

    def __init__(self, model: Any, capacity: int, pad_id: int):
        context = context_length(model)
        assert context is not None and lean_supported(model)
        self.model, self.capacity, self.pad_id = model, capacity, pad_id
        self.context = context
        # A live row holds at most `context` tokens, so at the buffer's end there is always a free
        # stretch of >= context columns on the left to shift into.
        self.columns = 2 * context
        self.device = next(model.parameters()).device
        self.runner: Any = make_runner(model, capacity, self.columns, backend="lean")
        self.valid = torch.ones(capacity, self.columns, dtype=torch.bool, device=self.device)
        self.positions = torch.zeros(capacity, dtype=torch.long, device=self.device)
        self.starts = [0] * capacity  # first column holding a real token, per row
        self.n = 0
        self.length = 0  # columns in use (the next token of every row goes to this column)

    @staticmethod
    def supports(model: Any) -> bool:
        return lean_supported(model) and context_length(model) is not None

    def room(self) -> int:
        """Rows that can join now."""
        return self.capacity - self.n

    def admit(self, prompts: list[list[int]], rows: list[int], budget: int) -> torch.Tensor:
        """Prefill `prompts` (each at most context - 1 tokens) and add one live row per entry of `rows`
        (an index into prompts: a prompt with n choices appears n times). Returns their logits [m, vocab].
        `budget` (the most tokens any of them may generate) is not needed here: the buffer is sized once."""
        assert self.n + len(rows) <= self.capacity
        ids, mask = left_padded(prompts, self.pad_id, self.device)
        width = ids.shape[1]
        with torch.inference_mode():
            pre = make_runner(self.model, len(prompts), width, backend="lean")
            logits = pre.prefill(ids, mask)
            if self.n == 0:
                self.length = width
            elif width > self.length:
                self._shift(width - self.length)
            n, m, end = self.n, len(rows), self.length
            index = torch.tensor(rows, dtype=torch.long, device=self.device)
            for cache, prefilled in zip(self.runner.cache_view(), pre.cache_view(), strict=True):
                cache[:, n:n + m, :, end - width:end] = prefilled[:, index, :, :width]
            for j, r in enumerate(rows):
                start = end - len(prompts[r])
                self.valid[n + j, :start] = False
                self.valid[n + j, start:] = True
                self.positions[n + j] = len(prompts[r])
                self.starts[n + j] = start
            self.n += m
            return logits[index]

    def remove(self, leaving: list[int]) -> list[tuple[int, int]]:
        """Drop rows; live rows from the end move into the holes. Returns the (from, to) moves."""
        gone = set(leaving)
        new_n = self.n - len(gone)
        holes = [i for i in sorted(gone) if i < new_n]
        movers = [i for i in range(new_n, self.n) if i not in gone]
        if holes:
            to = torch.tensor(holes, dtype=torch.long, device=self.device)
            src = torch.tensor(movers, dtype=torch.long, device=self.device)
            end = self.length
            with torch.inference_mode():
                for cache in self.runner.cache_view():
                    cache[:, to, :, :end] = cache[:, src, :, :end]
                self.valid[to] = self.valid[src]
                self.positions[to] = self.positions[src]
            for a, b in zip(movers, holes, strict=True):
                self.starts[b] = self.starts[a]
        self.n = new_n
        if self.n == 0:
            self.length = 0
        return list(zip(movers, holes, strict=True))

    def step(self, next_ids: list[int]) -> torch.Tensor:
        """Feed each live row its chosen token; logits of the next one [n, vocab]."""
        if self.length + 1 > self.columns:
            self._compact()
        n = self.n
        if n == 1 and self.starts[0] > 0:
            self._compact()  # one row: shifting it to column 0 costs one row's copy and saves the mask below
        # No row padded on the left: no attention mask at all (the engine's fast path for one new token).
        self.runner.use_rows(n, self.length, self.positions[:n], None if not any(self.starts[:n]) else self.valid[:n])
        with torch.inference_mode():
            logits = self.runner.step(torch.tensor(next_ids, dtype=torch.long, device=self.device))
        self.length += 1
        return logits

    def _shift(self, offset: int) -> None:
        """Move every live row `offset` columns right (> 0) or left (< 0)."""
        n, end = self.n, self.length
        k, v = self.runner.cache_view()
        if offset > 0:
            k[:, :n, :, offset:offset + end] = k[:, :n, :, :end].clone()
            v[:, :n, :, offset:offset + end] = v[:, :n, :, :end].clone()
            self.valid[:n, offset:offset + end] = self.valid[:n, :end].clone()
            self.valid[:n, :offset] = False
        else:
            s = -offset
            k[:, :n, :, :end - s] = k[:, :n, :, s:end].clone()
            v[:, :n, :, :end - s] = v[:, :n, :, s:end].clone()
            self.valid[:n, :end - s] = self.valid[:n, s:end].clone()
            self.valid[:n, end - s:] = True
        for i in range(n):
            self.starts[i] += offset
        self.length += offset

    def _compact(self) -> None:
        """Shift left past the columns no live row uses (at the buffer's end there are >= context of them)."""
        shift = min(self.starts[: self.n])
        if shift <= 0:
            if self.length + 1 > self.columns:
                raise RuntimeError("decode cache is full (a row outgrew the model's context)")
            return
        with torch.inference_mode():
            self._shift(-shift)


class GraphSlotCache(SlotCache):
    """SlotCache's layout over the engine's StaticDecoder (static_cache.py): the same rows, columns, shifts
    and moves, but each step runs the first rows of a batch bucket over a length bucket of columns, replayed
    as that bucket pair's CUDA graph (cuda_graphs.py) on a GPU, eagerly elsewhere. Rows past the live ones in
    the bucket are idle. Chosen by the batcher on CUDA; the CPU keeps SlotCache (the lean runner is faster
    there)."""

    def __init__(self, model: Any, capacity: int, pad_id: int, graphs: bool | None = None):
        context = context_length(model)
        assert context is not None and static_supported(model)
        self.model, self.capacity, self.pad_id, self.context = model, capacity, pad_id, context
        self.columns = 2 * context  # as SlotCache: a free stretch of >= context columns to shift into
        self.device = next(model.parameters()).device
        self.runner: Any = StaticDecoder(model, batch_bucket(capacity), self.columns, graphs=graphs)
        self.valid, self.positions = self.runner.row_state()  # shared with the decoder
        self.starts = [0] * capacity
        self.n = 0
        self.length = 0
        self.logits = self.runner.logits_buffer()

    @property
    def reason(self) -> str:
        """How the steps run: CUDA graphs, or why not."""
        return self.runner.reason

    @staticmethod
    def supports(model: Any) -> bool:
        return static_supported(model) and context_length(model) is not None

    def remove(self, leaving: list[int]) -> list[tuple[int, int]]:
        """SlotCache.remove, then the freed rows idle harmlessly (a step runs a whole batch bucket: rows past the
        live ones compute too, and a stale row with no valid column would fill its cache with NaN)."""
        before = self.n
        moves = super().remove(leaving)
        self.runner.idle_rows(self.n, before)
        return moves

    def admit(self, prompts: list[list[int]], rows: list[int], budget: int) -> torch.Tensor:
        assert self.n + len(rows) <= self.capacity
        width = max(len(p) for p in prompts)
        with torch.inference_mode():
            if self.n == 0:
                self.length = width
            elif width > self.length:
                self._shift(width - self.length)
            self.runner.refresh()
            logits = self.runner.prefill(prompts, rows, self.n, self.pad_id, start_column=self.length - width)
        for j, r in enumerate(rows):
            self.starts[self.n + j] = self.length - len(prompts[r])
        self.n += len(rows)
        return logits

    def step(self, next_ids: list[int]) -> torch.Tensor:
        if self.length + 1 > self.columns:
            self._compact()
        d, n = self.runner, self.n
        rows = batch_bucket(n)
        length = d.length_bucket(self.length + 1)
        with torch.inference_mode():
            d.feed(next_ids, self.length)
            d.logits_step(rows, length, self.logits)
        self.length += 1
        return self.logits[:n]


class FixedBatch:
    """Static batching through any runner: rows that arrive together decode together; a finished row
    stays in the batch (fed padding) until the whole batch is done, and only then can new rows join."""

    continuous = False

    def __init__(self, model: Any, capacity: int, pad_id: int):
        self.model, self.capacity, self.pad_id = model, capacity, pad_id
        self.device = next(model.parameters()).device
        self.runner: Any = None
        self.n = 0
        self.dead: set[int] = set()

    def room(self) -> int:
        return self.capacity if self.runner is None else 0

    def admit(self, prompts: list[list[int]], rows: list[int], budget: int) -> torch.Tensor:
        assert self.runner is None
        expanded = [prompts[r] for r in rows]
        ids, mask = left_padded(expanded, self.pad_id, self.device)
        with torch.inference_mode():
            self.runner = make_runner(self.model, len(rows), ids.shape[1] + budget)
            logits = self.runner.prefill(ids, mask)
        self.n, self.dead = len(rows), set()
        return logits

    def remove(self, leaving: list[int]) -> list[tuple[int, int]]:
        self.dead.update(leaving)
        if len(self.dead) >= self.n:
            self.runner, self.n, self.dead = None, 0, set()
        return []

    def step(self, next_ids: list[int]) -> torch.Tensor:
        ids = [self.pad_id if i in self.dead else t for i, t in enumerate(next_ids)]
        with torch.inference_mode():
            return self.runner.step(torch.tensor(ids, dtype=torch.long, device=self.device))
