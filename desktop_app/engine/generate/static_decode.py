"""The static decode loop: prefill, then fixed-shape steps (CUDA graphs on a GPU), tokens read every few steps.

What each piece does:
- static_cache.py: the per-model decoder kept across calls (KV cache, positions, valid columns) sized from
  the free GPU memory; static_models.py: the llama / gpt2 step and prefill math.
- cuda_graphs.py: each (batch bucket, length bucket, sampler settings) step captured once, then replayed.
- device_sampling.py: the next token is chosen and logged on the device; rows end there on a stop token
  or a line limit.
This module drives them: `StaticGeneration.run()` yields `Chunk`s of new tokens. The first chunk is the
first token alone, read at once (time to first token = prefill + one pick); after that, the host launches
step after step and every `sync_every` steps queues a copy of the token log to pinned memory with an event,
reading a chunk only when its copy has landed (or when more than two are queued), so the GPU never waits
for Python to turn tokens into text. A row that ended on the device (stop token, line limit) logs -1
after its last token; stop strings are found by the caller in the text, which ends those rows with
`finish_rows`. Once every row has ended the loop stops; rows may have run a few idle steps past their end.

`use_static_path` is the runner factory's choice for generate, chat and rollouts: on CUDA, models the static
math covers (llama / gpt2 with standard layers) take this path, everything else keeps today's runners
(runners.py), with the reason logged once per model.
"""

from __future__ import annotations

import logging
import os
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch

from desktop_app.engine.generate.buckets import batch_bucket, bucket_at_most
from desktop_app.engine.generate.device_sampling import RING, StopState
from desktop_app.engine.generate.settings import DecodeLimits, PromptRows, SamplingSettings
from desktop_app.engine.generate.static_cache import (
    StaticDecoder,
    check_fits,
    decoder_for,
    reusable_decoder,
    round_columns,
    rows_that_fit,
)
from desktop_app.engine.generate.static_models import static_supported

log = logging.getLogger(__name__)

DEFAULT_SYNC_EVERY = 8  # steps between token reads on a GPU (the CPU reads every step: it costs nothing there)
_MAX_PENDING = 2  # token reads queued before the host waits for the oldest
_LOGGED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def use_static_path(model: Any, backend: str = "auto") -> tuple[bool, str]:
    """Whether generation with `model` takes the static path, and why. backend: auto|static|lean|hf.

    auto: on CUDA for models the static math covers; elsewhere (CPU, MPS, other architectures) today's
    runners. AZR_DECODE_STATIC=0 keeps CUDA on today's runners too. "static" forces it (also on the CPU,
    where tests check it), raising ValueError for a model it does not cover."""
    device = next(model.parameters()).device
    if backend == "static":
        if not static_supported(model):
            raise ValueError(f"the static decode path does not support {type(model).__name__}")
        return True, "static decode path as asked"
    if backend != "auto":
        return False, f"the {backend} runner as asked"
    if device.type != "cuda":
        return False, f"on {device.type} the lean runners decode (tuned for CPUs)"
    if os.environ.get("AZR_DECODE_STATIC", "1") == "0":
        return False, "the static decode path is turned off (AZR_DECODE_STATIC=0): the lean runners decode"
    if not static_supported(model):
        return False, (f"the static decode path does not cover {type(model).__name__} (only llama and gpt2 with "
                       "standard layers): the lean / transformers runners decode")
    return True, "on CUDA: static KV cache, steps replayed as CUDA graphs, sampling and stop checks on the GPU"


def log_choice(model: Any, reason: str) -> None:
    """Log the decode path's reason once per model."""
    try:
        if _LOGGED.get(model) == reason:
            return
        _LOGGED[model] = reason
    except TypeError:  # not weak-referenceable: log every time
        pass
    log.info("decoding %s: %s", type(model).__name__, reason)


@dataclass
class Chunk:
    """New tokens of every row since the last chunk (empty for rows with none), read at time `at`."""

    tokens: list[list[int]]
    at: float


class _Readback:
    """A queued copy of the token log (and done flags) to host memory for steps first .. last - 1."""

    def __init__(self, stops: StopState, rows: int, first: int, last: int, buffers: tuple[torch.Tensor, torch.Tensor]):
        self.first, self.last = first, last
        self.ring, self.done = buffers
        self.ring[:rows].copy_(stops.ring[:rows], non_blocking=True)
        self.done[:rows].copy_(stops.done[:rows], non_blocking=True)
        self.event: Any = None
        if stops.device.type == "cuda":
            self.event = torch.cuda.Event()
            self.event.record()

    def ready(self) -> bool:
        return self.event is None or self.event.query()

    def tokens(self, rows: int) -> list[list[int]]:
        if self.event is not None:
            self.event.synchronize()
        slots = [s % RING for s in range(self.first, self.last)]
        table = self.ring[:rows, slots].tolist() if slots else [[] for _ in range(rows)]
        return [[t for t in row if t >= 0] for row in table]


@dataclass(frozen=True)
class StaticOptions:
    """How the static path runs: token reads every `sync_every` steps (None: 8 on a GPU, every step elsewhere),
    steps as CUDA graphs (`graphs`: None/True where available, False eager) and `compile_steps` (see GraphSet)."""

    sync_every: int | None = None
    graphs: bool | None = None
    compile_steps: bool = False


class StaticGeneration:
    """One call's decoding over the model's kept StaticDecoder: the `rows` (samples per prompt, prompt-major),
    each ending at a stop id or its line limit (`limits`, on the device) or after `limits.budget` new tokens.
    Iterate `run()`; call `finish_rows` to end rows early (stop strings)."""

    def __init__(self, model: Any, rows: PromptRows, limits: DecodeLimits,
                 settings: SamplingSettings = SamplingSettings(), seed: int | Sequence[int] = 0,
                 options: StaticOptions = StaticOptions()):
        if not rows.prompts or limits.budget < 1 or rows.samples < 1:
            raise ValueError("a static generation needs prompts, a budget and samples of at least 1")
        self.model, self.prompts = model, [list(p) for p in rows.prompts]
        self.budget, self.samples, self.settings, self.seed = limits.budget, rows.samples, settings, seed
        self.limits, self.pad_id, self.options = limits, rows.pad_id, options
        self.n = len(self.prompts) * rows.samples
        device = next(model.parameters()).device
        default = DEFAULT_SYNC_EVERY if device.type == "cuda" else 1
        self.sync_every = max(1, min(RING // 2, options.sync_every or default))
        self.decoder: StaticDecoder | None = None
        self._ended: set[int] = set()

    def _acquire(self) -> StaticDecoder:
        longest = max(len(p) for p in self.prompts)
        graphs, compile_steps = self.options.graphs, self.options.compile_steps
        decoder = decoder_for(self.model, self.n, longest + self.budget, graphs=graphs, compile_steps=compile_steps)
        if not decoder.lock.acquire(blocking=False):  # another thread decodes with the kept one
            decoder = StaticDecoder(self.model, batch_bucket(self.n), decoder.columns, graphs=graphs,
                                    compile_steps=compile_steps)
            decoder.lock.acquire()
        return decoder

    def finish_rows(self, rows: Sequence[int]) -> None:
        """End these rows (stop strings): the device stops logging their tokens."""
        self._ended.update(rows)
        if self.decoder is not None:
            self.decoder.stops().finish_rows(list(rows))

    def run(self) -> Iterator[Chunk]:
        decoder = self._acquire()
        self.decoder = decoder
        try:
            yield from self._run(decoder)
        finally:
            self.decoder = None
            decoder.lock.release()

    def _run(self, d: StaticDecoder) -> Iterator[Chunk]:
        n, b = self.n, batch_bucket(self.n)
        longest = max(len(p) for p in self.prompts)
        rows_of = [i for i in range(len(self.prompts)) for _ in range(self.samples)]
        buffers = _host_buffers(d, n)
        with torch.inference_mode():
            d.refresh()
            sampling, stops = d.sampling(), d.stops()
            sampling.start(self.settings, self.seed, [self.prompts[i] for i in rows_of])
            stops.start(n, self.limits.stop_ids, self.limits.newline_ids, self.limits.max_lines)
            d.idle_rows(n, b)
            logits = d.prefill(self.prompts, rows_of, 0, self.pad_id)
            d.column.fill_(longest)
            sampling.draw(n)
            ids = sampling.pick(logits)
            stops.record(ids)
            d.tokens[:n] = ids
            first = _Readback(stops, n, 0, 1, buffers[0])
        chunk = Chunk(first.tokens(n), time.perf_counter())
        yield chunk
        alive = self._alive(first, n)
        if not alive or self.budget == 1:
            return
        settings_key = sampling.key
        snapshot = d.snapshot(sampling.mutable() + stops.mutable())
        pending: deque[_Readback] = deque()
        column, read_from, turn = longest, 1, 1
        for s in range(1, self.budget):
            with torch.inference_mode():
                length = d.length_bucket(column + 1)
                sampling.draw(b)
                d.graphs.run(("generate", b, length, settings_key, stops.count_lines), self._step(d, b, length),
                             snapshot)
                column += 1
                if s + 1 - read_from >= self.sync_every or s == self.budget - 1:
                    pending.append(_Readback(stops, n, read_from, s + 1, buffers[turn % len(buffers)]))
                    read_from, turn = s + 1, turn + 1
            while pending and (pending[0].ready() or len(pending) > _MAX_PENDING):
                done = pending.popleft()
                yield Chunk(done.tokens(n), time.perf_counter())
                if not self._alive(done, n):
                    return
        while pending:
            done = pending.popleft()
            yield Chunk(done.tokens(n), time.perf_counter())

    def _alive(self, readback: _Readback, n: int) -> bool:
        """Whether any row still runs (neither ended on the device nor by the caller)."""
        if readback.event is not None:
            readback.event.synchronize()
        flags = readback.done[:n].tolist()
        return any(not f and b not in self._ended for b, f in enumerate(flags))

    @staticmethod
    def _step(d: StaticDecoder, rows: int, length: int) -> Callable[[], None]:
        sampling, stops = d.sampling(), d.stops()

        def step() -> None:
            ids = sampling.pick(d.step_logits(rows, length))
            stops.record(ids)
            d.tokens[:rows].copy_(ids)
        return step


def _host_buffers(d: StaticDecoder, rows: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Host memory for the token reads in flight (pinned on CUDA, so the copies run asynchronously)."""
    pin = d.device.type == "cuda"
    return [(torch.empty(rows, RING, dtype=torch.long, pin_memory=pin),
             torch.empty(rows, dtype=torch.bool, pin_memory=pin)) for _ in range(_MAX_PENDING + 2)]


def static_completions(model: Any, rows: PromptRows, limits: DecodeLimits, settings: SamplingSettings,
                       seed: int | Sequence[int] = 0, options: StaticOptions = StaticOptions()) -> list[list[int]]:
    """`rows.samples` completions per prompt (prompt-major) through the static path, each ending after its first
    stop id (kept) or its `limits.max_lines`-th line break. Batches that do not fit the free GPU memory at once
    run in groups of prompts that do (a group's seed is seed + its index; one seed per row: its rows' seeds); the
    kept decoder this call takes over counts as free memory."""
    prompts, samples = rows.prompts, rows.samples
    columns = round_columns(rows.longest + limits.budget)
    kept = reusable_decoder(model, options.graphs, options.compile_steps)
    fit = rows_that_fit(model, columns, kept=kept)
    per_group = len(prompts)
    if fit is not None:
        if bucket_at_most(fit) < samples:
            check_fits(model, batch_bucket(samples), columns, kept=kept)  # raises the one-line message
        per_group = max(1, bucket_at_most(fit) // samples)
    out: list[list[int]] = []
    for g, start in enumerate(range(0, len(prompts), per_group)):
        group = replace(rows, prompts=prompts[start:start + per_group])
        completions: list[list[int]] = [[] for _ in range(group.count)]
        group_seed = seed + g if isinstance(seed, int) else seed[start * samples:(start + per_group) * samples]
        run = StaticGeneration(model, group, limits, settings, group_seed, options)
        for chunk in run.run():
            for row, tokens in zip(completions, chunk.tokens, strict=True):
                row.extend(tokens)
        out.extend(completions)
    return out
