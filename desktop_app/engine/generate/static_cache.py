"""The static KV cache and decode state of one model, kept across calls, sized from the free GPU memory.

`StaticDecoder` owns everything a decode step reads or writes, allocated once at fixed shapes:
  k_cache, v_cache  [layers, rows, kv_heads, columns, head_dim]
  tokens [rows], positions [rows]   the token each row feeds next and its position id
  column [1]                        the cache column this step writes (the same for every row: prompts of
                                    different lengths are padded on the left, as in the lean runners)
  valid [rows, columns]             columns holding a real token (False over left padding)
so a step (static_models.py) is one fixed-shape computation per (batch bucket, length bucket) and can be
replayed as a CUDA graph (cuda_graphs.py). Rows past the live ones in a bucket are idle: they compute
on whatever their slots hold and nobody reads their results.

One decoder per model is kept (`decoder_for`) and reused by the next call when it is big enough, graphs
included: chat requests, rollout rounds and benchmark repeats after the first pay no allocation or
capture. It grows when a call needs more rows or columns. When the model's parameters are replaced (new
tensors: `.to()`, another model) it is rebuilt. Weights that change in place (an optimizer step between
rollout rounds) need nothing: every call starts by rewriting the prepared copies in place (`refresh`), a
device copy of ~2/3 of a llama's weights (~0.1 ms at 124M on an H100; none for gpt2), since fused
optimizers change weights without bumping the tensor versions that could have told.

Memory: `check_fits` compares what a cache needs with torch.cuda.mem_get_info's free memory (leaving a
reserve for activations) and refuses with one clear line when it does not fit; `rows_that_fit` says how
many rows would (rollouts split their batch by it). Both count the decoder a call will take over
(`reusable_decoder`: the kept one, reused or freed before a bigger one is allocated) as free: a repeat call
near the limit is neither split nor refused because of its own cache.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Sequence
from typing import Any

import torch

from desktop_app.engine.devices import is_out_of_memory
from desktop_app.engine.errors import UserError
from desktop_app.engine.generate.buckets import batch_bucket, length_bucket, length_buckets
from desktop_app.engine.generate.cuda_graphs import GraphSet, Snapshot
from desktop_app.engine.generate.device_sampling import DeviceSampling, StopState
from desktop_app.engine.generate.runners import left_padded
from desktop_app.engine.generate.static_models import StaticModel, static_model

_COLUMN_STEP = 64
# Free GPU memory left alone when sizing a cache: prefill activations, logits, graph pools, the allocator's
# fragmentation, and whatever else runs beside (a training step between rollout rounds).
_RESERVE_SHARE = 0.10
_RESERVE_MIN = 512 << 20


def kv_bytes_per_row(model: Any, columns: int) -> int:
    """Bytes of keys and values one row of `columns` cached tokens takes (all layers)."""
    cfg = model.config
    layers = getattr(cfg, "num_hidden_layers", None) or getattr(cfg, "n_layer", 1)
    heads = getattr(cfg, "num_attention_heads", None) or getattr(cfg, "n_head", 1)
    kv = getattr(cfg, "num_key_value_heads", None) or heads
    hidden = getattr(cfg, "hidden_size", None) or getattr(cfg, "n_embd", 64)
    head_dim = getattr(cfg, "head_dim", None) or hidden // heads
    element = next(model.parameters()).element_size()
    return 2 * layers * kv * columns * head_dim * element


def row_bytes(model: Any, columns: int) -> int:
    """Per row: keys/values, plus fp32 logits and sampler state over the vocabulary (a few copies)."""
    vocab = int(getattr(model.config, "vocab_size", 0) or 0)
    return kv_bytes_per_row(model, columns) + 6 * 4 * vocab + columns


def free_memory(device: torch.device) -> int | None:
    """Bytes the allocator can still get on `device` (CUDA: free + cached-but-unused), None elsewhere."""
    if device.type != "cuda":
        return None
    free, _ = torch.cuda.mem_get_info(device)
    return int(free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device))


def _usable(free: int, device: torch.device) -> int:
    total = torch.cuda.get_device_properties(device).total_memory if device.type == "cuda" else free
    return max(0, free - max(_RESERVE_MIN, int(_RESERVE_SHARE * total)))


def _available(model: Any, free: int | None, kept: StaticDecoder | None) -> int | None:
    """The free memory reading (`free`, else measured) plus what the kept decoder the call takes over holds."""
    free = free_memory(next(model.parameters()).device) if free is None else free
    if free is None:
        return None
    return free + (kept.nbytes() if kept is not None else 0)


def rows_that_fit(model: Any, columns: int, free: int | None = None, kept: StaticDecoder | None = None) -> int | None:
    """How many rows of `columns` columns fit in the free memory (None: no limit known, e.g. on the CPU).

    free: the reading to use (default: measured now). kept: the decoder the call will reuse or replace
    (`reusable_decoder`): its memory counts as free, and its own rows always fit when its columns suffice."""
    available = _available(model, free, kept)
    if available is None:
        return None
    fit = _usable(available, next(model.parameters()).device) // row_bytes(model, columns)
    if kept is not None and kept.columns >= columns:
        fit = max(fit, kept.rows)
    return fit


def check_fits(model: Any, rows: int, columns: int, free: int | None = None,
               kept: StaticDecoder | None = None) -> None:
    """UserError (one line, with the figures) when `rows` x `columns` of cache will not fit in the GPU memory
    (free, kept: as for rows_that_fit)."""
    device = next(model.parameters()).device
    free = _available(model, free, kept)
    if free is None or (kept is not None and kept.rows >= rows and kept.columns >= columns):
        return
    need = rows * row_bytes(model, columns)
    usable = _usable(free, device)
    if need > usable:
        fit = usable // row_bytes(model, columns)
        raise UserError(f"the decode cache for {rows} rows x {columns} tokens needs {need / 2**30:.2f} GiB of GPU "
                        f"memory but only {usable / 2**30:.2f} GiB is free to use ({free / 2**30:.2f} GiB free, "
                        f"less a reserve): at most {fit} rows fit; ask for fewer samples or shorter texts, or free "
                        "GPU memory")


class StaticDecoder:
    """Fixed-shape decode state of one model (see the module doc). Not thread-safe: one user at a time
    (`decoder_for` hands a busy decoder's caller a private one)."""

    def __init__(self, model: Any, rows: int, columns: int, *, graphs: bool | None = None,
                 compile_steps: bool = False):
        math = static_model(model)
        if math is None:
            raise ValueError(f"the static decode path does not support {type(model).__name__}")
        self.math: StaticModel = math
        self.model = model
        self.device, self.dtype = math.device, math.dtype
        self.rows, self.columns = rows, columns
        self.lock = threading.Lock()
        self.signature = _signature(model)
        self.graphs = GraphSet(self.device, graphs, compile_steps=compile_steps)
        self._length_buckets = length_buckets(columns)
        check_fits(model, rows, columns)
        try:
            self._allocate()
        except RuntimeError as exc:
            if not is_out_of_memory(exc):
                raise
            raise UserError(f"the decode cache for {rows} rows x {columns} tokens does not fit in the GPU memory "
                            f"(out of memory while allocating it): ask for fewer samples or shorter texts") from exc

    def _allocate(self) -> None:
        m, d = self.math, self.device
        shape = (m.layers, self.rows, m.kv_heads, self.columns, m.head_dim)
        with torch.inference_mode(False), torch.no_grad():
            self.k_cache = torch.zeros(shape, dtype=self.dtype, device=d)
            self.v_cache = torch.zeros(shape, dtype=self.dtype, device=d)
            self.tokens = torch.zeros(self.rows, dtype=torch.long, device=d)
            self.positions = torch.zeros(self.rows, dtype=torch.long, device=d)
            self.column = torch.zeros(1, dtype=torch.long, device=d)
            self.valid = torch.ones(self.rows, self.columns, dtype=torch.bool, device=d)
            self.arange = torch.arange(self.columns, device=d)
            self.zero = torch.zeros((), dtype=self.dtype, device=d)
            self.minus_inf = torch.full((), float("-inf"), dtype=self.dtype, device=d)
            m.tables(self.columns)
        self._sampling: DeviceSampling | None = None
        self._stops: StopState | None = None

    def nbytes(self) -> int:
        """Bytes of the state this decoder allocated per row (cache, flags, sampler and stop buffers): what a
        call taking it over can count as free (the prepared weight copies and the graph pool aside)."""
        tensors = [self.k_cache, self.v_cache, self.valid, self.tokens, self.positions]
        for part in (self._sampling, self._stops):
            if part is not None:
                tensors += part.buffers()
        return sum(t.numel() * t.element_size() for t in tensors)

    def sampling(self) -> DeviceSampling:
        """The on-device sampler's buffers (kept with the decoder: captured graphs read them)."""
        if self._sampling is None:
            self._sampling = DeviceSampling(self.rows, self.math.vocab, self.device)
        return self._sampling

    def cache_view(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The key and value caches [layers, rows, kv heads, columns, head_dim]: the tensors themselves, so a
        caller moving rows writes the cache (engine/generate/slot_cache.py)."""
        return self.k_cache, self.v_cache

    def row_state(self) -> tuple[torch.Tensor, torch.Tensor]:
        """valid [rows, columns] (the columns holding a real token) and positions [rows] (each row's next position
        id): the tensors the steps read, so a caller moving rows writes them."""
        return self.valid, self.positions

    def logits_buffer(self) -> torch.Tensor:
        """A float32 [rows, vocab] buffer for `logits_step` to write into (a graph keeps its address)."""
        return torch.zeros(self.rows, self.math.vocab, device=self.device)

    @property
    def reason(self) -> str:
        """How the steps run: CUDA graphs, or why not."""
        return self.graphs.reason

    def stops(self) -> StopState:
        """The on-device token log and stop flags (kept with the decoder, like sampling())."""
        if self._stops is None:
            self._stops = StopState(self.rows, self.math.vocab, self.device)
        return self._stops

    # --- weights ------------------------------------------------------------------------------------
    def matches(self, model: Any) -> bool:
        """Still the same parameter tensors (moved or replaced parameters need a new decoder)."""
        return model is self.model and _signature(model) == self.signature

    def refresh(self) -> None:
        """Re-read the weights (prepared copies rewritten in place): at the start of every call."""
        self.math.refresh()

    # --- prefill ------------------------------------------------------------------------------------
    def prefill(self, prompts: list[list[int]], rows: list[int], dest: int, pad_id: int,
                start_column: int = 0) -> torch.Tensor:
        """Prefill the distinct `prompts` (left-padded together) into cache rows dest .. dest + len(rows) - 1,
        row dest + j holding prompts[rows[j]], ending at column start_column + the longest prompt. Marks the
        columns left of each prompt invalid and sets each row's next position. Returns the last position's
        logits of each new row [len(rows), vocab] (float32)."""
        longest = max(len(p) for p in prompts)
        end = start_column + longest
        if end > self.columns:
            raise ValueError(f"a prompt of {longest} tokens does not fit {self.columns - start_column} free columns")
        d = self.device
        with torch.inference_mode():
            ids, mask = left_padded(prompts, pad_id, d)
            if mask is not None:
                pos = (mask.cumsum(-1) - 1).clamp_(min=0)
            else:
                pos = torch.arange(longest, device=d).expand(len(prompts), longest)
            index = torch.tensor(rows, dtype=torch.long, device=d)
            n = len(rows)
            # A reused row may hold what an idle row computed (NaN where none of its columns was valid): masked
            # columns still meet the attention's matmul (0 x NaN = NaN), so the rows start clean.
            self.k_cache[:, dest:dest + n].zero_()
            self.v_cache[:, dest:dest + n].zero_()

            def sink(layer: int, keys: torch.Tensor, values: torch.Tensor) -> None:
                self.k_cache[layer, dest:dest + n, :, start_column:end] = keys.index_select(0, index)
                self.v_cache[layer, dest:dest + n, :, start_column:end] = values.index_select(0, index)

            logits = self.math.prefill(ids, pos, mask, sink).float()
            for j, r in enumerate(rows):
                start = end - len(prompts[r])
                self.valid[dest + j, :start] = False
                self.valid[dest + j, start:] = True
            lengths = torch.tensor([len(p) for p in prompts], dtype=torch.long, device=d)
            self.positions[dest:dest + n] = lengths.index_select(0, index)
            return logits.index_select(0, index)

    def idle_rows(self, first: int, last: int) -> None:
        """Make rows first .. last - 1 harmless idle rows (every column valid: their attention stays finite)."""
        if last > first:
            with torch.inference_mode(False), torch.no_grad():
                self.valid[first:last] = True
                self.positions[first:last] = 0
                self.tokens[first:last] = 0

    # --- the step -----------------------------------------------------------------------------------
    def length_bucket(self, columns: int) -> int:
        for size in self._length_buckets:
            if columns <= size:
                return size
        return length_bucket(columns, self.columns)

    def step_logits(self, rows: int, length: int) -> torch.Tensor:
        """One step of the first `rows` rows (a batch bucket) attending over the first `length` columns (a
        length bucket covering column + 1): logits [rows, vocab] in float32. Writes keys/values at `column`,
        then advances every row's position and the column. Fixed shapes, no host reads: capturable."""
        m = self.math
        col = self.column
        # Idle rows may have run past the position tables: clamp (they are never read).
        limit = self.columns - 1 if m.max_positions is None else min(self.columns, m.max_positions) - 1
        positions = self.positions[:rows].clamp(max=limit)
        attend = self.valid[:rows, :length] & (self.arange[:length] <= col)
        bias = torch.where(attend, self.zero, self.minus_inf).unsqueeze(1)  # [rows, 1, length], additive
        if m.kv_heads > 1:  # one copy per kv head: [rows * kv, 1, length] (expand + reshape: no host read)
            bias = bias.unsqueeze(1).expand(rows, m.kv_heads, 1, length).reshape(rows * m.kv_heads, 1, length)
        k_layers = [self.k_cache[i, :rows, :, :length] for i in range(m.layers)]
        v_layers = [self.v_cache[i, :rows, :, :length] for i in range(m.layers)]
        logits = m.step(self.tokens[:rows], positions, col, k_layers, v_layers, bias).float()
        self.positions[:rows] += 1
        col += 1
        return logits

    def feed(self, tokens: Sequence[int], column: int) -> None:
        """The tokens rows 0 .. len(tokens) - 1 feed the next step, which writes cache column `column`."""
        self.tokens[: len(tokens)] = torch.tensor(list(tokens), dtype=torch.long, device=self.device)
        self.column.fill_(column)

    def logits_step(self, rows: int, length: int, out: torch.Tensor) -> None:
        """`step_logits(rows, length)` written into out[:rows] (a `logits_buffer`), replayed as that bucket pair's
        CUDA graph where graphs run."""
        def step() -> None:
            out[:rows].copy_(self.step_logits(rows, length))
        self.graphs.run(("logits", rows, length), step, self.snapshot())

    def snapshot(self, extra: Sequence[torch.Tensor] = ()) -> Snapshot:
        """A Snapshot (cuda_graphs.py) of the state a step changes, plus `extra` tensors of the caller's."""
        def save() -> Any:
            tensors = [self.tokens, self.positions, self.column, *extra]
            copies = [t.clone() for t in tensors]

            def restore() -> None:
                for t, c in zip(tensors, copies, strict=True):
                    t.copy_(c)
            return restore
        return save


def _signature(model: Any) -> tuple:
    return tuple((p.data_ptr(), p.dtype, tuple(p.shape), str(p.device)) for p in model.parameters())


# model -> {(graphs, compile): its decoder}, reused across calls (weak: a dropped model frees its cache)
_DECODERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()
_REGISTRY_LOCK = threading.Lock()


def round_columns(columns: int) -> int:
    """The columns a decoder holding `columns` tokens allocates (a multiple of 64)."""
    return -(-columns // _COLUMN_STEP) * _COLUMN_STEP


def decoder_for(model: Any, rows: int, columns: int, *, graphs: bool | None = None,
                compile_steps: bool = False) -> StaticDecoder:
    """A decoder of at least `rows` rows (rounded up to a batch bucket) and `columns` columns for `model`:
    the kept one when it is big enough and free, else a bigger one (kept for the next call), or a private
    one while the kept one is busy (another thread is decoding). Lock it (`decoder.lock`) while in use.
    graphs: None/True = CUDA graphs where available, False = eager steps; compile_steps: see GraphSet."""
    rows, columns = batch_bucket(rows), round_columns(columns)
    mode = (graphs is not False, bool(compile_steps))
    with _REGISTRY_LOCK:
        kept_by_mode = _DECODERS.setdefault(model, {})
        kept: StaticDecoder | None = kept_by_mode.get(mode)
        if kept is not None and kept.matches(model):
            if kept.rows >= rows and kept.columns >= columns:
                return kept
            if kept.lock.locked():
                return StaticDecoder(model, rows, columns, graphs=graphs, compile_steps=compile_steps)
            rows, columns = max(rows, kept.rows), max(columns, kept.columns)
        if kept is not None:
            del kept_by_mode[mode]
            kept = None  # free its cache before allocating the new one
            if next(model.parameters()).device.type == "cuda":
                torch.cuda.empty_cache()
        decoder = StaticDecoder(model, rows, columns, graphs=graphs, compile_steps=compile_steps)
        kept_by_mode[mode] = decoder
        return decoder


def reusable_decoder(model: Any, graphs: bool | None = None, compile_steps: bool = False) -> StaticDecoder | None:
    """The kept decoder a `decoder_for` call in this mode will take over (reuse it, or free it before allocating a
    bigger one), so its memory is the call's to use; None when none is kept or it is busy (another thread
    decodes with it: the call would get a private decoder beside it)."""
    with _REGISTRY_LOCK:
        kept = (_DECODERS.get(model) or {}).get((graphs is not False, bool(compile_steps)))
    return None if kept is None or kept.lock.locked() else kept


def release_decoder(model: Any) -> None:
    """Drop the kept decoders of `model` (caches and graphs), e.g. before a training phase needs the memory."""
    with _REGISTRY_LOCK:
        _DECODERS.pop(model, None)


def kept_decoder(model: Any, graphs: bool = True, compile_steps: bool = False) -> StaticDecoder | None:
    """The decoder kept for `model` in that mode, if any (tests and benchmarks look at its graphs)."""
    return (_DECODERS.get(model) or {}).get((graphs, compile_steps))
